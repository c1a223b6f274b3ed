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
# # 04 · Pipeline schedules: Gantt charts, and the bubble against microbatches
#
# Pipeline parallelism puts consecutive layers on p devices (stages) and streams m microbatches
# through them. While the pipeline fills and drains, some stages idle: the **bubble**. In parex a
# schedule is plain data — a table of (tick, stage, op, microbatch, chunk) — that the executor
# runs, the predictor times and the Gantt chart draws.
#
# | schedule | bubble | microbatches in flight |
# |---|---|---|
# | GPipe | (p−1)/(m+p−1) of the step | m |
# | 1F1B | the same | at most p |
# | interleaved 1F1B, v chunks | (p−1)/(v·m) of the ideal compute | about p, plus (p−1)/(p·m) more |
# | ZB-H1 (split backward) | (p−1)(T_F+T_B−T_W) instead of (p−1)(T_F+T_B+T_W) | as 1F1B |
# | ZB-V (two chunks placed V-wise) | about zero once m ≥ 2p | 2p half chunks: as 1F1B |

# %%
import parex

parex.emulate_devices(8)

import jax  # noqa: E402
import pandas as pd  # noqa: E402

# %% tags=["parameters"]
offline = True
full = False  # True: the bubble at m = 2, 4, 8, five repeats each (about 6 minutes on 2 cores)
model_name = "tiny"
p = 4
m = 8
steps = 3
bubble_ms = [2, 4]
bubble_repeats = 3

# %%
from parex import charts, make_schedule
from parex.explorer import gantt_costs
from parex.studies import bubble_study

if offline:
    charts.enable_offline()
if full:
    bubble_ms, bubble_repeats = [2, 4, 8], 5

# %% [markdown]
# ## A schedule is a table
# The first ticks of 1F1B with p stages and m microbatches: stage 0 starts microbatch 0's forward,
# and each later stage follows one tick behind.

# %%
one_f_one_b = make_schedule("1f1b", p, m)
pd.DataFrame(one_f_one_b.table()).head(8)

# %% [markdown]
# ## Four schedules, drawn from their tables
# Each bar is one op on one stage for one microbatch, labelled with the microbatch; each op keeps
# its colour in every chart (forward light, backward or input gradient darker, weight gradient
# darkest) and the grey under the bars is idle time, the bubble. The interleaved schedule's v = 2
# chunks loop through the stages twice: its second chunk is drawn lighter. Every op takes one
# tick here.

# %%
schedules = [make_schedule("gpipe", p, m), one_f_one_b, make_schedule("interleaved", p, m, 2),
             make_schedule("zbh1", p, m), make_schedule("zbv", p, m, 2)]
charts.gantt_stack(schedules, width=560)

# %% [markdown]
# The same tables give the bubble and the activations each stage holds: GPipe keeps all m
# microbatches in flight on stage 0, 1F1B at most p.

# %%
bubbles = pd.DataFrame([{"schedule": s.name, "v": s.v, "ticks": s.n_ticks,
                         "idle fraction": s.idle_fraction(),
                         "(p−1)/(m+p−1)": (p - 1) / (m + p - 1),
                         "peak in flight, stage 0": s.peak_in_flight()[0]} for s in schedules])
parex.format_frame(bubbles, units={"(p−1)/(m+p−1)": "percent"})

# %% [markdown]
# ## In predicted time
# The predictor times the same tables with per-op costs. On a GPU profile (GPT-2 medium on H100s,
# bfloat16) t_F is the forward time for which the table idles exactly as long as the predicted
# bubble, with t_B = 2·t_F: the grey is the predicted bubble. (`parex.explorer.Explorer` draws
# this for any layout in its *pipeline and mesh* panel.)

# %%
medium, medium_train = parex.model_preset("gpt2-medium"), parex.TrainConfig(global_batch=m)
piped = parex.Layout(stage=p, schedule="1f1b", microbatches=m)
setting = parex.resolve(medium, medium_train, piped, "h100-sxm")
timed = gantt_costs(parex.predict(medium, medium_train, piped, "h100-sxm"), setting)
charts.gantt_chart(timed[0], timed[1], width=560, subtitle=timed[2])

# %% [markdown]
# ## Running them for real
# The executor runs a table on the `stage` mesh axis. Each forward keeps what its backward needs
# (the residuals of a `jax.vjp`, one stash slot per microbatch in flight) and each backward only
# runs the backward: nothing is recomputed, so every schedule does the unpipelined step's matmuls.
# GPipe and 1F1B compute the same gradients, so their losses agree exactly; what differs is the
# order, and with it the activation (temp) memory: GPipe holds all m microbatches, 1F1B at most p.

# %%
model = parex.model_preset(model_name)
train = parex.TrainConfig(steps=steps, global_batch=m)
runs = [parex.measure(model, train, parex.Layout(stage=p, microbatches=m, schedule=name),
                      devices=jax.devices()[:p]) for name in ("gpipe", "1f1b")]
for run in runs:
    print(f"{run.layout:40} losses {[round(x, 4) for x in run.losses]} "
          f"temp {parex.format_bytes(run.memory_bytes_per_device['temp'])}")

# %% [markdown]
# ## The bubble, where it is physical
# Emulated devices share the real cores: with more devices than cores an idle stage lends its core
# to a busy one and wall time hides the bubble. So the bubble is measured with p = 2 stages on two
# devices, one per core of a two-core machine: the pipelined step against one stage's work done
# alone (the L/2-layer model as data=2 on the same two devices, m microbatches each), every
# schedule and that one baseline timed alternately. bubble = 1 − t(alone) / t(pipeline), beside
# the table's bubble with T_F = T_B = T_W (for 1F1B (p−1)/(m+p−1)). ZB-H1's bubble sat below
# 1F1B's in 14 of the benchmark's 15 (run, m) points and in all but one of the slow `zero-bubble`
# figure's runs on a quiet machine; on a loaded one the figure read it above (README,
# "Pipelines"): the shared cores' run-to-run scatter is as large as the gap, so look at several
# runs.

# %%
study = bubble_study(model, p=2, ms=bubble_ms, schedules=("1f1b", "zbh1"),
                     repeats=bubble_repeats, progress=True)
print(parex.format_frame(study[["schedule", "m", "step_time_s", "stage_alone_s",
                                 "bubble_measured", "bubble_table"]]).to_string())
charts.bubble_chart(study)
