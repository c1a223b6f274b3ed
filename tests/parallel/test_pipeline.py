"""The pipeline executor on 8 emulated devices: gradient parity with the unpipelined model for
every schedule, 3D layouts, uneven partitions, and sequence, context and tensor parallelism inside
stages; the timetable's buffers; validation; the CLI end to end. (What the compiled step keeps and
computes is in test_pipeline_fidelity.py.)"""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from parex.cli.main import main
from parex.config import ModelConfig, TrainConfig
from parex.layout import Layout, LayoutError
from parex.measure import relative_error
from parex.executor.mesh import make_mesh
from parex.model.transformer import init_params
from parex.parallel.timetable import make_timetable, stage_partition
from parex.parallel.schedules import LOOPING, SCHEDULES, VEE, make_schedule
from parex.executor.step import TrainStep, reference_loss_and_grads
from parex.validation import validate

# Eight layers so that p·v = 8 chunks fit; small widths keep each compile to a few seconds.
MODEL = ModelConfig("pipe-test", layers=8, hidden=32, heads=2, vocab=64, seq_len=8)
TRAIN = TrainConfig(global_batch=8)
TOL = 1e-5


@pytest.fixture(scope="module")
def reference():
    params = init_params(MODEL, jax.random.key(0))
    tokens = jax.random.randint(jax.random.key(1), (TRAIN.global_batch, MODEL.seq_len), 0,
                                MODEL.vocab)
    batch = {"inputs": tokens, "targets": jnp.roll(tokens, -1, axis=1)}
    loss, grads = reference_loss_and_grads(MODEL, TRAIN, params, batch)
    return params, batch, loss, grads


def pipelined(layout_text, params, batch, model=MODEL, train=TRAIN):
    layout = Layout.parse(layout_text)
    step = TrainStep(model, train, layout, make_mesh(layout))
    params = jax.device_put(params, step.state_shardings("param"))
    batch = jax.device_put(batch, {k: step.batch_sharding for k in batch})
    return step.jitted_loss_and_grads()(params, batch)


def check_parity(layout_text, reference):
    params, batch, ref_loss, ref_grads = reference
    loss, grads = pipelined(layout_text, params, batch)
    assert abs(float(loss) - float(ref_loss)) <= TOL * abs(float(ref_loss))
    assert relative_error(grads, ref_grads) < TOL


def schedule_args(name):
    return f"schedule={name}" + (",virtual=2" if name in LOOPING + VEE else "")


# Each schedule's parity is in the default suite once: on four stages, or (zbv) on two stages
# with tensor parallelism inside them; the other mesh of each is marked slow.
@pytest.mark.parametrize("schedule", [
    pytest.param(s, marks=pytest.mark.slow) if s == "zbv" else s for s in SCHEDULES])
def test_every_schedule_matches_unpipelined_on_data2_stage4(schedule, reference):
    check_parity(f"data=2,stage=4,{schedule_args(schedule)},microbatches=4", reference)


@pytest.mark.parametrize("schedule", [
    s if s == "zbv" else pytest.param(s, marks=pytest.mark.slow) for s in SCHEDULES])
def test_every_schedule_matches_unpipelined_on_data2_tensor2_stage2(schedule, reference):
    check_parity(f"data=2,tensor=2,stage=2,{schedule_args(schedule)},microbatches=4", reference)


# Inside stages: Megatron's sequence parallelism, Ulysses, ring attention (its hops as
# all-to-alls) and fsdp, with data-parallel replicas.
INSIDE = {"tp_sp": "tensor=2,sp=on", "ulysses": "seq=2,cp=ulysses", "ring": "seq=2,cp=ring",
          "fsdp": "fsdp=2,tensor=2"}


@pytest.mark.slow  # a minute of compiles on 2 cores
@pytest.mark.parametrize("inside,schedule", [("tp_sp", "zbh1"), ("ulysses", "1f1b")])
def test_sequence_and_context_parallelism_run_inside_stages(inside, schedule, reference):
    check_parity(f"{INSIDE[inside]},data=2,stage=2,{schedule_args(schedule)},microbatches=2",
                 reference)


