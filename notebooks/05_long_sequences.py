# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     notebook_metadata_filter: -jupytext.text_representation.jupytext_version,-jupytext.text_representation.format_version
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 05 · Long sequences: splitting one sequence over many devices
#
# Attention's activations grow with the sequence length T — the scores as T² unless a fused kernel
# avoids storing them — so a long enough sequence no longer fits on one device, whatever its batch.
# Four ways to split one sequence over n devices, and what each costs:
#
# | split | layout | activations per device | communication |
# |---|---|---|---|
# | TP | `tensor=n` | split by heads / F; LayerNorm regions keep all T | all-reduces |
# | TP + SP | `tensor=n,sp=on` | LayerNorm regions split to T/n too | all-gather + reduce-scatter |
# | ring | `seq=n,cp=ring` | T/n everywhere, no scores | K, V around a ring (collective-permute) |
# | Ulysses | `seq=n,cp=ulysses` | T/n everywhere | all-to-all: sequence ↔ heads around attention |
#
# parex compiles each split for every length and reads memory and collectives from the compiled
# step — nothing runs, so the study is quick.

# %%
import parex

parex.emulate_devices(8)

# %% tags=["parameters"]
offline = True
model_name = "tiny"
lengths = [256, 512, 1024, 2048]
modes = ["single", "tp", "tp+sp", "ring", "ulysses"]

# %%
from parex import charts
from parex.studies import long_sequence_study, study_table

if offline:
    charts.enable_offline()

# %% [markdown]
# ## The study
# One compiled step per (length, split), on 8 devices (the `single` reference on one), with a
# global batch of one sequence: the regime where only splitting the sequence helps.

# %%
model = parex.model_preset(model_name)
study = long_sequence_study(model, lengths, modes, n=8, progress=True)
print(study_table(study))

# %% [markdown]
# ## Memory and communication against T
# On log–log axes a T² memory has twice the slope of a T one, and a split over n devices shifts a
# line down by log n. Ring and Ulysses divide the activations by n everywhere; TP leaves the
# LayerNorm regions whole, and SP fixes that. Ring attention's backward recomputes each block's
# probabilities from the saved output and log-sum-exp, so it keeps no scores, only those of the
# (T/2n)² block it works on; Ulysses keeps the (T, T) scores of its H/n heads. The ring's step
# also holds the blocks' weight gradients split over the n devices until the update, so a whole
# gradient per device no longer sets a floor under its split activations.

# %%
charts.long_sequence_chart(study)

# %% [markdown]
# ## Who communicates how much
# At the longest length: ring attention sends K and V around the ring (n − 1 hops), and again in
# the backward with their gradients (n permutes of 4(n − 1) blocks) and gathers the blocks' weight
# gradients once for the update, Ulysses re-shards with all-to-alls, TP all-reduces the
# activations twice per layer and direction.

# %%
longest = study[study["seq_len"] == max(lengths)]
parex.format_frame(longest[["mode", "memory_temp_bytes", "comm_total_bytes",
                            "comm_collective_permute_bytes", "comm_all_to_all_bytes"]])
