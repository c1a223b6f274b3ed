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
# # 08 · The planner
#
# "Which layout should I run, and will it fit?" The planner enumerates every layout of a model
# on a cluster — axis sizes, ZeRO stage, SP, CP mode, pipeline schedule and virtual stages,
# microbatch size, remat — as numpy columns, predicts them all with `predict_batch`, drops what
# does not fit under the memory cap and ranks the rest, with the bottleneck of each.

# %%
import parex

parex.emulate_devices(8)

# %% tags=["parameters"]
offline = True
full = False  # True: verify the top 3 and 3 random layouts, 5 steps each (about 5 minutes)
scale_model, scale_hardware, scale_nodes = "llama2-7b", "h100-sxm", 4
verify_k = 2  # layouts of the top (and as many random ones) measured on the emulated mesh
steps = 3

# %%
from parex import TrainConfig, charts, model_preset
from parex.explorer import Planner
from parex.plan import chart_frame, plan, plan_report, verify, verify_report

if offline:
    charts.enable_offline()
if full:
    verify_k, steps = 3, 5

# %% [markdown]
# ## A plan at scale
# A 7B model on a few nodes of H100s: tens of thousands of layouts in seconds. Each row shows
# its predicted step broken into compute, exposed communication and pipeline bubble, its memory
# per device and what limits it. Layouts the predictor cannot tell apart count once ("alike").

# %%
model = model_preset(scale_model).replace(dtype="bfloat16")
big = plan(model, TrainConfig(global_batch=256, seq_len=model.seq_len), scale_hardware,
           scale_nodes)
plan_report(big)  # a cell's value: HTML tables that fit the page

# %% [markdown]
# Every fitting layout as a point (all predicted, so all grey): faster is lower, leaner is
# further left. The Pareto front, the step line, holds the layouts that no other layout beats on
# both; the dashed rule is the cap. The axes follow the front and the top rows: a layout slower
# than the front's leanest end or larger than its fastest is beaten on both counts, so it is left
# off (the subtitle counts them), and a front that spans decades gets a log axis.

# %%
charts.pareto_chart(chart_frame(big), big.memory_cap)

# %% [markdown]
# ## The Planner widget
# Model, cluster, batch and memory cap in; the ranked table and the chart out. Each row's
# button loads that layout into the Explorer below, to change by hand and measure.

# %%
planner = Planner(model="tiny", hardware="cpu-local", global_batch=16, top=5)
planner

# %%
planner.load(1)
print("loaded into the Explorer:", planner.explorer.layout)
planner.explorer

# %% [markdown]
# A cap that no layout meets gets the cap the leanest layout needs:

# %%
planner.set(memory_cap_gb=0.001)
print(planner.error)
planner.set(memory_cap_gb=0.0)

# %% [markdown]
# ## Does the order hold?
# The top layouts and as many random fitting ones, measured for real on the emulated mesh
# through a durable sweep (each in its own process, every record appended to a JSONL store),
# predicted rank against measured rank.

# %%
if verify_k:
    checked = verify(planner.plan, k=verify_k, steps=steps)
    print(verify_report(checked))
    runs = parex.load_sweep(checked["store"])
    display(parex.format_frame(runs[["layout", "status", "step_time_s", "memory_total_bytes"]]))