@pytest.mark.slow
@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("inside", INSIDE)
def test_every_schedule_with_sp_ulysses_ring_and_fsdp_inside_stages(inside, schedule, reference):
    data = "" if inside == "fsdp" else "data=2,"
    check_parity(f"{INSIDE[inside]},{data}stage=2,{schedule_args(schedule)},microbatches=4",
                 reference)


@pytest.mark.slow  # a minute of compiles on 2 cores
def test_ring_attention_runs_inside_stages(reference):
    """Its hops are all-to-alls inside stages (parallel.context._shift_by_all_to_all); under
    1F1B one stage runs F while the other runs B. seq=4: the backward's middle hops, (k, v, dk,
    dv) as one block, run too (seq=2 with data replicas, every schedule: the slow test above)."""
    check_parity("seq=4,cp=ring,stage=2,schedule=1f1b,microbatches=2", reference)


@pytest.mark.slow
@pytest.mark.parametrize("schedule", ["gpipe", "zbh1", "zbv"])
def test_ring_of_four_inside_stages_matches_unpipelined(schedule, reference):
    check_parity(f"seq=4,cp=ring,stage=2,{schedule_args(schedule)},microbatches=2", reference)


@pytest.mark.slow  # a minute of compiles on 2 cores
def test_uneven_partition_matches_unpipelined(reference):
    check_parity("data=2,stage=4,partition=3:1:2:2,schedule=zbh1,microbatches=4", reference)


@pytest.mark.slow
@pytest.mark.parametrize("layout", [
    "data=2,tensor=2,stage=2,schedule=interleaved,virtual=2,partition=3:1:2:2,microbatches=2",
    "fsdp=2,tensor=2,stage=2,schedule=1f1b,microbatches=2",  # an XLA abort before the fix
    "data=2,zero=3,stage=4,schedule=bfs,virtual=2,microbatches=4",  # data stays automatic
    # fsdp manual in the pipeline (parallel.fsdp_stage), with data, SP, ring and Ulysses
    "data=2,fsdp=2,stage=2,schedule=zbh1,microbatches=2",
    "fsdp=2,tensor=2,sp=on,stage=2,schedule=1f1b,microbatches=2",
    "fsdp=2,seq=2,cp=ring,stage=2,schedule=gpipe,microbatches=2",
    "fsdp=2,seq=2,cp=ulysses,stage=2,schedule=zbv,virtual=2,microbatches=2",
])
def test_more_3d_layouts_match_unpipelined(layout, reference):
    check_parity(layout, reference)


# --- the timetable -------------------------------------------------------------------------------

@pytest.mark.parametrize("name", SCHEDULES)
def test_plan_buffers_hold_what_the_table_keeps_in_flight(name):
    """A stage keeps a chunk's residuals from its F to its B, and under a split backward the
    records to its W: the slots are the table's peaks; the embedding's and head's stashes only
    hold the first and last virtual stage's microbatches."""
    v = 2 if name in LOOPING + VEE else 1
    schedule = make_schedule(name, 4, 8, v)
    timetable = make_timetable(schedule, stage_partition(8, 4, v, None))
    peaks = schedule.arrays.peak_in_flight(end="B")[0]
    assert timetable.slots["res"] == max(peaks)
    if schedule.split_backward:
        assert timetable.slots["rec"] == max(schedule.peak_in_flight())
    first, last = schedule.place(0)[0], schedule.place(4 * v - 1)[0]
    assert timetable.slots["emb"] <= peaks[first] and timetable.slots["head"] <= peaks[last]
    assert timetable.arrays["branch"].shape == (schedule.n_ticks, 4)
    sent = (timetable.arrays["send"] > 0).sum()
    assert sent == 2 * 8 * (4 * v - 1)  # every F but the last's, every B but the first's


