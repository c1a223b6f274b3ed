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
# # 06 · Predicting at scale: a 175B model on a thousand GPUs
#
# No laptop runs GPT-3, but the analytic model that stands beside every measurement in the other
# notebooks runs for any size. It reads the same model, layout and a hardware profile (peak
# FLOP/s, HBM, link bandwidths, achievable efficiency) and predicts memory, communication and
# step time — and with them, what bounds each layout:
#
# - **memory-bound**: the model state and activations do not fit in the device's HBM;
# - **compute-bound**: matmuls dominate, and MFU is as good as the chip allows;
# - **communication-bound**: exposed (not overlapped) collectives dominate;
# - **bubble-bound**: pipeline stages mostly wait for each other.

# %%
import parex

parex.emulate_devices(8)

import dataclasses  # noqa: E402

# %% tags=["parameters"]
offline = True
model_name = "korthikanti-175b"
hardware = ["a100-80gb", "h100-sxm"]
global_batch = 1024

# %%
from parex import charts
from parex.figures import megatron_table1

if offline:
    charts.enable_offline()

# %% [markdown]
# ## First, check the model against a paper
# Megatron-LM's weak-scaling table (Narayanan et al. 2021) reports the TFLOP/s per A100 that each
# model from 1.7B to 1T parameters achieved. parex predicts the step time of each row's layout
# with one A100 profile; the paper's FLOP count over that time is parex's TFLOP/s.

# %%
megatron = megatron_table1("a100-80gb")
parex.format_frame(megatron[["params_b", "tp", "pp", "gpus", "tflops_per_gpu",
                             "parex_tflops_per_gpu", "ratio"]])

# %% [markdown]
# ## What if: 175B on 1024 GPUs
# The model of Korthikanti et al. (96 layers, hidden 12288), bf16 with full activation recompute,
# a global batch of 1024 sequences of 2048 tokens. Seven ways to lay it out on 128 nodes of 8.

# %%
model = parex.model_preset(model_name).replace(dtype="bfloat16")
train = parex.TrainConfig(global_batch=global_batch, remat="full")
layouts = ["data=128,tensor=8", "fsdp=128,tensor=8", "data=64,tensor=2,stage=8,microbatches=16",
           "data=16,tensor=8,stage=8,schedule=1f1b,microbatches=16",
           "data=16,tensor=8,stage=8,schedule=interleaved,virtual=2,microbatches=16",
           "data=16,tensor=8,stage=8,schedule=1f1b,microbatches=64",
           "data=4,tensor=32,stage=8,schedule=1f1b,microbatches=16"]
predictions = [parex.predict(model, train, parex.Layout.parse(text), hw)
               for hw in hardware for text in layouts]

# %% [markdown]
# ## The regime of each layout
# Pure data parallelism with TP inside the node keeps a whole replica of the model state per 8
# GPUs: memory-bound (395 GB per device). Sharding the state (FSDP) fixes that (47 GB). A GPipe
# pipeline holds the activations of all m microbatches and does not fit either (196 GB); 1F1B
# holds at most p and fits (69 GB), but pays the bubble (p−1)/(m+p−1), which more microbatches
# (52 GB, bubble 2.0 s of 19.5 s on A100s) or an interleaved schedule shrink. TP across nodes
# (tensor=32) does not fit: with only 4 replicas each microbatch holds 16 sequences, and its
# in-flight activations make 95 GB per device in the mixed-precision recipe (bf16 weights and
# gradients, fp32 Adam state). Were it to fit, it would pay 9.9 s of its 41 s step on A100s for
# all-reduces over InfiniBand.

# %%
frame = parex.records_frame(predictions)
frame["regime"] = charts.regime(frame)
parex.format_frame(frame[["hardware", "layout", "step_time_s", "step_compute_s",
                          "step_exposed_comm_s", "step_bubble_s", "memory_total_bytes", "mfu",
                          "regime"]])

