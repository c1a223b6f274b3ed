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
# # 14 · Mixtures of experts and expert parallelism
#
# A mixture of experts replaces each block's MLP by E experts and a router that sends every
# token to k of them (Mixtral: E = 8, k = 2; DeepSeek-V3: E = 256, k = 8). Only the chosen
# experts compute, so a token costs the *active* parameters, while every expert's weights and
# optimizer state must live somewhere. Expert parallelism (`expert=N`) splits the experts over
# N devices carved out of the data-parallel ones: each device keeps E/N experts, and tokens
# travel to their experts and back by two all-to-alls per block. This notebook trains a tiny
# mixture of experts on 8 emulated devices, looks at where its tokens go, compares EP with
# plain data parallelism at Mixtral's scale, and times DeepSeek-V3's DualPipe schedule.

# %%
import parex

parex.emulate_devices(8)

# %% tags=["parameters"]
offline = True
steps = 3
layouts_text = ["data=8", "data=2,expert=4", "expert=8"]
gpus = 64  # H100s for Mixtral 8x7B
pp = 8  # pipeline stages of the DualPipe comparison

# %%
import pandas as pd

from parex.charts import dual_gantt_chart, enable_offline, expert_load_chart
from parex.studies import dualpipe_tables, expert_study

if offline:
    enable_offline()
parex.ensure_local()  # the cpu-local profile the predictions read: measured once

# %% [markdown]
# ## The same model, three layouts
# `tiny-moe` is tiny-llama with 8 SwiGLU experts, top-2, and room for every token (dropless).
# `data=8` keeps all 8 experts on every device; `data=2,expert=4` two per device; `expert=8`
# one. The losses agree (the routing is per sequence, so no layout changes which expert a
# token reaches), and the all-to-all bytes the compiled step moves equal the prediction's.

# %%
model = parex.model_preset("tiny-moe")
train = parex.TrainConfig(steps=steps, global_batch=16)
study = expert_study(model, train, layouts_text)
print(parex.format_frame(study.drop(columns="expert_load")).to_string())
print("losses equal:", study.loss_last.round(5).nunique() == 1)

# %% [markdown]
# Where the tokens go: each expert's share of the 2 × 16 × 128 assignments per layer on the last
# step (the dashed line is the balanced 1/8). The router's balance loss (Switch's α·Σ f·P per
# sequence) pulls the bars toward it as training goes on.

# %%
expert_load_chart(study)

# %% [markdown]
# ## Capacity: dropping tokens
# With a capacity factor, each expert takes at most C = ⌈cf · k · T / E⌉ tokens of a sequence
# (first choices first); the rest skip the MLP and ride the residual. Capacity 1.0 keeps the
# dispatch buffers 8× smaller than dropless (C = T), at the price of dropped assignments.

# %%
capped = model.replace(name="tiny-moe (cf 1.0)", capacity_factor=1.0)
drops = expert_study(capped, train, ["data=2,expert=4"])
print(parex.format_frame(drops[["layout", "dropped", "busiest_expert", "all_to_all_measured",
                                 "all_to_all_predicted"]]).to_string())

# %% [markdown]
# ## Expert parallelism against data parallelism at Mixtral's scale
# Mixtral 8x7B (46.7B parameters, 12.9B active) on H100s, 4,096-token sequences. Plain data
# parallelism holds all 8 experts per GPU; expert parallelism holds 8/EP. Each row is one
# prediction (bf16, the mixed-precision recipe, ZeRO-1).

# %%
mixtral = parex.model_preset("mixtral-8x7b")
big = parex.TrainConfig(global_batch=4 * gpus, seq_len=4096, microbatch=1, remat="full")
rows = []
for ep in (1, 2, 4, 8):
    text = f"data={gpus // ep},expert={ep},zero=1" if ep > 1 else f"data={gpus},zero=1"
    p = parex.predict(mixtral, big, parex.Layout.parse(text), "h100-sxm")
    mem = p.memory_bytes_per_device
    state = mem["params"] + mem["grads"] + mem["optimizer"]
    rows.append({"layout": text, "params+grads+opt bytes": state, "total bytes": mem["total"],
                 "fits": p.fits, "step s": p.step_time_s["total"],
                 "all-to-all bytes": p.comm_bytes_per_device.get("all-to-all", 0)})
parex.format_frame(pd.DataFrame(rows))

# %% [markdown]
# ## MoE parallel folding: the expert group over data × tensor
# Megatron-Core's MoE parallel folding (arXiv 2504.14960) lets the experts use their own split
# of the devices: `expert_tensor=1` folds the tensor axis into the expert group, so
# `expert=32,tensor=2,expert_tensor=1` runs the attention over tensor 2 × data-parallel 32 and
# the experts over all 64 devices of a stage, each expert whole. Below DeepSeek-V3 (PP 16, ZeRO-1)
# on 1,024 H100s, folded and unfolded: folded, each device sends only its half of the tokens.
# The last row keeps the folded layout and changes the dispatcher: DeepEP (`deepep`, Megatron-Core's
# flex dispatcher) sends a token once to each remote node holding one of its 8 experts instead of
# once per expert, so fewer of the same bytes leave each node.

# %%
deepseek = parex.model_preset("deepseek-v3")
huge = parex.TrainConfig(global_batch=15360, seq_len=4096, microbatch=1)
rows = []
for fold, dispatcher in (("", "all-to-all"), (",expert_tensor=1", "all-to-all"),
                         (",expert_tensor=1", "deepep")):
    text = f"expert=32,tensor=2{fold},stage=16,zero=1,schedule=1f1b,partition=4*13:3*3"
    layout = parex.Layout.parse(text)
    overlaps = ("grad-reduce",) + (("deepep",) if dispatcher == "deepep" else ())
    p = parex.predict(deepseek, huge, layout, "h100-sxm", overlaps=overlaps)
    a2a = next(c for c in p.collectives if c["name"] == "moe-dispatch")
    rows.append({"layout": text, "dispatcher": dispatcher, "EP": layout.expert_parallel,
                 "dispatch bytes per op": a2a["bytes_per_op"], "dispatch s": a2a["seconds"],
                 "step s": p.step_time_s["total"]})
parex.format_frame(pd.DataFrame(rows))

# %% [markdown]
# ## DualPipe: overlapping the all-to-all
# DeepSeek-V3 hides expert parallelism's all-to-alls by pairing one microbatch's forward with
# another's backward (an "F&B" unit) and feeding microbatches from both ends of the pipeline.
# Below, parex's 1F1B and zero-bubble tables and DualPipe's, timed with the same costs (F = 1,
# a full backward B = 1.8, its weight-gradient part W = 0.8): the bubbles match Table 2 of the
# DeepSeek-V3 report, and DualPipe pays for them with two copies of its stages' parameters.

# %%
tables = dualpipe_tables(pp, 4 * pp)
bubbles = pd.DataFrame([{"schedule": name, "bubble (F = 1)": table.bubble()}
                        for name, table in tables.items()])
print(parex.format_frame(bubbles).to_string(index=False))
dual_gantt_chart(tables["dualpipe"])

# %% [markdown]
# The gallery's figure `moe` sets Megatron-LM's and MaxText's published Mixtral throughputs
# beside parex's predictions (as brackets: their batches are not published) and checks the
# DualPipe table: `parex figure moe`.