@pytest.mark.parametrize("family", ["gpt", "llama"])
def test_split_backward_leaves_the_norms_weight_gradients_to_b(family):
    """W's records and tap cotangents are the projections' only: the norms' scales (and GPT's
    biases) are differentiated in B (split.BlockTaps.early), which needs no stash for them."""
    from parex.model.transformer import SINGLE_DEVICE
    from parex.parallel.split import BlockTaps

    cfg = ModelConfig("split", family=family, layers=2, hidden=32, heads=4, kv_heads=2,
                      vocab=64, seq_len=8)
    layer = jax.tree.map(lambda a: a[0], init_params(cfg, jax.random.key(0))["blocks"])
    x = jnp.zeros((2, cfg.seq_len, cfg.hidden))
    taps = BlockTaps.probe(cfg, SINGLE_DEVICE, "none", layer, x)
    assert taps.early == ("norm1", "norm2")
    assert {path[0] for op in taps.ops for _, path in op.paths} == {"attn", "mlp"}
    # QKV, W_o, the MLP input (one op for SwiGLU's two matrices) and W_out
    assert len(taps.records) == len(taps.ops) == 4


@pytest.mark.slow  # a minute of compiles on 2 cores
def test_llama_zero_bubble_matches_unpipelined():
    """RMSNorm's scale (no bias) differentiated in B, GQA and SwiGLU projections in W."""
    model = ModelConfig("pipe-llama", family="llama", layers=4, hidden=32, heads=4, kv_heads=2,
                        vocab=64, seq_len=8)
    params = init_params(model, jax.random.key(0))
    tokens = jax.random.randint(jax.random.key(1), (8, model.seq_len), 0, model.vocab)
    batch = {"inputs": tokens, "targets": jnp.roll(tokens, -1, axis=1)}
    ref_loss, ref_grads = reference_loss_and_grads(model, TRAIN, params, batch)
    loss, grads = pipelined("data=2,stage=4,schedule=zbh1,microbatches=4", params, batch, model)
    assert abs(float(loss) - float(ref_loss)) <= TOL * abs(float(ref_loss))
    assert relative_error(grads, ref_grads) < TOL


@pytest.mark.slow  # a minute of compiles on 2 cores
def test_llama_ring_inside_stages_with_full_remat_matches_unpipelined():
    """RoPE's zig-zag positions are a residual the probe traces as invariant over stage and the
    stage's forward stores varying: the stash is created varying (it failed to trace before)."""
    model = ModelConfig("pipe-llama", family="llama", layers=4, hidden=32, heads=4, kv_heads=2,
                        vocab=64, seq_len=8)
    train = TRAIN.replace(remat="full")
    params = init_params(model, jax.random.key(0))
    tokens = jax.random.randint(jax.random.key(1), (8, model.seq_len), 0, model.vocab)
    batch = {"inputs": tokens, "targets": jnp.roll(tokens, -1, axis=1)}
    ref_loss, ref_grads = reference_loss_and_grads(model, train, params, batch)
    loss, grads = pipelined("data=2,seq=2,cp=ring,stage=2,schedule=1f1b,microbatches=2", params,
                            batch, model, train)
    assert abs(float(loss) - float(ref_loss)) <= TOL * abs(float(ref_loss))
    assert relative_error(grads, ref_grads) < TOL


def test_gpipe_keeps_every_microbatch_and_1f1b_at_most_p():
    for m in (4, 16):
        gpipe = make_timetable(make_schedule("gpipe", 4, m), (2,) * 4)
        one_f_one_b = make_timetable(make_schedule("1f1b", 4, m), (2,) * 4)
        assert gpipe.slots["res"] == m and one_f_one_b.slots["res"] == min(4, m)
        assert one_f_one_b.slots["head"] == 1  # the last stage runs each B right after its F


def test_zbv_hands_the_middle_of_the_v_on_locally():
    """ZB-V's virtual stages p−1 and p share the last stage: that activation (and the cotangent
    coming back) never leaves the device."""
    timetable = make_timetable(make_schedule("zbv", 4, 8, 2), (1,) * 8)
    from parex.parallel.timetable import SELF

    local = timetable.arrays["send"] == SELF
    assert local.any() and set(np.nonzero(local)[1]) == {3}
    assert (local.sum(0)[3]) == 2 * 8


