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
# # 13 · 3D tensor parallelism (AxoNN)
#
# Megatron-LM splits each linear layer over one group of devices: the activations of every
# layer are all-reduced across all of them. AxoNN (Singh et al., arXiv 2305.13525 and SC'24,
# arXiv 2502.08145) splits it over three: X (inner) splits each weight's input dim, Y (outer)
# its output dim, Z (depth) shards the block again and splits the batch. In parex the layout is
# `tensor=XxYxZ`; `tensor=N` stays Megatron's split (the same as `tensor=1xNx1`).
# This notebook puts 1D (`tensor=8`), 2D (`tensor=2x4x1`) and 3D (`tensor=2x2x2`) side by side:
# the bytes each device moves, measured and predicted, and the regime where each wins.

# %%
import parex

parex.emulate_devices(8)

# %% tags=["parameters"]
offline = True
steps = 3
layouts_text = ["tensor=8", "tensor=2x4x1", "tensor=2x2x2"]
scale_nodes = 16  # Perlmutter nodes of 4 A100s for the at-scale part
batches = [16, 64, 256]  # sequences of 2,048 tokens per step

# %%
import pandas as pd

from parex.figures import compute, text_report
from parex.plan import plan, plan_report

parex.ensure_local()  # the cpu-local profile the predictions read: measured once

# %% [markdown]
# ## 1D, 2D and 3D on the emulated mesh
# Each layout trains the tiny GPT for real on 8 devices; the collectives come from the compiled
# step. Megatron's `tensor=8` all-reduces every activation over 8 devices. The 2D split
# all-reduces over X or Y (4 and 2 devices), and gathers the residual stream over X. The 3D
# split adds Z: each weight block is all-gathered over Z before its matmul and its gradient
# reduce-scattered, and the batch is split over Z, so the activations' bytes shrink by Z.

# %%
model = parex.model_preset("tiny")
train = parex.TrainConfig(steps=steps, global_batch=16, seq_len=64)
layouts = [parex.Layout.parse(text) for text in layouts_text]
measured = [parex.measure(model, train, layout) for layout in layouts]
predicted = [parex.predict(model, train, layout, "cpu-local") for layout in layouts]
rows = []
for layout, m, p in zip(layouts, measured, predicted):
    for kind in ("all-reduce", "all-gather", "reduce-scatter"):
        rows.append({"layout": str(layout), "kind": kind,
                     "measured": m.comm_bytes_per_device[kind],
                     "predicted": p.comm_bytes_per_device[kind]})
by_kind = pd.DataFrame(rows).pivot(index="layout", columns="kind",
                                   values=["measured", "predicted"])
parex.format_frame(by_kind, unit="bytes")

# %% [markdown]
# The losses are the same for every layout (the 3D program is the same math, written out
# with `shard_map` so that each collective is visible), step by step:

# %%
losses = pd.DataFrame({str(layout): m.losses for layout, m in zip(layouts, measured)})
parex.format_frame(losses.rename_axis("step"), unit="loss")

# %% [markdown]
# ## 3D inside pipeline stages
# A 3D split composes with pipeline stages: here a 2x2x1 split inside each of two stages,
# scheduled 1F1B. Inside the pipeline, X, Y and Z are manual axes of its `shard_map`, like
# the stage axis, so every collective is the one written in parex's 3D ops; the stages add the
# activations' sends (collective-permutes) and, after the loop, the embedding's and head's
# gradients summed over the stages. The losses are again one device's.

# %%
staged = parex.Layout.parse("stage=2,tensor=2x2x1,microbatches=2,schedule=1f1b")
m = parex.measure(model, train, staged)
p = parex.predict(model, train, staged, "cpu-local")
print(str(staged), "losses", ", ".join(f"{x:.4f}" for x in m.losses))
parex.format_frame(pd.DataFrame([{"kind": kind, "measured": m.comm_bytes_per_device[kind],
                                  "predicted": p.comm_bytes_per_device[kind]}
                                 for kind in ("all-reduce", "all-gather", "collective-permute")]),
                   unit="bytes")

# %% [markdown]
# ## Where each wins: a 20B GPT on Perlmutter
# AxoNN's GPT-20B (32 layers, hidden 7,168) on 16 nodes of 4 A100-40GB, Slingshot-11 between
# nodes, full recompute. Megatron's split (tensor=4 inside a node, ZeRO-1 over data) moves the
# fewest bytes per device, but its data-parallel gradient all-reduce crosses the nodes and its
# weights are held 16 times, so it runs out of memory first as the batch grows. The 2D split's
# groups span nodes, so its activation all-reduces, which grow with the batch, run at the
# NICs' rate. The 3D split's depth group moves weights, whose bytes do not grow with the batch,
# shards them Z ways and splits the batch over Z: at a few sequences per device it is the
# fastest, and the deepest Z is the last layout that fits. Each row is one prediction.

# %%
gpt20b = parex.ModelConfig("axonn-gpt-20b", "gpt", layers=32, hidden=7168, heads=56,
                           vocab=50304, seq_len=2048)
cluster = parex.load_cluster("perlmutter", scale_nodes)
n = cluster.n_devices
candidates = {"1D Megatron": f"data={n // 4},tensor=4,zero=1",
              "2D": f"data={n // 16},tensor=4x4x1", "3D": f"data={n // 16},tensor=2x2x4",
              "3D deep": f"tensor=2x2x{n // 4}"}

# %%
rows = []
for batch in batches:
    for family, text in candidates.items():
        t = parex.TrainConfig(global_batch=batch, seq_len=2048, remat="full")
        p = parex.predict(gpt20b, t, parex.Layout.parse(text), cluster)
        rows.append({"batch": batch, "family": family, "layout": text,
                     "comm bytes per device": sum(p.comm_bytes_per_device.values()),
                     "exposed comm s": p.step_time_s["exposed_comm"],
                     "step s": p.step_time_s["total"],
                     "memory": p.memory_bytes_per_device["total"], "fits": p.fits})
scale = pd.DataFrame(rows)
winners = scale[scale.fits].loc[lambda d: d.groupby("batch")["step s"].idxmin()]
print("fastest that fits:", dict(zip(winners.batch, winners.family)))
parex.format_frame(scale)

# %% [markdown]
# ## The planner, with AxoNN's own model beside parex's
# `parex plan` searches the 3D layouts with every other. Each row shows parex's step time and
# AxoNN's: parex's compute plus AxoNN's communication model (volumes per group over a bandwidth
# that depends on whether the group sits inside a node), nothing overlapped. The last line
# says where the two models rank the layouts differently.

# %%
p20 = plan(gpt20b, parex.TrainConfig(global_batch=256, seq_len=2048), "perlmutter",
           scale_nodes, top=5)
plan_report(p20)  # a cell's value: HTML tables that keep every column in view

# %% [markdown]
# ## The papers' numbers
# Figure `axonn` holds parex's predictions against AxoNN's published results; runs whose
# configuration is not published are shown as brackets, never scored.

# %%
print(text_report(compute("axonn")))
