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
# # 11 · The gallery: every reproduced paper figure, scored
#
# parex reproduces numbers from the papers it is built on: ZeRO's memory table, Korthikanti et
# al.'s activation formulas, Megatron-LM's TFLOP/s, the pipeline schedules' bubbles, ring
# attention's and Ulysses' communication, DiLoCo's bytes, HexiScale's heterogeneous MFU, the
# scaling book's rooflines. Each
# figure is one function in `parex.figures`: it computes parex's numbers — *predicted* by the
# analytic model or the schedule tables, or *measured* on the emulated mesh where the quantity
# can be measured at small scale — sets them beside the paper's (from `data/reference/`, each
# with its source), takes the ratio and scores it by one rule (`parex.figures.scoring`): a point
# within its tolerance, a bracket only when it contains the paper's value; a row is out of scope
# only for a reason the figure declared before computing, and never counts as a pass. A figure
# whose parex feature is missing is listed as missing, never faked.

# %%
import parex

parex.emulate_devices(8)

# %% tags=["parameters"]
offline = True
figure_name = "zero-table1"  # a fast figure, computed live below
scoreboard_json = "../docs/figures/scoreboard.json"  # what `parex figure --all` committed
slow_figure = None  # e.g. "pipeline-memory": compiles for a minute or two

# %%
import pandas as pd  # noqa: E402

from parex import charts  # noqa: E402
from parex.figures import (FIGURES, compute, figure_chart, load_scoreboard,  # noqa: E402
                           summary_frame, text_report)

if offline:
    charts.enable_offline()

# %% [markdown]
# ## The figures
# Fast figures read the predictor and the schedule tables (seconds); slow ones compile or train
# on the emulated mesh (minutes), each in its own process when run by `parex figure --all`.

# %%
pd.DataFrame([{"figure": s.name, "cost": "slow" if s.slow else "fast", "source": s.source}
              for s in FIGURES.values()]).set_index("figure")

# %% [markdown]
# ## One figure, computed here
# Every row: the paper's number, parex's, their ratio, whether parex's is predicted or
# measured, and whether it lies within the tolerance. ZeRO's Table 1 through `predict()`: where
# ZeRO-3 leaves little per device, parex's replicated biases and norms put a few cells outside
# the tolerance, and they count as misses (each ZeRO-3 row's note gives the excess).

# %%
result = compute(figure_name)
print(text_report(result))

# %% [markdown]
# Above: the paper's values as black points, parex's as orange lines. Below: parex / paper for
# every row, the tolerance shaded.

# %%
figure_chart(result)

# %% [markdown]
# ## The scoreboard
# `parex figure --all --out docs/figures` ran every figure, wrote a PNG and an SVG of each and
# this table (also `docs/figures/scoreboard.md` and `.html`). A failed figure stays failed: its
# rows and notes in the scoreboard say where parex and the paper part.

# %%
committed = load_scoreboard(scoreboard_json)
summary_frame(committed)

# %% [markdown]
# A slow figure can be computed here too (set `slow_figure`); the measured pipeline bubble
# needs one emulated device per core and is best run as `parex figure pipeline-bubble`.

# %%
if slow_figure:
    slow = compute(slow_figure)
    print(text_report(slow))