def test_uneven_partition_layer_index_and_mask():
    timetable = make_timetable(make_schedule("interleaved", 2, 2, 2),
                               stage_partition(8, 2, 2, (3, 1, 2, 2)))
    # Virtual stage k = chunk·p + stage: stage 0 holds layers 0-2 and 4-5, stage 1 layer 3, 6-7.
    assert timetable.layer_index[0, 0, :3].tolist() == [0, 1, 2]
    assert timetable.layer_index[1, 0, :1].tolist() == [3]
    assert timetable.layer_index[0, 1, :2].tolist() == [4, 5]
    assert timetable.layer_index[1, 1, :2].tolist() == [6, 7]
    assert timetable.layer_mask.sum() == 8 and not timetable.layer_mask[1, 0, 1:].any()


@pytest.mark.parametrize("name,p,v", [("interleaved", 2, 2), ("bfs", 4, 2), ("zbv", 4, 2),
                                        ("zbv", 2, 2)])
def test_storage_order_makes_each_stage_rows_its_chunks(name, p, v):
    """Stored in `storage_order`, stage s's contiguous rows are its chunks: the regrouping
    (p, v, Lmax) is a reshape that equals the gather of the model's order."""
    from parex.parallel.timetable import storage_order

    timetable = make_timetable(make_schedule(name, p, 2 * p, v), stage_partition(8, p, v, None))
    order = storage_order(8, p, v, name in VEE, None)
    assert sorted(order.tolist()) == list(range(8))
    assert (order.reshape(timetable.layer_index.shape) == timetable.layer_index).all()
    assert storage_order(8, p, 1, False, None) is None  # one chunk per stage: already so
    assert storage_order(8, 2, 2, False, (3, 1, 2, 2)) is None  # uneven: padded, gathered


def test_zbv_train_state_holds_the_models_parameters_per_stage():
    """The train state stores the blocks per stage (TrainStep.block_order); natural_params
    gives back the model's initial parameters (up to the compiled initialiser's rounding), and
    to_storage inverts it exactly."""
    layout = Layout.parse("data=2,stage=4,schedule=zbv,virtual=2,microbatches=4")
    step = TrainStep(MODEL, TRAIN, layout, make_mesh(layout))
    stored = step.init_state()["params"]
    natural = init_params(MODEL, jax.random.key(TRAIN.seed))
    assert step.block_order is not None
    assert relative_error(step.natural_params(stored), natural) < 1e-6
    assert relative_error(step.to_storage(step.natural_params(stored)), stored) == 0.0
    assert relative_error(stored["blocks"], natural["blocks"]) > 0.1  # really reordered


@pytest.mark.slow  # a minute of compiles on 2 cores
def test_zbv_train_steps_follow_the_model_order_run(reference):
    """Three optimizer steps of ZB-V, whose state stores the chunks per stage, give the losses
    and (in the model's order) the parameters of GPipe, whose state is in the model's order.
    Parameters to 1e-4: Adam's first updates are about lr·sign(g), so gradients equal to 1e-7
    can still differ by a few lr where g is near zero; a wrong order would differ by O(1)."""
    _, batch, _, _ = reference
    runs = {}
    for text in ("data=2,stage=4,microbatches=4",
                 "data=2,stage=4,schedule=zbv,virtual=2,microbatches=4"):
        layout = Layout.parse(text)
        step = TrainStep(MODEL, TRAIN, layout, make_mesh(layout))
        state, fn = step.init_state(), step.jitted_step()
        placed = jax.device_put(batch, {k: step.batch_sharding for k in batch})
        losses = []
        for _ in range(3):
            state, loss = fn(state, placed)
            losses.append(float(loss))
        runs[text] = losses, step.natural_params(state["params"])
    (loss_a, params_a), (loss_b, params_b) = runs.values()
    np.testing.assert_allclose(loss_a, loss_b, rtol=TOL)
    assert relative_error(params_a, params_b) <= 1e-4


