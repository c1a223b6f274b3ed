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
# # 02 · Data parallelism and ZeRO 1/2/3: memory per device as N grows
#
# Plain data parallelism keeps a full copy of the model state — parameters, gradients and the two
# AdamW moments — on every device. ZeRO (Rajbhandari et al. 2019) shards that state over the N
# data-parallel devices in three stages: 1 the optimizer state, 2 also the gradients, 3 also the
# parameters (which is FSDP). With Ψ parameters and mixed-precision Adam (K = 12):
#
# | | model-state bytes per device | communication per step |
# |---|---|---|
# | DP | (2 + 2 + K)·Ψ | 2Ψ (all-reduce) |
# | ZeRO-1 | 4Ψ + KΨ/N | 2Ψ |
# | ZeRO-2 | 2Ψ + (2 + K)Ψ/N | 2Ψ |
# | ZeRO-3 | (2 + 2 + K)Ψ/N | 3Ψ (gathers forward and backward, reduce-scatter) |
#
# parex keeps master weights and optimizer state in fp32, so its per-parameter bytes differ from
# the paper's mixed-precision count, but the 1/N shapes are the same. Let us measure them.

# %%
import parex

parex.emulate_devices(8)

import jax  # noqa: E402
import pandas as pd  # noqa: E402

# %% tags=["parameters"]
offline = True
model_name = "tiny"
steps = 3
device_counts = [2, 4, 8]
strategies = ["dp", "zero1", "zero2", "fsdp"]

# %%
from parex import charts
from parex.figures import zero_table1

if offline:
    charts.enable_offline()
parex.ensure_local()  # the cpu-local profile the predictions read: measured once

# %% [markdown]
# ## Four strategies on 2, 4 and 8 devices
# The layout presets `dp`, `zero1`, `zero2` and `fsdp` (ZeRO-3) spread the same global batch over
# N devices. Each runs for real on the first N emulated devices, and the analytic model predicts
# the same numbers on the calibrated `cpu-local` profile.

# %%
model = parex.model_preset(model_name)
train = parex.TrainConfig(steps=steps, global_batch=16)
runs = []
for n in device_counts:
    for strategy in strategies:
        layout = parex.Layout.preset(strategy, n)
        m = parex.measure(model, train, layout, devices=jax.devices()[:n])
        p = parex.predict(model, train, layout, "cpu-local")
        runs.append(parex.records_frame([m, p]).assign(strategy=strategy))
frame = pd.concat(runs, ignore_index=True)
print(f"{len(frame) // 2} layouts measured and predicted: {', '.join(frame['layout'][::2])}")

# %% [markdown]
# ## Model state per device
# XLA's *argument* bytes are what the compiled step takes in: parameters, optimizer state and the
# batch slice. DP stays flat as N grows; each ZeRO stage shards more of it, and ZeRO-3 falls as 1/N.
# Measured lines are solid, predicted ones dashed.

# %%
measured = frame[frame["source"] == "measured"]
arguments = measured.pivot_table(index="n_devices", columns="strategy",
                                 values="memory_argument_bytes")
print(parex.format_frame(arguments, unit="bytes").to_string())
charts.scaling_chart(frame, y="memory_argument_bytes", by="strategy",
                     title="model state per device (XLA argument bytes)")

# %% [markdown]
# ZeRO-1 and ZeRO-2 take in the same arguments: gradients are not an input of the step but a
# temporary inside it, where ZeRO-2 keeps only a 1/N shard after the reduction. The total per
# device (arguments + outputs − donated + temp) tells all four apart; for a model this small the
# activations of the batch slice are most of it.

# %%
parex.format_frame(measured.pivot_table(index="n_devices", columns="strategy",
                                        values="memory_total_bytes"), unit="bytes")

# %% [markdown]
# Predicted against measured for every run, with the error of each: the argument bytes follow from
# the layout alone, so the prediction should be close to exact.

# %%
parex.format_frame(charts.pairs(frame, "memory_argument_bytes"), unit="bytes")

# %% [markdown]
# ## What each strategy communicates
# DP and ZeRO-1/2 all-reduce the gradients (a GPU compiler turns ZeRO-2's into a reduce-scatter;
# the CPU compiler keeps an all-reduce and slices it). FSDP also all-gathers the sharded weights
# before they are used, which is ZeRO-3's extra Ψ.

# %%
largest = frame[frame["n_devices"] == max(device_counts)]
columns = ["source", "layout", "comm_all_reduce_bytes", "comm_all_gather_bytes"]
print(parex.format_frame(largest[columns]).to_string(index=False))
charts.collectives_chart(largest)

# %% [markdown]
# ## The paper's Table 1
# predict()'s state memory with ZeRO's mixed-precision bytes (2 + 2 + 12 per parameter), for
# GPTs of the paper's 7.5B, 128B and 1T sizes on up to 1024 devices: GB per device, the paper's
# beside parex's. At ZeRO-3 on many devices parex's replicated biases and norms show.

# %%
zero = zero_table1()
parex.format_frame(zero[zero["n_d"].isin([4, 64, 1024])])
