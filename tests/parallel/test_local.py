"""Local-learning pipelines (schedule=local, parex.parallel.local) on 8 emulated devices: each
stage's gradients equal those of its own local loss on one device from the same cut inputs, in
the first step and after several (the queue carried across steps); the compiled step against
1F1B; learning; the table; bad input."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from parex.model import transformer as gpt
from parex.charts.pipeline import gantt_chart
from parex.config import ModelConfig, TrainConfig, model_preset
from parex.layout import Layout, LayoutError
from parex.measure import relative_error
from parex.measure.compiled import compile_layout, compiled_stats
from parex.record import bytes_by_kind
from parex.executor.data import Images
from parex.executor.mesh import make_mesh
from parex.parallel.local import local_grads, model_params
from parex.parallel.schedules import make_schedule
from parex.executor.step import TrainStep
from parex.validation import validate

MODEL = ModelConfig("local-test", layers=4, hidden=32, heads=2, vocab=64, seq_len=8)
VIT = ModelConfig("local-vit", layers=4, hidden=32, heads=2, vocab=8, image=8, patch=4)
TOL = 1e-5


def _batch(i, train, model=MODEL):
    if model.vision:  # synthetic labelled images (parex.executor.data.Images)
        return {k: jnp.asarray(v) for k, v in Images(model, train.global_batch, 100)[i].items()}
    tokens = jax.random.randint(jax.random.key(100 + i), (train.global_batch, model.seq_len), 0,
                                model.vocab)
    return {"inputs": tokens, "targets": jnp.roll(tokens, -1, axis=1)}


def _reference_loss(params, x_in, tokens, targets, first, recon, model=MODEL):
    """One stage's local loss on one device, from the model's own functions; `recon` adds
    ‖h·W − x‖² / ‖x‖² per sequence, averaged, with the stage's input x as a constant target."""
    x = gpt.embed(params["readin"], tokens, model) if first else x_in
    h = gpt.run_blocks(x, params["blocks"], model)
    loss = gpt.cross_entropy(gpt.unembed(params["readout"], h, model), targets)
    if recon:
        target = jax.lax.stop_gradient(x)
        loss = loss + jnp.mean(jnp.sum((h @ params["decoder"] - target) ** 2, axis=(1, 2))
                               / (jnp.sum(target ** 2, axis=(1, 2)) + 1e-6))
    return loss, h


def _reference(stages, queue, tokens, known, steps, p, q, m, history, objective="ce",
               model=MODEL):
    """Tick by tick on one device: each stage's mean gradient over the microbatches it really
    holds, the queue after the step, and each stage's mean loss."""
    stages, queue = jax.device_get(stages), [list(np.asarray(queue)[s]) for s in range(p)]
    grad = jax.jit(jax.value_and_grad(_reference_loss, has_aux=True), static_argnums=(4, 5, 6))
    sums = [None] * p
    counts, losses = [0] * p, [0.0] * p
    for t in range(m):
        outputs = []
        for s in range(p):
            params = jax.tree.map(lambda a, s=s: a[s], stages)
            target = known[history * m + t - s * q]
            (loss, h), g = grad(params, queue[s][0], tokens[t], target, s == 0,
                                objective == "recon" and s < p - 1, model)
            outputs.append(h)
            if steps * m + t - s * q >= 0:
                sums[s] = g if sums[s] is None else jax.tree.map(jnp.add, sums[s], g)
                counts[s] += 1
                losses[s] += float(loss)
        for s in range(1, p):  # the queue moves after every stage has read it
            queue[s] = queue[s][1:] + [outputs[s - 1]]
    zeros = jax.tree.map(lambda a: np.zeros_like(a[0]), stages)  # a stage that held nothing
    grads = [zeros if g is None else jax.tree.map(lambda a, c=c: a / c, g)
             for g, c in zip(sums, counts)]
    means = [x / c if c else np.nan for x, c in zip(losses, counts)]
    return grads, np.stack([np.stack(x) for x in queue]), means


