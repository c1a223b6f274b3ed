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
# # 07 · The explorer
#
# One widget for everything the other notebooks did by hand: pick a model (or change its dims), a
# device count and a layout; the status line validates the choice as you go, says whether it fits
# in the chip's memory and what bounds the step (compute, communication or the pipeline bubble),
# and the charts update in place with the prediction. Hover any bar for its formula with the
# values plugged in. When a layout does not fit, the buttons under the status line are the
# cheapest changes that make it fit, by predicted step time; when it is impossible, the nearest
# valid layouts.
#
# The panels: **overview** (memory per device against the chip's memory, step time, collective
# bytes), **pipeline and mesh** (the schedule's Gantt chart in predicted time with the bubble in
# grey, and which devices form each axis's groups), **compare** (pin a baseline and move the
# controls: the deltas stand on fixed axes), **sweep** (one control over its values: predicted
# line, measured points), **measured** (every run, repeats pooled: median, spread, n) and
# **explain** (every number's formula). **Measure** compiles and runs the real step on the
# emulated mesh, with a progress bar over the compile and each step.

# %%
import parex

parex.emulate_devices(8)

# %% tags=["parameters"]
offline = True
steps = 5

# %%
from parex import charts
from parex.explorer import Explorer

if offline:
    charts.enable_offline()

# %% [markdown]
# ## The widget
# The mesh axes offer only the divisors of the device count; the data axis takes the devices
# left over. Pipeline schedule and virtual stages apply once `stage` is above 1. An accelerator
# profile predicts in bfloat16 (what runs there use) and a preset of a billion parameters or more
# comes up with selective recompute, as Megatron-LM trains such models.

# %%
explorer = Explorer(model="tiny", n_devices=8, steps=steps)
explorer

# %% [markdown]
# ## Driving it from Python
# Every control can be set from code, and everything the widget shows can be read back: the
# layout, the validation message and its ways out, the chart's data, the formulas. An impossible
# choice shows the validation message in the widget instead of a traceback.

# %%
explorer.set(stage=4, schedule="interleaved", virtual=2, microbatches=4)
print(explorer.error)
print("ways out:", [way.text for way in explorer.ways])
explorer.set(stage=1, tensor=2, microbatches=1, virtual=1, schedule="gpipe")
print(explorer.layout, "·", explorer.explained["params"])

# %% [markdown]
# ## Measure
# The same as pressing the button: compile, run `steps` steps, and add the run to the
# **measured** panel. Pressing it again runs the same compiled program for more samples; the
# repeats are pooled into one median with its spread, and the ratio predicted / measured carries
# that spread.

# %%
explorer.measure()
parex.format_frame(explorer.pooled_frame()[["source", "layout", "step_time_s", "step_time_min_s",
                                            "step_time_max_s", "memory_total_bytes"]])
