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
# # 03 · Tensor and sequence parallelism: the collectives of each layer
#
# Megatron tensor parallelism (TP) splits every weight matrix across t devices: the attention
# heads and the MLP's inner width (`W_in[D, F_tensor]`, `W_out[F_tensor, D]`). Each block then
# needs one all-reduce after attention and one after the MLP in the forward pass, and two more in
# the backward pass: **four all-reduces per layer**.
#
# Sequence parallelism (SP, Korthikanti et al. 2022) also splits the LayerNorm and dropout regions
# along the sequence. Each all-reduce becomes a reduce-scatter plus an all-gather — the same bytes,
# since an all-reduce *is* those two — while the activations there shrink t-fold. As in Megatron,
# each column-parallel matmul saves its sequence-split input and all-gathers it again in the
# backward: two more all-gathers per layer buy a t-fold smaller saved activation.

# %%
import parex

parex.emulate_devices(8)

import jax  # noqa: E402
import pandas as pd  # noqa: E402

# %% tags=["parameters"]
offline = True
model_name = "tiny"
steps = 3
tensor_sizes = [2, 4, 8]

# %%
from parex import charts
from parex.figures import korthikanti_table

if offline:
    charts.enable_offline()
parex.ensure_local()  # the cpu-local profile the predictions read: measured once

# %% [markdown]
# ## TP and TP+SP on t = 2, 4, 8 devices
# Each layout runs for real on the first t emulated devices; the collectives come from the
# compiled HLO, with loop trip counts included.

# %%
model = parex.model_preset(model_name)
train = parex.TrainConfig(steps=steps, global_batch=8)
layouts = [parex.Layout(tensor=t, sp=sp) for t in tensor_sizes for sp in (False, True)]
measured = [parex.measure(model, train, layout, devices=jax.devices()[:layout.n_devices])
            for layout in layouts]
predicted = [parex.predict(model, train, layout, "cpu-local") for layout in layouts]
frame = parex.records_frame(measured + predicted)
print(f"{model.layers} layers; measured and predicted " + ", ".join(map(str, layouts)))

# %% [markdown]
# ## Collectives per layer
# Grouped by kind, with the count divided by the layer count. Without SP: about four all-reduces
# per layer (plus a few for the embedding, the loss and the gradient norm). With SP: four
# reduce-scatters and six all-gathers instead (two of them the backward's re-gathers).

# %%
table = pd.DataFrame([c.to_json() | {"layout": m.layout} for m in measured for c in m.collectives])
per_kind = table.groupby(["layout", "kind"], sort=False)[["count", "bytes"]].sum()
parex.format_frame(per_kind.assign(**{"count per layer": per_kind["count"] / model.layers}))

# %% [markdown]
# ## Bytes by kind, measured and predicted
# The bytes are per device per step, counted as the full buffer each collective works on. That
# buffer is the layer's whole activation whatever t is, and a ring all-reduce moves about
# 2·(t − 1)/t of it over each device's links: TP's traffic does not shrink as t grows. It is the
# price of splitting every matmul, which is why TP stays inside a node. Above them, memory per
# device and step time, measured beside predicted.

# %%
charts.overview_chart(frame)

# %% [markdown]
# ## Activation memory at the paper's scale
# Korthikanti et al.'s Table 2 gives the activation bytes per layer for each combination of TP,
# SP and recomputation. predict()'s activation memory for the same configurations of the
# paper's four models (s = 2048, t = 8), beside the sum of the paper's per-component list.

# %%
ratios = korthikanti_table().pivot_table(index="configuration", columns="model", values="ratio")
parex.format_frame(ratios, unit="ratio")