@pytest.mark.slow  # two compiles and a reference tick by tick: ~25 s
@pytest.mark.parametrize("layout_text, model", [
    ("data=2,stage=4,schedule=local,microbatches=4", MODEL),
    ("data=4,stage=2,schedule=local,microbatches=2,queue=3", MODEL),
    ("data=2,stage=4,schedule=local,microbatches=4,local_loss=recon", MODEL),
    ("stage=2,tensor=2,data=2,schedule=local,microbatches=4", MODEL),
    ("stage=2,fsdp=2,data=2,schedule=local,microbatches=4,local_loss=recon", MODEL),
    ("stage=2,tensor=2,fsdp=2,schedule=local,microbatches=2,queue=2", MODEL),
    ("stage=2,data=4,zero=1,schedule=local,microbatches=4", MODEL),
    ("data=2,stage=4,schedule=local,microbatches=4,queue=2", VIT)], ids=lambda x: getattr(
        x, "name", x))
def test_each_stage_learns_from_its_own_loss_only(layout_text, model):
    """First step and after three (the queue holds activations of the previous step, and with
    queue=3 > m the targets of two steps back; with recon, a decoder that has trained):
    gradients, queue and losses match. Each stage
    updates only its own parameters: stage 0's read-in moves, the other stages' copies (never
    read, no weight decay here) do not; the model's parameters come back whole."""
    train = TrainConfig(global_batch=16, weight_decay=0.0)
    layout = Layout.parse(layout_text)
    step = TrainStep(model, train, layout, make_mesh(layout))
    pipe, run = step.local, step.jitted_step()
    read_in = gpt.read_in_names(model)[0]  # stage 0's token table, or a ViT's patch map
    grads_of = jax.jit(lambda state, t, k: local_grads(pipe, state, t, k))
    state = step.init_state()
    for i in range(4):
        batch = jax.device_put(_batch(i, train, model), {k: step.batch_sharding
                                                         for k in ("inputs", "targets")})
        if i in (0, 3):
            tokens, targets = pipe.split(batch["inputs"]), pipe.split(batch["targets"])
            known = jnp.concatenate([state["targets"], targets])
            grads, queue, losses, last = grads_of(state, tokens, known)
            ref_grads, ref_queue, ref_losses = _reference(
                state["stages"], state["queue"], np.asarray(tokens), np.asarray(known),
                int(state["steps"]), pipe.p, pipe.q, pipe.m, pipe.history, layout.local_loss,
                model)
            for s in range(pipe.p):
                mine = jax.tree.map(lambda a, s=s: a[s], grads)
                if np.isnan(ref_losses[s]):  # held nothing yet: no gradient at all
                    assert not any(np.any(g) for g in jax.tree.leaves(mine))
                else:
                    assert relative_error(mine, ref_grads[s]) < TOL
            np.testing.assert_allclose(np.asarray(queue), ref_queue, rtol=TOL, atol=1e-6)
            np.testing.assert_allclose(np.asarray(losses), ref_losses, rtol=TOL)
            np.testing.assert_allclose(float(last), ref_losses[-1], rtol=TOL)
        if i == 0:
            before = np.asarray(state["stages"]["readin"][read_in])
        state, _ = run(state, batch)
    after = np.asarray(state["stages"]["readin"][read_in])
    assert not np.allclose(after[0], before[0])
    np.testing.assert_array_equal(after[1:], before[1:])
    shapes = jax.tree.map(np.shape, model_params(state))
    assert shapes == jax.tree.map(lambda s: s.shape, gpt.param_shapes(model))