# %%
charts.whatif_chart(frame[frame["hardware"].str.startswith(hardware[0])])

# %% [markdown]
# ## A slower network
# The same cluster with its nodes joined by 1 Gb/s Ethernet instead of 200 Gb/s InfiniBand — the
# setting of low-communication training (DiLoCo). Every layout whose collectives cross nodes turns
# communication-bound.

# %%
chip = parex.load_chip(hardware[0])
slow = dataclasses.replace(chip, name=f"{chip.name} over 1 Gb/s",
                           inter_node=parex.Link(1.25e8, 5e-5, "1 Gb/s Ethernet"))
slow_frame = parex.records_frame([parex.predict(model, train, parex.Layout.parse(text), slow)
                                  for text in (layouts[1], layouts[3], layouts[5])])
slow_frame["regime"] = charts.regime(slow_frame)
parex.format_frame(slow_frame[["layout", "step_time_s", "step_exposed_comm_s", "regime"]])

# %% [markdown]
# ## Where a step's time goes
# The predictor prices each part of the step from the hardware's data: the GEMMs at the chip's
# best measured matmul rate and the share of it their shapes keep, the collectives on the
# network's tiers with the algorithm NCCL or RCCL would pick, the slowest of the step's devices,
# the pipeline's fill and drain. `parex predict --explain` prints the same breakdown.

# %%
print(parex.explain_text(parex.explain(model, train, parex.Layout.parse(layouts[5]), hardware[0])))

# %% [markdown]
# ## Efficiency against GPU count
# One replica of the 1F1B layout (tensor 8 × 8 stages, 64 microbatches of one sequence) grown
# by its data axis from 128 to 4,096 GPUs. Weak scaling keeps each replica's 64 sequences (the
# global batch grows): the rings get longer and the slowest device is the slowest of more, so
# efficiency falls slowly. Strong scaling keeps the 64 sequences of the whole step: each
# pipeline gets fewer microbatches (2 at 4,096 GPUs), and the bubble takes over.

# %%
base = parex.Layout.parse(layouts[5]).replace(data=1)
replica = train.replace(global_batch=64)
devices = [128 * 2 ** k for k in range(6)]  # 128 ... 4,096
weak = parex.scaling_curve(model, replica, base, hardware[0], devices, "weak")
strong = parex.scaling_curve(model, replica, base, hardware[0], devices, "strong")
charts.efficiency_chart(weak + strong, title=f"{model_name} on {hardware[0]}: predicted scaling")

# %%
import pandas as pd  # noqa: E402

parex.format_frame(pd.DataFrame(weak + strong)[["mode", "devices", "layout", "step_s",
                                                 "efficiency", "stragglers_s", "bubble_s"]])

# %% [markdown]
# ## Precision: BF16, FP8 and MXFP8
# The same 1F1B layout with its block projections in FP8: Transformer Engine's current scaling
# (one scale per tensor) on H100 and B200, and MXFP8 (a power-of-two scale per 32 elements,
# Blackwell's block-scaled tensor cores) on B200, where Hopper refuses it in one line. Never
# the peak's 2x: attention, norms and the casts stay in bfloat16 (docs/precision.md).

# %%
rows = []
for chip in ("h100-sxm", "b200"):
    bf16 = parex.predict(model, train, parex.Layout.parse(layouts[5]), chip)
    for name in ("bf16", "fp8-current", "mxfp8"):
        try:
            p = parex.predict(model, train.replace(precision=name),
                              parex.Layout.parse(layouts[5]), chip)
        except parex.InputError as refusal:
            print(refusal)  # the one line a chip without the recipe's matmul units gives
            continue
        rows.append({"hardware": chip, "precision": name, "step_s": p.step_time_s["total"],
                     "speedup_vs_bf16": bf16.step_time_s["total"] / p.step_time_s["total"]})
parex.format_frame(pd.DataFrame(rows))
