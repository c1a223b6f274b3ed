"""Mixtures of experts (parex.model.moe): routing, parameter counts, the expert axis's parity with one
device (fp32, 1e-5) with and without dropped tokens, the same tokens dropped on every layout,
the all-to-all the step compiles, and the refusals."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from parity import Reference

from parex.model import transformer as gpt
from parex.config import TrainConfig, model_preset
from parex.executor.data import Batches
from parex.layout import Layout, LayoutError
from parex.measure import measure
from parex.measure.compiled import compile_layout
from parex.executor.mesh import make_mesh
from parex.model.moe import routing
from parex.executor.step import TrainStep
from parex.validation import validate

TRAIN = TrainConfig(global_batch=8)
TINY_MOE = model_preset("tiny-moe")
# GPT family, top-1 (Switch), a shared expert, capacity 1.0 (drops), z-loss on
SWITCH = model_preset("tiny").replace(name="tiny-switch", experts=4, top_k=1, expert_ffn=256,
                                      capacity_factor=1.0, shared_experts=1, z_loss=1e-3)
DROPPING = TINY_MOE.replace(name="tiny-moe-drop", capacity_factor=1.0)


# --- routing ------------------------------------------------------------------------------------

def test_capacity_is_per_sequence_and_dropless_holds_every_token():
    assert routing.capacity(DROPPING, 128) == 32  # ceil(1.0 · 2 · 128 / 8)
    assert routing.capacity(DROPPING.replace(capacity_factor=1.25), 128) == 40
    assert routing.capacity(TINY_MOE, 128) == 128


def test_top_k_matches_lax_top_k():
    probs = jax.nn.softmax(jax.random.normal(jax.random.key(0), (3, 5, 8)), -1)
    values, indices = routing.top_k(probs, 3)
    ref_values, ref_indices = jax.lax.top_k(probs, 3)
    np.testing.assert_array_equal(indices, ref_indices)
    np.testing.assert_allclose(values, ref_values)


def test_first_choices_take_slots_before_second_choices():
    # 3 tokens, 2 experts, k = 2, one slot per expert: token 0's first choice is expert 1,
    # tokens 1 and 2 choose expert 0 first. Expert 0's slot goes to token 1 (first choice,
    # earliest), expert 1's to token 0; every other assignment is dropped.
    choice = jnp.array([[[1, 0], [0, 1], [0, 1]]])
    gates = jnp.full((1, 3, 2), 0.5)
    dispatch, combine = routing.dispatch_and_combine(gates, choice, 2, 1)
    kept = np.asarray(dispatch[0, :, :, 0])  # (T, E)
    np.testing.assert_array_equal(kept, [[0, 1], [1, 0], [0, 0]])
    np.testing.assert_allclose(np.asarray(combine).sum(), 1.0)


def test_slots_follow_positions_when_tokens_are_stored_out_of_order():
    choice = jax.random.randint(jax.random.key(1), (2, 8, 2), 0, 4)
    gates = jnp.full((2, 8, 2), 0.5)
    order = np.array([0, 7, 1, 6, 2, 5, 3, 4])  # a zig-zag
    natural, _ = routing.dispatch_and_combine(gates, choice, 4, 2)
    stored, _ = routing.dispatch_and_combine(gates, choice[:, order], 4, 2, order)
    np.testing.assert_array_equal(stored, natural[:, order])


def test_balance_loss_is_the_sequence_wise_f_times_p():
    B, T, E, k = 2, 6, 4, 2
    logits = jax.random.normal(jax.random.key(2), (B, T, E))
    probs = jax.nn.softmax(logits, -1)
    _, choice = routing.top_k(probs, k)
    stats = routing.aux_stats(choice, probs, logits, jnp.zeros((B, T, E, 1)), E)
    expected = []
    for b in range(B):
        counts = np.array([(np.asarray(choice[b]) == i).sum() for i in range(E)])
        f = E / (k * T) * counts
        expected.append(np.sum(f * np.asarray(probs[b]).mean(0)))
    np.testing.assert_allclose(stats["balance"], np.mean(expected), rtol=1e-6)
    np.testing.assert_allclose(stats["load"].sum(), B * T * k)


# --- parameters ---------------------------------------------------------------------------------

@pytest.mark.parametrize("cfg", [TINY_MOE, SWITCH], ids=["tiny-moe", "switch"])
def test_parameter_counts_are_the_pytrees(cfg):
    params = gpt.init_params(cfg, jax.random.key(0))
    assert sum(x.size for x in jax.tree.leaves(params)) == cfg.n_params
    assert cfg.n_active_params < cfg.n_params


def test_mixtral_has_its_published_sizes():
    cfg = model_preset("mixtral-8x7b")  # 46.7B parameters, 12.9B active (arXiv:2401.04088)
    assert round(cfg.n_params / 1e9, 1) == 46.7 and round(cfg.n_active_params / 1e9, 1) == 12.9


def test_model_flops_count_active_parameters():
    cfg = model_preset("mixtral-8x7b")
    dense = cfg.replace(experts=0, ffn=cfg.ffn * cfg.top_k)  # the same active MLPs, no router
    router = 6 * cfg.layers * cfg.hidden * cfg.experts
    assert gpt.flops_per_token(cfg) == pytest.approx(gpt.flops_per_token(dense) + router)


# --- parity with one device ---------------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny_moe():
    return Reference(TINY_MOE, TRAIN)


@pytest.fixture(scope="module")
def switch():
    return Reference(SWITCH, TRAIN)


@pytest.fixture(scope="module")
def dropping():
    return Reference(DROPPING, TRAIN)


@pytest.mark.parametrize("text", ["data=2,expert=4",
                                  pytest.param("fsdp=2,expert=4", marks=pytest.mark.slow)])
def test_expert_layouts_match_single_device(tiny_moe, text):
    tiny_moe.check(Layout.parse(text))


@pytest.mark.slow
@pytest.mark.parametrize("text", ["expert=8", "data=2,expert=2,tensor=2",
                                  "data=2,expert=4,zero=1", "data=2,expert=2,microbatches=2",
                                  "tensor=2,expert=4,sp=on", "seq=2,cp=ring,expert=4",
                                  "seq=2,cp=ulysses,expert=2,data=2",
                                  # the slots reduce-scattered over seq (MeshOps.dispatch) inside
                                  # the accumulation loop, and beside ZeRO-3's gathers
                                  "seq=2,cp=ulysses,expert=2,data=2,microbatches=2",
                                  "seq=4,cp=ulysses,data=2,zero=3"])
def test_more_expert_layouts_match_single_device(tiny_moe, text):
    tiny_moe.check(Layout.parse(text))


@pytest.mark.slow
def test_full_remat_keeps_expert_gradients(tiny_moe):
    train = TRAIN.replace(remat="full")
    tiny_moe.check(Layout.parse("data=2,expert=4"), train)


def test_switch_with_a_shared_expert_and_drops_matches_single_device(switch):
    switch.check(Layout.parse("expert=4,tensor=2"))


@pytest.mark.parametrize("text", ["data=2,expert=4",
                                  pytest.param("seq=2,cp=ring,expert=4", marks=pytest.mark.slow)])
def test_drops_match_single_device(dropping, text):
    dropping.check(Layout.parse(text))


def test_the_same_tokens_are_dropped_on_every_layout(dropping):
    """Each expert keeps the same assignments, layer by layer, as on one device."""
    batch, params = dropping.batch, dropping.params
    one = jax.jit(lambda p, b: gpt.router_stats(p, b, DROPPING))(params, batch)
    layout = Layout.parse("data=2,expert=4")
    step = TrainStep(DROPPING, TRAIN, layout, make_mesh(layout))
    mesh = jax.jit(lambda p, b: gpt.router_stats(p, b, DROPPING, step.ops))(params, batch)
    assert 0.05 < float(one["dropped"]) < 0.9  # capacity 1.0 does drop
    np.testing.assert_array_equal(np.asarray(mesh["kept"]), np.asarray(one["kept"]))
    np.testing.assert_array_equal(np.asarray(mesh["load"]), np.asarray(one["load"]))


# --- the compiled step --------------------------------------------------------------------------

def test_dispatch_is_four_all_to_alls_per_block_over_expert():
    """2 forward (slots out, outputs back) and their 2 transposes per block, each the whole
    dispatch buffer b·E·C·D (float32) of one device."""
    step, compiled, _ = compile_layout(TINY_MOE, TRAIN, Layout.parse("data=2,expert=4"))
    from parex.measure.compiled import compiled_stats

    a2a = [c for c in compiled_stats(compiled, step)["collectives"] if c.kind == "all-to-all"]
    b, T, D, E = TRAIN.global_batch // 8, TINY_MOE.seq_len, TINY_MOE.hidden, TINY_MOE.experts
    assert [(c.axes, c.count, c.bytes) for c in a2a] == [
        (("expert",), 4 * TINY_MOE.layers, b * E * routing.capacity(TINY_MOE, T) * D * 4)]


def test_sequence_devices_split_the_slots_not_repeat_them():
    """Under seq each device runs the experts on C/s of the slots, reduce-scattered from its
    tokens' partial sums, so a seq=4 step does a data-parallel step's matmuls (before, every
    seq device ran every expert on all C slots: 5x data=8's FLOPs at seq=8)."""
    from parex.measure.compiled import compiled_stats

    def stats(text):
        step, compiled, _ = compile_layout(TINY_MOE, TRAIN, Layout.parse(text))
        return compiled_stats(compiled, step)

    dp, sp = stats("data=8"), stats("seq=4,cp=ulysses,data=2")
    assert sp["matmul_flops_per_device"] / dp["matmul_flops_per_device"] == \
        pytest.approx(1.0, abs=0.01)
    split = {c.kind: c for c in sp["collectives"] if c.axes == ("seq",) and c.bytes > 2 ** 20}
    b = TRAIN.global_batch // 2  # sequences per data replica
    whole = b * TINY_MOE.experts * TINY_MOE.seq_len * TINY_MOE.hidden * 4  # b·E·C·D, C = T
    assert (split["reduce-scatter"].count, split["reduce-scatter"].bytes) == \
        (2 * TINY_MOE.layers, whole)  # the dispatch forward, the combine's transpose backward
    assert (split["all-gather"].count, split["all-gather"].bytes) == (2 * TINY_MOE.layers, whole)


@pytest.mark.slow  # a minute of compiles on 2 cores
def test_expert_layout_trains_as_data_parallel_and_reports_its_router():
    """The issue's check: data=2,expert=4 gives data=8's losses over 3 steps (1e-5)."""
    train = TrainConfig(global_batch=16, steps=3)
    ep = measure(TINY_MOE, train, Layout.parse("data=2,expert=4"))
    dp = measure(TINY_MOE, train, Layout.parse("data=8"))
    np.testing.assert_allclose(ep.losses, dp.losses, rtol=1e-5)
    assert ep.moe["dropped_fraction"] == [0.0] * 3  # dropless
    loads = np.array(ep.moe["expert_load"])
    assert loads.shape == (3, 8) and np.allclose(loads.sum(1), 1, atol=1e-3)
    assert ep.moe["expert_load"] == dp.moe["expert_load"]
    assert ep.to_row()["moe_dropped_fraction"] == 0.0


# --- refusals, before anything compiles ---------------------------------------------------------

@pytest.mark.parametrize("model, text, words", [
    (model_preset("tiny-llama"), "data=2,expert=4", ["dense model", "data=8", "tiny-moe"]),
    (TINY_MOE.replace(experts=6), "data=2,expert=4", ["experts=6", "expert=4", "[1, 2, 3, 6]"]),
    (TINY_MOE.replace(capacity_factor=0.0), "data=8", ["capacity_factor=0.0", "cf > 0"]),
    (TINY_MOE.replace(top_k=9), "data=8", ["top_k=9", "8 experts"]),
    (TINY_MOE, "data=2,expert=2,stage=2", ["pipeline stages", "data=4,expert=2"]),
])
def test_bad_moe_input_gets_one_clear_line(model, text, words):
    with pytest.raises(LayoutError) as error:
        validate(Layout.parse(text), model, TRAIN, 8)
    message = str(error.value)
    assert "\n" not in message and all(w in message for w in words), message


def test_batch_splits_over_expert_too():
    layout = Layout.parse("data=2,expert=4")
    assert layout.data_parallel == 8 and layout.spec(("batch", None))[0] == ("data", "expert")
    batch = Batches("corpus", 8, 128, 256)[0]
    assert batch["inputs"].shape == (8, 128)


# --- auxiliary-loss-free balancing (DeepSeek-V3) ---------------------------------------------------

def test_rebalance_moves_each_bias_toward_its_layers_mean_load():
    bias = jnp.zeros((2, 4))
    load = jnp.array([[10.0, 30.0, 20.0, 20.0], [5.0, 5.0, 5.0, 25.0]])
    moved = routing.rebalance(bias, load, 0.1)
    np.testing.assert_allclose(moved, [[0.1, -0.1, 0.0, 0.0], [0.1, 0.1, 0.1, -0.1]])


def test_the_bias_chooses_experts_but_not_gates():
    x = jax.random.normal(jax.random.key(3), (1, 4, 8))
    w = jax.random.normal(jax.random.key(4), (8, 4))
    cfg = TINY_MOE.replace(experts=4, top_k=1)
    bias = jnp.array([0.0, 0.0, 0.0, 10.0])  # expert 3 wins every token
    gates, choice, probs, _ = routing.route(x, w, cfg, bias)
    assert (np.asarray(choice) == 3).all()
    np.testing.assert_allclose(gates[..., 0], probs[..., 3])  # its gate: the probability


@pytest.mark.slow
def test_bias_balancing_trains_alike_on_every_layout_and_evens_the_load():
    """12 steps of tiny-moe without the balance loss: the same losses and biases on data=8 and
    data=2,expert=4; with the bias (γ = 0.01) the busiest expert's load over the last 4 steps
    is below its load without it."""
    base = TINY_MOE.replace(balance_loss=0.0)
    biased = base.replace(name="tiny-moe-bias", bias_rate=1e-2)
    train = TrainConfig(global_batch=16, steps=12)
    runs = {(cfg.name, text): measure(cfg, train, Layout.parse(text))
            for cfg in (base, biased) for text in ("data=8", "data=2,expert=4")}
    for cfg in (base, biased):
        np.testing.assert_allclose(runs[cfg.name, "data=8"].losses,
                                   runs[cfg.name, "data=2,expert=4"].losses, rtol=1e-5)
    busiest = {c.name: np.mean(runs[c.name, "data=8"].moe["max_load_ratio"][-4:])
               for c in (base, biased)}
    assert busiest["tiny-moe-bias"] < 0.8 * busiest["tiny-moe"], busiest


def test_expert_load_chart_has_a_bar_per_expert_and_layout():
    import pandas as pd

    from parex.charts import expert_load_chart

    study = pd.DataFrame({"layout": ["data=8", "expert=8"],
                          "expert_load": [[0.125] * 8, [0.25, 0.05] * 4]})
    spec = expert_load_chart(study).to_dict()
    chart_data = next(iter(spec["datasets"].values()))
    assert len(chart_data) == 16 and {r["layout"] for r in chart_data} == {"data=8", "expert=8"}