@pytest.mark.slow
def test_compiled_step_sends_only_forward_and_holds_one_microbatch():
    """Against 1F1B at the same layout: stage-to-stage bytes are the forward activations only
    (≤ 0.55x), temporaries one microbatch's (≤ 0.6x)."""
    model, train = model_preset("tiny"), TrainConfig(global_batch=16)
    stats = {}
    for schedule in ("local", "1f1b"):
        layout = Layout.parse(f"data=2,stage=4,schedule={schedule},microbatches=8")
        step, compiled, _ = compile_layout(model, train, layout)
        stats[schedule] = compiled_stats(compiled, step)
    permute = {k: bytes_by_kind(s["collectives"])["collective-permute"] for k, s in stats.items()}
    temp = {k: s["memory_bytes_per_device"]["temp"] for k, s in stats.items()}
    assert permute["local"] <= 0.55 * permute["1f1b"]
    assert temp["local"] <= 0.6 * temp["1f1b"]
    b = train.global_batch // (2 * 8)  # one microbatch's activation per tick, m ticks
    assert permute["local"] == 8 * b * model.seq_len * model.hidden * 4


@pytest.mark.slow
def test_tiny_learns_with_local_losses():
    """The done-when run: loss falls by more than 10 % in 30 steps."""
    from parex.measure import measure

    model, train = model_preset("tiny"), TrainConfig(steps=30)
    m = measure(model, train, Layout.parse("data=2,stage=4,schedule=local,microbatches=8"))
    assert np.isfinite(m.losses).all()
    assert m.losses[-1] < 0.9 * m.losses[0]


@pytest.mark.slow
def test_recon_objective_runs_and_learns():
    train = TrainConfig(global_batch=8, steps=8, learning_rate=3e-3)
    layout = Layout.parse("data=2,stage=4,schedule=local,microbatches=4,local_loss=recon")
    step = TrainStep(MODEL, train, layout, make_mesh(layout))
    run, state = step.jitted_step(), step.init_state()
    sharded = {k: step.batch_sharding for k in ("inputs", "targets")}
    losses = []
    for i in range(8):
        state, loss = run(state, jax.device_put(_batch(0, train), sharded))
        losses.append(float(loss))
    assert np.isfinite(losses).all() and losses[-1] < losses[0]
    assert np.abs(np.asarray(state["stages"]["decoder"][:-1])).max() > 0  # it trained


def test_local_table_every_stage_busy_in_steady_state():
    s = make_schedule("local", 4, 8)
    assert {op.op for op in s.ops} == {"L"}
    assert all(op.tick == op.microbatch + op.stage for op in s.ops)
    assert s.n_ticks == 8 + 4 - 1 and s.peak_in_flight() == [1] * 4
    assert s.makespan(1.0, 2.0) == pytest.approx(3.0 * (8 + 3))  # L = F + local B
    chart = gantt_chart(s).to_dict()
    assert "forward + local backward" in str(chart)


@pytest.mark.parametrize("text, words", [
    ("data=2,stage=4,local_loss=recon", "schedule=local"),
    ("data=2,stage=4,queue=2", "schedule=local"),
    ("data=8,schedule=local", "stage=2 or more"),
    ("data=2,stage=4,schedule=local,local_loss=kd", "ce, recon"),
    ("data=2,stage=4,schedule=local,local_loss=rcon", "did you mean 'recon'?"),
    ("data=2,stage=4,schedule=local,queue=0", "queue=1"),
    ("seq=2,cp=ring,stage=4,schedule=local", "data=2,stage=4,schedule=local"),
    ("data=2,tensor=2,stage=2,zero=2,schedule=local", "zero=1"),
])
def test_bad_local_layouts_get_one_line_before_compiling(text, words):
    with pytest.raises(LayoutError) as error:
        validate(Layout.parse(text), MODEL, TrainConfig(global_batch=16), 8)
    assert words in str(error.value) and "\n" not in str(error.value)


