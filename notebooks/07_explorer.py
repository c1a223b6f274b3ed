# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
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
# device count and a layout; the status line validates the choice as you go and the chart updates
# in place with the prediction. **Measure** compiles and runs the real step on the emulated mesh
# and adds it to the history below, predicted beside measured.

# %%
import parex

parex.emulate_devices(8)

# %% tags=["parameters"]
offline = True
steps = 5

# %%
from parex import charts
from parex.widgets import Explorer

if offline:
    charts.enable_offline()

# %% [markdown]
# ## The widget
# The mesh axes offer only the divisors of the device count; the data axis takes the devices
# left over. Pipeline schedule and virtual stages apply once `stage` is above 1.

# %%
explorer = Explorer(model="tiny", n_devices=8, steps=steps)
explorer

# %% [markdown]
# ## Driving it from Python
# Every control can be set from code, and everything the widget shows can be read back: the
# layout, the validation message, the chart's data and the history. An impossible choice shows
# the validation message in the widget instead of a traceback.

# %%
explorer.set(tensor=8, fsdp=2)
print(explorer.error)
explorer.set(tensor=2, fsdp=1)
print(explorer.layout)

# %% [markdown]
# ## Measure
# The same as pressing the button: compile, run `steps` steps with a progress bar, and append the
# record to the history table and chart above.

# %%
explorer.measure()
explorer.history_frame()[["source", "layout", "step_time_s", "memory_total_bytes"]]
