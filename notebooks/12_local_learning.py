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
# # 12 · Local learning as a pipeline (PPLL)
#
# In a backprop pipeline (GPipe, 1F1B) stage s must wait for the gradient of stage s + 1 before
# it can finish a microbatch, and a step ends with a flush: the bubble. **Local learning** cuts
# that dependency. Every stage gets a small head of its own and learns from a *local loss* on
# its own output; its input is cut from the graph (`stop_gradient`), so no gradient ever crosses
# a stage boundary. PPLL (Guo et al. 2024, arXiv 2411.12780) runs this as a pipeline: queues
# carry activations forward, each stage trains as soon as its input arrives, and nothing is
# flushed between steps. On 4 GPUs they report 1.25× the speed of ordinary pipeline parallelism
# on a ViT and 0.85× on a ResNet.
#
# It changes the optimisation: the model is no longer trained end to end. This notebook shows
# what it buys (time, memory, communication), what it costs in loss, and when it loses.
# In parex it is one layout key: `stage=4,schedule=local` (`local_loss=ce|recon`, `queue=q`).

# %%
import parex

parex.emulate_devices(8)

# %% tags=["parameters"]
offline = True
full = False  # True: 300 steps and both objectives (about 12 minutes on 2 cores)
steps = 30
every = 10
layout_text = "data=2,stage=4,microbatches=8"

# %%
import altair as alt

from parex import charts, format_bytes, format_seconds
from parex.figures import local_vs_1f1b, losing_frame
from parex.plan import local_alternatives, local_report, plan

if offline:
    charts.enable_offline()
objectives = ("ce", "recon") if full else ("ce",)
if full:
    steps, every = 300, 50
model = parex.model_preset("tiny")
train = parex.TrainConfig(steps=steps)

# %% [markdown]
# ## The schedule table: one op per tick, no flush
# Each row is a pipeline stage. In 1F1B a stage alternates forwards (F) and backwards (B) and
# the step ends when the last backward reaches stage 0. In the local pipeline every op is an
# **L**: forward, local loss and its backward, on the stage's own parameters. Stage s takes
# microbatch j at tick j + s. The fill (the empty triangle at the start) is paid once per *run*:
# the queue is part of the train state, so the next step starts where this one stopped.

# %%
backprop, local = parex.make_schedule("1f1b", 4, 8), parex.make_schedule("local", 4, 8)
(charts.gantt_chart(backprop, title="1F1B, p = 4, m = 8")
 & charts.gantt_chart(local, title="local, p = 4, m = 8 (the fill: once per run)"))

# %% [markdown]
# ## Measured: the same tokens through both pipelines
# Both train `tiny` on the bundled corpus from the same initial parameters. The loss compared is
# the *model's* loss on held-out batches (stage 0's embedding, every stage's layers, the last
# stage's head), not local's training loss. The step time is timed with the runs taking turns;
# the bytes and temporaries are read from the compiled programs.

# %%
curves, summary, runs = local_vs_1f1b(model, train, layout_text, objectives, every=every)
parex.format_frame(summary)

# %% [markdown]
# Forward activations are the only thing that crosses a stage boundary, so the
# collective-permute bytes drop (1F1B sends activations forward *and* their gradients back),
# and each stage holds one microbatch's activations instead of up to p, so the temporaries drop
# too. On this emulated mesh the 8 devices share the laptop's cores: a stage idle in 1F1B's
# bubble lends its core to a busy one, so the bubble local removes costs little here. The
# predictor says what it buys on GPUs.

# %%
for schedule in ("1f1b", "local"):
    p = parex.predict(model, train, parex.Layout.parse(f"{layout_text},schedule={schedule}"),
                      "a100-80gb")
    t = p.step_time_s
    fill = f", one-time fill {format_seconds(t['fill'])}" if "fill" in t else ""
    print(f"{schedule:6s} on A100s: step {format_seconds(t['total'])}, bubble "
          f"{format_seconds(t['bubble'])}{fill}, "
          f"activations {format_bytes(p.memory_bytes_per_device['activations'])}")

# %% [markdown]
# ## The loss it costs
# Held-out loss against steps, at equal tokens. PPLL's abstract claims no loss of model
# performance; on this small corpus, watch the gap rather than trust it (`full = True` runs
# 300 steps and both objectives; docs/results/2026-12-local-learning.md has the long run).

# %%
print(parex.format_frame(summary[["run", "eval_loss", "gap_vs_1f1b"]]).to_string(index=False))
alt.Chart(curves).mark_line(point=True).encode(
    x="step:Q", y=alt.Y("eval_loss:Q", title="held-out loss"), color="run:N",
).properties(width=420, height=220)

# %% [markdown]
# ## When it loses
# A backprop pipeline carries the model's head on its last stage only, so it is tuned by giving
# that stage fewer layers. A local pipeline gives *every* stage a head. GPT-2 small's head costs
# about five layers' work (V = 50 257): with the layers split evenly local wins, with the split
# a backprop pipeline would choose it loses, the ResNet case of the paper. `head_scale` makes
# the head cheaper or dearer (as a smaller or larger vocabulary would). Predicted on A100s,
# compute only.

# %%
frame = losing_frame(parex.model_preset("gpt2-small"), parex.TrainConfig(global_batch=32),
                     parex.Layout(stage=4, microbatches=8, schedule="local"), "a100-80gb",
                     head_scales=(0.1, 0.25, 1.0, 4.0))
print(parex.format_frame(frame[["partition", "layers", "head_scale", "head_over_stage",
                                 "speed"]]).to_string(index=False))

# %% [markdown]
# ## The planner asks before it proposes one
# `parex plan --allow-local` ranks local pipelines beside the backprop layouts and says where
# each would rank, but never picks one: they train a different model.

# %%
result = plan(model, parex.TrainConfig(global_batch=16), "a100-80gb", remats=("none",))
print(local_report(local_alternatives(result, k=3)))
