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
# # 09 · Heterogeneous clusters: one model across mixed GPU types
#
# HexiScale (arXiv:2409.01143) trains one LLM across RTX 3080 Ti, 3090, 4090 and A100 cards
# at once with *asymmetric* parallelism: every pipeline takes its own share of the global batch
# and its own microbatch count, every stage its own number of layers and its own tensor degree.
# Its headline: MFU close to a homogeneous cluster of the same total peak FLOP/s, and well
# above splitting the mixed cluster evenly. This notebook plans such a cluster with parex's
# heterogeneous planner, draws the plan, compares it with both yardsticks, slows a network
# down to see what moves, and runs an asymmetric plan for real on the emulated mesh.

# %%
import parex

parex.emulate_devices(8)

# %% tags=["parameters"]
offline = True
cluster_name = "het-48"  # data/clusters/het-48.toml
model_name, global_batch, seq_len = "llama2-7b", 256, 4096
odd_batch = 96  # for het-odd
speeds = [100, 25, 10, 2.5]  # Gb/s between groups, for the network study

# %%
import altair as alt  # noqa: E402
import pandas as pd  # noqa: E402

from parex import charts, model_preset  # noqa: E402
from parex.hetero import (compare, comparison_report, load_hetero_cluster,  # noqa: E402
                          network_study, plan_chart, plan_text)

if offline:
    charts.enable_offline()

# %% [markdown]
# ## A mixed cluster, as data
# A cluster file lists groups of nodes, each of one chip (a hardware profile with its sources),
# the link between a group's nodes and the link between groups, in Gb/s per node.

# %%
cluster = load_hetero_cluster(cluster_name)
model = model_preset(model_name)
print(cluster.describe(), f"· {cluster.inter_group_gbps} Gb/s between groups")
groups = pd.DataFrame([{"group": g.name, "devices": g.n_devices,
                        "bf16 peak FLOP/s": g.chip.peak("bfloat16"), "memory": g.chip.hbm_bytes,
                        "between nodes Gb/s": g.inter_node_gbps,
                        "intra-node link": g.chip.intra_node.name} for g in cluster.groups])
parex.format_frame(groups)

# %% [markdown]
# ## The plan, and the two yardsticks
# The search tries every tensor degree per group, pipeline count, order of the groups along a
# pipeline and placement; for each it splits the layers over the stages (smallest bottleneck
# within each device's memory) and the microbatches over the pipelines (all finish together),
# then re-times the best with the 1F1B tables stage by stage.

# %%
result = compare(model, cluster, global_batch, seq_len)
print(comparison_report(result))

# %% [markdown]
# Pipelines × stages: each bar a stage over the blocks it holds, coloured by its chip,
# labelled with its tensor degree and layer count. The slow cards take few layers; the A100s
# most.

# %%
plan_chart(result.search.best.plan)

# %%
bars = pd.DataFrame([
    {"plan": "asymmetric (this cluster)", "MFU": result.search.best.mfu},
    {"plan": "best even split (this cluster)", "MFU": result.even.mfu},
    {"plan": f"same peak: {result.reference.name}", "MFU": result.homogeneous.best.mfu}])
alt.Chart(bars).mark_bar().encode(x=alt.X("MFU:Q", axis=alt.Axis(format="%")),
                                  y=alt.Y("plan:N", sort=None), color="plan:N")

# %% [markdown]
# When the groups do not divide into equal pipelines — here a half-filled A100 server and six
# 3090s — the pipelines differ: one takes more stages of one chip, and the batch shares even
# out their speeds (each pipeline its own share and microbatch count).

# %%
odd = load_hetero_cluster("het-odd")
odd_result = compare(model, odd, odd_batch, seq_len)
print(plan_text(odd_result.search.best.plan, odd))
print(f"MFU {odd_result.search.best.mfu:.1%}; even split {odd_result.even.mfu:.1%}; "
      f"same peak {odd_result.homogeneous.best.mfu:.1%}")

# %% [markdown]
# ## What moves when a network gets slower
# The link between the groups, from 100 Gb/s down. Each stage-to-stage hop that crosses groups
# sits on the 1F1B critical path, so as it slows the plan changes shape (fewer or more stages,
# other tensor degrees) and the MFU falls — faster than the even split's, which crosses groups
# too.

# %%
study = network_study(model, cluster, global_batch, seq_len, group=None, speeds=speeds)
parex.format_frame(study.drop(columns=["plan"]))

# %%
long = study.melt(id_vars="gbps", value_vars=["mfu", "even split mfu"], var_name="plan")
alt.Chart(long).mark_line(point=True).encode(
    x=alt.X("gbps:Q", scale=alt.Scale(type="log"), title="Gb/s between groups"),
    y=alt.Y("value:Q", axis=alt.Axis(format="%"), title="MFU"), color="plan:N")

# %% [markdown]
# ## Running an asymmetric plan on the emulated mesh
# A toy cluster of two groups of four emulated devices. The plan: pipeline 1 takes 6 of the 8
# sequences in 3 microbatches, 3 blocks on two devices (tensor 2), then 1 block on one device;
# pipeline 2 takes 2 sequences, the whole model on two devices of the other group. Every stage
# is its own jitted program on its own sub-mesh (parex.hetero.mpmd); loss and gradients
# must equal the single-device reference.

# %%
import jax  # noqa: E402

from parex import Batches, ModelConfig, TrainConfig, init_params  # noqa: E402
from parex import reference_loss_and_grads, relative_error  # noqa: E402
from parex.hetero import HeteroPlan, MpmdRunner, cluster_from_dict  # noqa: E402

# %%
toy = cluster_from_dict({"name": "toy", "groups": [
    {"chip": "a100-80gb", "devices_per_node": 4, "name": "fast"},
    {"chip": "rtx-3090", "devices_per_node": 4, "name": "slow"}]})
small = ModelConfig("micro", layers=4, hidden=64, heads=4, vocab=256, seq_len=32)
toy_plan = HeteroPlan.parse("batch=6 micro=3: fast[0:2] t2 L3 > slow[0:1] t1 L1; "
                            "batch=2 micro=1: slow[2:4] t2 L4")
print(plan_text(toy_plan, toy))

# %%
train = TrainConfig(global_batch=8)
params = init_params(small, jax.random.key(0))
batch = Batches("corpus", 8, small.seq_len, small.vocab)[0]
loss, grads = MpmdRunner(small, train, toy_plan, toy).loss_and_grads(params, batch)
ref_loss, ref_grads = reference_loss_and_grads(small, train, params, batch)
print(f"loss {float(loss):.6f} against the reference {float(ref_loss):.6f}; "
      f"gradient relative error {relative_error(grads, ref_grads):.1e}")