def test_tensor_fsdp_and_zero1_compose_inside_local_stages():
    """data, fsdp, tensor and ZeRO-1 inside local stages pass validation (the executor runs
    them: the parity cases above); seq, sp, ZeRO-2/3 are refused, naming a layout that runs."""
    train = TrainConfig(global_batch=16)
    for text in ("stage=2,tensor=2,data=2,schedule=local", "stage=2,fsdp=2,data=2,schedule=local",
                 "stage=2,tensor=2,fsdp=2,schedule=local", "stage=2,data=4,zero=1,schedule=local"):
        validate(Layout.parse(text), MODEL, train, 8)
    with pytest.raises(LayoutError, match="the nearest layout that runs is "
                                          "data=2,tensor=2,stage=2,schedule=local"):
        validate(Layout.parse("tensor=2,seq=2,cp=ring,stage=2,schedule=local"), MODEL, train, 8)


@pytest.mark.parametrize("layout, words", [
    ("data=2,stage=4,local_loss=recon", "add schedule=local"),
    ("data=8,schedule=local", "stage=2 or more"),
    ("data=2,stage=4,schedule=local,local_loss=rcon", "did you mean 'recon'?"),
    ("data=2,stage=4,schedule=local,queue=0", "queue=0"),
])
def test_parex_run_refuses_bad_local_layouts_in_one_line(capsys, monkeypatch, layout, words):
    """`parex run` stops with one line and exit 2 before anything compiles."""
    import importlib

    from parex.cli.main import main

    def never(*args, **kwargs):
        raise AssertionError("measured a layout that validation should have refused")

    # what `parex run` calls to compile and train
    monkeypatch.setattr(importlib.import_module("parex.measure"), "measure", never)
    assert main(["run", "--model", "tiny", "--layout", layout, "--steps", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert words in err and "\n" not in err and "Traceback" not in err


def test_local_layout_round_trips():
    layout = Layout.parse("data=2,stage=4,schedule=local,local_loss=recon,queue=2")
    assert (layout.local_loss, layout.queue) == ("recon", 2)
    assert Layout.parse(str(layout)) == layout
    assert "local_loss" not in str(Layout.parse("data=2,stage=4,schedule=local"))


def test_predicted_local_step_sends_forward_only_and_has_no_bubble():
    from parex.predict import predict

    model, train = model_preset("tiny"), TrainConfig()
    runs = {s: predict(model, train, Layout.parse(f"data=2,stage=4,schedule={s},microbatches=8"),
                       "cpu-local") for s in ("local", "1f1b")}
    local, backprop = runs["local"], runs["1f1b"]
    assert local.step_time_s["bubble"] == 0 and local.step_time_s["fill"] > 0
    assert (local.comm_bytes_per_device["collective-permute"]
            <= 0.55 * backprop.comm_bytes_per_device["collective-permute"])
    assert local.executable and local.memory_bytes_per_device["temp"] > 0


def test_predict_batch_refuses_local_layouts():
    from parex.errors import InputError
    from parex.predict import predict_batch

    with pytest.raises(InputError, match="one at a time"):
        predict_batch(MODEL, TrainConfig(global_batch=16),
                      [Layout.parse("data=2,stage=4,schedule=local")], "cpu-local")


@pytest.mark.parametrize("text", ["data=2,stage=4,schedule=local,microbatches=8",
                                  "stage=4,schedule=local,microbatches=4,queue=2,local_loss=recon"])
def test_predicted_collectives_equal_the_compiled_step(text):
    """Every predicted collective's bytes, by kind, equal the compiled step's."""
    from parex.predict import predict

    model, train = model_preset("tiny"), TrainConfig()
    layout = Layout.parse(text)
    step, compiled, _ = compile_layout(model, train, layout, jax.devices()[:layout.n_devices])
    measured = bytes_by_kind(compiled_stats(compiled, step)["collectives"])
    predicted = predict(model, train, layout, "cpu-local").comm_bytes_per_device
    assert predicted["collective-permute"] == measured["collective-permute"] > 0
    assert predicted == pytest.approx(measured)


@pytest.mark.slow  # two compiles of tiny: ~40 s
@pytest.mark.parametrize("text", ["stage=2,tensor=2,fsdp=2,schedule=local,microbatches=4",
                                  "stage=2,data=4,zero=1,schedule=local,microbatches=4"])
def test_predicted_collectives_of_composed_local_stages_equal_the_compiled_step(text):
    """Tensor's all-reduces inside a stage, fsdp's gather and reduce-scatter once per step,
    ZeRO-1's gather of the updated parameters: every kind's bytes as compiled."""
    from parex.predict import predict

    model, train = model_preset("tiny"), TrainConfig()
    layout = Layout.parse(text)
    step, compiled, _ = compile_layout(model, train, layout)
    measured = bytes_by_kind(compiled_stats(compiled, step)["collectives"])
    predicted = predict(model, train, layout, "cpu-local").comm_bytes_per_device
    assert measured["all-gather"] > 0 and predicted == pytest.approx(measured)


def test_planner_ranks_local_pipelines_beside_and_never_picks_them():
    """--allow-local: local rows are predicted, marked, ranked by step time and placed among
    the backprop rows; the plan's own picks stay backprop, here although a local pipeline
    would rank among them."""
    from parex.plan import plan
    from parex.plan.local import local_alternatives

    result = plan(model_preset("tiny"), TrainConfig(global_batch=16), "a100-80gb",
                  remats=("none",), top=20)
    picked = [result.entry(i)["layout"] for i in result.top]
    rows = local_alternatives(result, k=3)
    assert rows and all("schedule=local" not in text for text in picked)
    assert all(r["changes_optimisation"] and "schedule=local" in r["layout"] for r in rows)
    steps = [r["step_time_s"]["total"] for r in rows]
    assert steps == sorted(steps)
    backprop = np.sort(result.columns["step_time_s"][result.order])
    for r in rows:
        assert r["would_rank"] == 1 + np.sum(backprop < r["step_time_s"]["total"])
    assert rows[0]["would_rank"] <= len(picked)  # it would be picked: it is not


def test_plan_allow_local_refuses_a_cluster_file(capsys):
    from parex.cli.main import main

    assert main(["plan", "--cluster", "any.toml", "--allow-local"]) == 2
    assert "--allow-local" in capsys.readouterr().err


def test_planner_never_enumerates_local_layouts():
    """Local learning changes the optimisation: the planner's schedules are backprop ones."""
    from parex.parallel.schedules import ALL_SCHEDULES, LOCAL
    from parex.plan.candidates import pipeline_options

    assert ALL_SCHEDULES.index(LOCAL) not in set(pipeline_options()["schedule"].tolist())


def test_local_step_runs_on_two_stages():
    """The executor end to end on the smallest pipeline: the queue fills, the loss is finite
    once the last stage holds a microbatch, and the step counter advances."""
    train = TrainConfig(global_batch=4)
    layout = Layout.parse("stage=2,schedule=local,microbatches=2")
    step = TrainStep(MODEL, train, layout, make_mesh(layout, jax.devices()[:2]))
    run, state = step.jitted_step(), step.init_state()
    batch = jax.device_put(_batch(0, train), {k: step.batch_sharding for k in ("inputs",
                                                                                "targets")})
    state, loss = run(state, batch)
    assert np.isfinite(float(loss)) and int(state["steps"]) == 1
    assert np.any(np.asarray(state["queue"])[1])  # stage 1's queue holds stage 0's output


def test_the_explorer_offers_local_and_draws_its_table():
    from parex.explorer.widget import Explorer

    explorer = Explorer(model="tiny", n_devices=8, global_batch=16, steps=2)
    assert "local" in explorer.controls["schedule"].options
    explorer.set(stage=4, schedule="local", microbatches=8, hardware="h100-sxm")
    assert explorer.error is None
    assert explorer.layout == Layout(data=2, stage=4, schedule="local", microbatches=8)
    p = explorer.prediction
    assert p.step_time_s["bubble"] == 0 and p.step_time_s["fill"] > 0
    rows = explorer.show("pipeline and mesh").spec_rows("pictures")
    ops = rows[rows["op_name"].notna()]
    assert set(ops["op_name"]) == {"forward + local backward"}
    assert len(ops) == len(make_schedule("local", 4, 8).ops)
