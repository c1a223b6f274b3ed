"""The model room: a GPT/Llama decoder in plain JAX that names logical dims only
(parex.model.transformer), its attention kernels (parex.model.attention) and mixtures of experts
(parex.model.moe). Nothing here knows a mesh: layouts map the dims onto axes (parex.layout)."""