# --- validation before compile -------------------------------------------------------------------

@pytest.mark.parametrize("layout,fix", [
    ("data=2,stage=4,schedule=zigzag", "use one of gpipe, 1f1b"),
    ("data=2,stage=4,schedule=interleaved,virtual=2,microbatches=6", "use microbatches=8 or 4"),
    ("data=2,stage=4,schedule=interleaved,virtual=2,microbatches=2", "at least and a multiple"),
    ("data=2,stage=4,schedule=interleaved,microbatches=4", "virtual=2"),
    ("data=2,stage=4,schedule=1f1b,virtual=2,microbatches=4", "set virtual=1"),
    ("data=2,stage=4,partition=3:1,microbatches=4", "give one layer count per chunk"),
    ("data=2,stage=4,partition=3:3:1:2,microbatches=4", "sum to the model's layers=8"),
    ("data=2,stage=4,partition=4:0:2:2,microbatches=4", "at least one layer"),
    ("data=4,stage=2,schedule=interleaved,virtual=3,microbatches=2", "partition=2:2:1:1:1:1"),
    ("data=4,stage=2,schedule=1f1b,microbatches=1", None),
    ("data=8,schedule=1f1b", "stage=2 or more"),
    ("data=2,stage=4,schedule=zbv,microbatches=4", "set virtual=2"),
    ("tensor=2,sp=on,seq=2,stage=2", "cp=ulysses"),
])
def test_bad_pipelines_are_rejected_before_compile(layout, fix):
    layout, train = Layout.parse(layout), TrainConfig(global_batch=48)  # batch fits every m here
    if fix is None:  # a valid layout: validation passes
        validate(layout, MODEL, train, 8)
        return
    with pytest.raises(LayoutError, match=fix):
        validate(layout, MODEL, train, 8)


def test_layers_not_divisible_without_partition_names_the_fix():
    model = MODEL.replace(layers=6)
    with pytest.raises(LayoutError, match="partition=2:2:1:1"):
        validate(Layout.parse("data=4,stage=2,schedule=bfs,virtual=2,microbatches=2"), 
            model, TRAIN, 8)
    with pytest.raises(LayoutError, match="partition=2:2:1:1"):
        validate(Layout.parse("data=2,stage=4,microbatches=4"), model, TRAIN, 8)
    # with a partition it is a real program (predicted), which parex's executor cannot run yet
    uneven = Layout.parse("data=2,stage=4,partition=2:2:1:1,microbatches=4")
    # it comes back resolved: the emulated mesh's schedule named
    assert validate(uneven, model, TRAIN, 8, executable=False) == uneven.replace(
        schedule="gpipe")
    with pytest.raises(LayoutError, match="not a multiple of stage=4.*nearest layout that runs "
                                          "is data=4,stage=2,schedule=gpipe,microbatches=2"):
        validate(uneven, model, TRAIN, 8)


def test_stages_not_dividing_devices():
    with pytest.raises(LayoutError, match="uses 6 devices but 8 are available"):
        validate(Layout.parse("data=2,stage=3"), MODEL.replace(layers=6), TRAIN, 8)


# --- the command line ----------------------------------------------------------------------------

@pytest.mark.slow  # a minute of compiles on 2 cores
def test_cli_runs_a_pipeline_and_reports_its_collectives(capsys):
    args = ["run", "--layout", "data=2,stage=4,schedule=1f1b,microbatches=8", "--json",
            "--steps", "2", "--seq", "16"]
    assert main(args) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["layout"] == "data=2,stage=4,schedule=1f1b,microbatches=8"
    assert np.isfinite(out["losses"]).all()
    permutes = [c for c in out["collectives"] if c["kind"] == "collective-permute"]
    assert permutes and permutes[0]["axes"] == ["stage"]
    n_ticks = make_schedule("1f1b", 4, 8).n_ticks
    assert sum(c["count"] for c in permutes) == 2 * n_ticks
