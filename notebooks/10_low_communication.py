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
# # 10 · Low-communication training: DiLoCo over a slow link
#
# Data parallelism all-reduces every gradient every step. Between two clusters joined by a
# 1 Gb/s link that is hopeless for a large model. **DiLoCo** (Douillard et al. 2023) gives each
# cluster its own replica of the model: every replica takes H ordinary AdamW steps on its own
# data without talking to the others, then the replicas average their *pseudo-gradients*
# Δ_r = θ_sync − θ_r and take one outer Nesterov step:
#
#     Δ̄ = mean_r Δ_r ;  m ← μ·m + Δ̄ ;  θ_sync ← θ_sync − η·(Δ̄ + μ·m) ;  θ_r ← θ_sync
#
# with η = 0.7, μ = 0.9. Communication drops by a factor H. *Streaming* DiLoCo syncs the layers in
# P fragments, one every H/P steps (lower peak bandwidth); the exchange can be quantised (int8:
# a quarter of the bytes); and DiLoCoX's *one-step delay* applies round k's update after round
# k+1, so the exchange hides behind compute. In parex all of it is one layout string:
# `replica=4,data=2,inner_steps=50,fragments=2,outer_dtype=int8,overlap=on`.

# %%
import parex

parex.emulate_devices(8)

# %% tags=["parameters"]
offline = True
full = False  # True: the long run, 150 steps with H = 10 and 50 (about 12 minutes on 2 cores)
model_name = "tiny"
steps = 40
replicas = 4
hs = [5, 20]
global_batch = 16
seq = 64
wan_gbps = 1.0

# %%
from parex import charts, format_bytes
from parex.lowcomm import default_runs, final_gaps, loss_study, scale_models, wan_link, wan_sweep

if offline:
    charts.enable_offline()
if full:
    steps, hs = 150, [10, 50]
model = parex.model_preset(model_name)
train = parex.TrainConfig(global_batch=global_batch, seq_len=seq, steps=steps)

# %% [markdown]
# ## One DiLoCo layout, measured
# Each replica runs the ordinary parex train step of its inner layout (here data=2) on its own
# two devices: its compiled program cannot reach the other replicas. The outer program is a
# second compiled program whose only traffic crosses the `replica` axis. Both are read from the
# HLO: inner bytes per step, outer bytes per sync, and the cross-replica bytes amortised over H.

# %%
layout = parex.Layout.parse(f"replica={replicas},data={8 // replicas},inner_steps={hs[0]}")
m = parex.measure(model, train.replace(steps=2 * hs[0]), layout)
d = m.diloco
print(f"layout {m.layout}: inner step {format_bytes(d['inner_bytes_per_device_per_step'])} "
      f"per device (inside a replica); outer sync {format_bytes(d['outer_bytes_per_sync'])}, "
      f"i.e. {format_bytes(d['cross_replica_bytes_per_step'])} per step across replicas")
sync_dp = parex.measure(model, train.replace(steps=2), parex.Layout(data=8))
print(f"sync DP data=8: {format_bytes(sum(sync_dp.comm_bytes_per_device.values()))} per device "
      f"per step, in all-reduces over all 8 devices, so across the replicas' boundary too")

# %% [markdown]
# ## Loss against the bytes exchanged
# The same tokens for every run: sync DP on all 8 devices, one replica alone (a quarter of the
# batch, four times the steps), and DiLoCo with each H, streaming and the int8 exchange. The left
# panel is training loss against tokens; the right one the eval loss (fixed batches, another
# seed) against the bytes each replica has sent to the others, on a log scale.

# %%
runs = default_runs(8, replicas, tuple(hs), fragments=2)
frame = loss_study(model, train, runs, eval_every=max(10, steps // 6))
gaps = final_gaps(frame)
parex.format_frame(gaps)

# %%
charts.loss_chart(frame, title=f"{model.name}: DiLoCo against sync DP, {steps} steps")

# %% [markdown]
# ### Why DiLoCo's loss sits above sync DP's in a short run
# At equal tokens, a short run favours synchronous training, for three reasons:
# - **Fewer global steps.** Sync DP moves the shared model once per step of B sequences. DiLoCo's
#   replicas take H steps each on B/R sequences, and the shared model moves once per round:
#   steps/H outer steps in all (two rounds at H = 20 over 40 steps). Between rounds each replica
#   follows the noisier path of the single replica's smaller batch.
# - **The outer optimiser warms up.** Its Nesterov momentum starts at zero and, at μ = 0.9,
#   averages over about 1/(1 − μ) = 10 rounds: a run of a few rounds ends before the outer step
#   reaches its full size.
# - **Stale pseudo-gradients.** Δ_r sums H updates taken from the round's starting point, not from
#   where the other replicas have since gone: the larger H, the further the replicas drift before
#   they are reconciled.
#
# Over long runs the gap closes: DiLoCo's paper (Douillard et al., arXiv:2311.08105) reports that
# 8 workers at H = 500 perform as well as fully synchronous optimisation on C4 while communicating
# 500 times less. `full = True` runs the longer variant here; the gap narrows as rounds add up.

# %% [markdown]
# ## Predicted wall clock over a WAN
# At scale the question is time. The predictor takes one replica's inner step from parex's
# analytic model (H100s, each replica its own cluster) and adds the exchange over a 1 Gb/s link:
# a ring all-reduce of 2·(R−1)/R·|θ|·bytes. Sync DP pays it every step; DiLoCo once every H;
# overlap hides it behind H inner steps. The dashed line is compute alone; where DiLoCo meets
# it the WAN has stopped being the bottleneck (H* = t_sync / t_inner).

# %%
sweep = wan_sweep(scale_models(), "h100-sxm", 2, [1, 3, 10, 30, 100, 300, 1000],
                  wan_link(wan_gbps))
charts.wan_chart(sweep[sweep["method"].isin(["sync-dp", "diloco", "overlap"])], width=220)

# %%
at100 = sweep[(sweep["inner_steps"] == 100) & (sweep["method"] == "diloco")]
parex.format_frame(at100[["model", "params", "inner_layout", "compute_s", "step_time_s",
                           "h_crossover", "avg_bandwidth", "peak_bandwidth"]])

# %% [markdown]
# The average bandwidth DiLoCo needs, B_avg = 2·|θ|·bytes / (H·t_step), falls with H; vanilla
# DiLoCo's peak does not (the whole model moves at once) — streaming divides it by P and the
# one-step delay spreads it over the round. `parex lowcomm --model llama3-70b --layout
# replica=2,fsdp=8,tensor=8,inner_steps=100 --wan-gbps 1` prints the same table for any model.
