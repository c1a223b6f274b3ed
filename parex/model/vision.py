"""A vision transformer's two ends (ViT, Dosovitskiy et al. 2021, arXiv:2010.11929, Section 3.1).

The blocks between them are GPT's (parex.model.transformer), with attention that is not causal:
every patch sees every other. What differs is how an image enters and how it leaves:

    patches  x_p (B, N, P²·C)   an image cut into N = (image/P)² patches, each flattened
    read-in  z = [x_cls ; x_p·E + e_b] + E_pos       E[P²C, D_fsdp], the class token x_cls (D),
                                                     learned positions E_pos[T, D], T = N + 1
    read-out logits = LN(z_L[:, 0]) · W_head           the class token's output only, (B, 1, V)
    loss     cross-entropy against one label per image (targets (B, 1))

So a batch is {"inputs": (B, N, P²C) float32 patches, "targets": (B, 1) int32 labels}: the
label is a sequence of one, and the model's `vocab` is its number of classes. The patch map is a
linear layer on flattened patches (the paper's Eq. 1), the same as its stride-P convolution.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

READ_IN = ("patch_embed", "patch_bias", "cls", "positions")  # the parameters of the read-in


def read_in_table(cfg) -> dict:
    """(shape, dims) of the read-in's parameters: E[P²C, D] (embed dim, so fsdp splits it like a
    token table), its bias, the class token, the position table (T rows)."""
    D = cfg.hidden
    return {"patch_embed": ((cfg.patch_dim, D), (None, "embed")),
            "patch_bias": ((D,), ("hidden",)),
            "cls": ((D,), ("hidden",)),
            "positions": ((cfg.seq_len, D), (None, "embed"))}


def patchify(images: np.ndarray, patch: int) -> np.ndarray:
    """(B, H, W, C) images -> (B, N, P²·C) patches, row by row, each flattened (P, P, C)."""
    B, H, W, C = images.shape
    x = images.reshape(B, H // patch, patch, W // patch, patch, C)
    return x.transpose(0, 1, 3, 2, 4, 5).reshape(B, (H // patch) * (W // patch),
                                                 patch * patch * C)


def embed(params, patches, cfg, ops):
    """The read-in: (B, N, P²C) patches -> (B, T, D), the class token first."""
    x = jnp.einsum("bnp,pd->bnd", patches.astype(params["patch_embed"].dtype),
                   params["patch_embed"]) + params["patch_bias"]  # (B, N, D)
    cls = jnp.broadcast_to(params["cls"], (x.shape[0], 1, x.shape[-1]))
    x = jnp.concatenate([cls, x], axis=1) + params["positions"][: x.shape[1] + 1]
    return ops.constrain(x, ("batch", "seq_res", "hidden"))


def class_token(x):
    """The read-out's input: the class token's output (B, 1, D), a sequence of one."""
    return x[:, :1]


__all__ = ["READ_IN", "class_token", "embed", "patchify", "read_in_table"]
