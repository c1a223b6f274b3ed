"""DiLoCo on the replica axis: the schedule, the layout keys, the quantised exchange, and the
outer step checked against plain training and against hand-computed references.

The compiled tests share one pair of inner programs (tiny model, two replicas of one device
each): the outer keys (lr, momentum, dtype, fragments, overlap) change only the outer programs.
"""

import dataclasses
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from parex.config import OuterOptimizer, TrainConfig, model_preset
from parex.executor.data import Batches
from parex.layout import Layout, LayoutError
from parex.measure import relative_error
from parex.executor.mesh import make_mesh
from parex.lowcomm import exchange
from parex.lowcomm.diloco import DiLoCo
from parex.layout import inner_layout
from parex.lowcomm.rounds import fragment_layers, sync_plan, syncs_after
from parex.validation import validate

MODEL = model_preset("tiny")
TRAIN = TrainConfig(global_batch=8, seq_len=32, steps=6, warmup_steps=0)  # lr > 0 from step 1


# --- the schedule and the layout keys (no compiling) ---------------------------------------------

def test_plain_diloco_syncs_every_h_steps():
    assert sync_plan(12, 4, 1) == [(4, 0), (8, 0), (12, 0)]


def test_streaming_fragments_sync_in_turn_h_over_p_apart():
    """P = 4, H = 8: a fragment every 2 steps, each fragment every 8, in order 0, 1, 2, 3."""
    plan = sync_plan(16, 8, 4)
    assert plan == [(2, 0), (4, 1), (6, 2), (8, 3), (10, 0), (12, 1), (14, 2), (16, 3)]
    assert syncs_after(3, 8, 4) == []


def test_fragments_are_strided_layers():
    assert [fragment_layers(8, 4, f) for f in range(4)] == [[0, 4], [1, 5], [2, 6], [3, 7]]


def test_diloco_keys_round_trip_and_inner_layout():
    text = ("data=2,tensor=2,replica=2,inner_steps=50,outer_lr=0.5,outer_momentum=0.8,"
            "fragments=2,outer_dtype=int8,overlap=on")
    layout = Layout.parse(text)
    assert str(layout) == text and Layout.parse(str(layout)) == layout
    assert layout.n_devices == 8 and layout.diloco
    assert inner_layout(layout) == Layout(data=2, tensor=2)
    assert layout.outer == OuterOptimizer(lr=0.5, momentum=0.8)


def test_the_outer_optimizer_is_its_own_config_written_as_layout_keys():
    """Layout's fields are mesh and technique fields; DiLoCo's outer Nesterov SGD is an
    OuterOptimizer value that the string form writes as outer_lr and outer_momentum."""
    fields = {f.name for f in dataclasses.fields(Layout)}
    assert "outer" in fields and not fields & {"outer_lr", "outer_momentum"}
    assert Layout().outer == OuterOptimizer(0.7, 0.9)  # DiLoCo's paper values
    layout = Layout(replica=2, data=4, outer=OuterOptimizer(momentum=0.0))
    assert str(layout) == "data=4,replica=2,outer_momentum=0.0"  # only what differs
    assert Layout.parse(str(layout)) == layout and Layout.parse(str(layout)).outer.lr == 0.7
    with pytest.raises(LayoutError, match="did you mean 'outer_lr'"):
        Layout.parse("replica=2,outer_l=0.5")


@pytest.mark.parametrize("text, message", [
    ("replica=3,data=2", "replica=3 does not divide the 8 devices.*1, 2, 4, 8"),
    ("replica=2,data=4,inner_steps=0", "inner_steps=0: each replica takes at least one"),
    ("replica=2,data=4,inner_steps=6,fragments=3", "fragments=3 does not divide the model's "
                                                   "layers=4"),
    ("replica=2,data=4,inner_steps=6,fragments=4", "inner_steps=6 is not a multiple of "
                                                   "fragments=4.*inner_steps=8"),
    ("replica=2,stage=2,data=2,inner_steps=4,fragments=4", "2 layers of each of the stage=2"),
    ("data=8,outer_lr=0.5", "outer_lr only mean something for DiLoCo"),
    ("replica=2,data=4,outer_dtype=fp8", "outer_dtype .fp8.; use one of f32, bf16, int8, int4"),
    ("replica=2,data=4,outer_momentum=1.0", "momentum lies in"),
    ("outer_lr=fast", "takes a number"),
])
def test_bad_diloco_layouts_say_what_to_change(text, message):
    with pytest.raises(LayoutError, match=message):
        validate(Layout.parse(text), MODEL, TRAIN.replace(global_batch=16), 8)


def test_batch_must_split_over_replicas():
    with pytest.raises(LayoutError, match="replica × data × fsdp × microbatches = 16"):
        validate(Layout.parse("replica=2,data=4,microbatches=2"), MODEL, TRAIN, 8)


# --- the quantised exchange ----------------------------------------------------------------------

def _replica_mesh(R):
    return make_mesh(Layout(replica=R), jax.devices()[:R])


def _quantized_mean(x, dtype):
    R = x.shape[0]
    mesh, axis = _replica_mesh(R), "replica"
    mean = jax.jit(jax.shard_map(lambda v: exchange.replica_mean([v[0]], axis, R, dtype)[0],
                                 mesh=mesh, in_specs=P(axis), out_specs=P()))
    return np.asarray(mean(jax.device_put(x, NamedSharding(mesh, P(axis)))))


@pytest.mark.parametrize("dtype", ["int8", "int4"])
def test_quantized_mean_is_within_its_error_bound(dtype):
    R, n = 4, 3000  # n not a multiple of R · QUANT_BLOCK: padding is exercised
    rng = np.random.default_rng(0)
    x = rng.normal(size=(R, n)) * np.exp(rng.normal(size=(1, n)) * 2)  # magnitudes vary a lot
    x = x.astype(np.float32)
    err = np.abs(_quantized_mean(x, dtype) - x.mean(0))
    bound = np.asarray(exchange.error_bound(jnp.asarray(x), dtype))
    assert np.all(err <= bound * (1 + 1e-5) + 1e-7), float((err / bound).max())
    assert err.max() > 0.1 * bound.max()  # the bound is tight enough to mean something


@pytest.mark.parametrize("dtype, limit", [("int8", 0.01), ("int4", 0.2), ("bf16", 0.005)])
def test_exchange_error_on_gaussian_pseudo_gradients(dtype, limit):
    """Relative error of the mean; for int8 about step/√12 per element, step = max/127 with a
    block max near 3σ: ≈ 0.7 % before averaging (int4: 7 levels, ≈ 12 %)."""
    x = np.random.default_rng(1).normal(size=(4, 4096)).astype(np.float32)
    got, exact = _quantized_mean(x, dtype), x.mean(0)
    assert 0 < np.linalg.norm(got - exact) / np.linalg.norm(exact) < limit


def test_an_exchange_split_over_copies_equals_the_whole_exchange():
    """Replicas of data=2 holding replicated values: each data device exchanges half, an
    all-gather inside the replica rebuilds the rest; the f32 mean is bit-for-bit the same."""
    mesh = make_mesh(Layout(replica=2, data=2), jax.devices()[:4])
    x = np.random.default_rng(2).normal(size=(2, 1001)).astype(np.float32)

    def mean(split):
        fn = jax.shard_map(lambda v: exchange.replica_mean(
            [v[0]], "replica", 2, "f32", [0], {0: ("data",)} if split else None)[0],
            mesh=mesh, in_specs=P("replica"), out_specs=P())
        return np.asarray(jax.jit(fn)(jax.device_put(x, NamedSharding(mesh, P("replica")))))

    np.testing.assert_array_equal(mean(True), mean(False))
    np.testing.assert_allclose(mean(True), x.mean(0), rtol=1e-6)


def test_int4_packs_two_values_a_byte():
    q = jnp.arange(-7, 8, dtype=jnp.int8).repeat(2)[:30]
    packed = exchange.pack_int4(q)
    assert packed.dtype == jnp.uint8 and packed.shape == (15,)
    np.testing.assert_array_equal(exchange.unpack_int4(packed), q)


# --- compiled: the outer step against references -------------------------------------------------

class Bench:
    """Two replicas of the tiny model on one device each; the inner programs compiled once."""

    def __init__(self):
        self.devices = jax.devices()[:2]
        base = DiLoCo(MODEL, TRAIN, Layout(replica=2, inner_steps=2), self._mesh(2))
        self.inner_programs = {r: base.inner[r].jitted_step() for r in base.local}
        self.batches = Batches("corpus", TRAIN.global_batch, TRAIN.seq_len, MODEL.vocab)
        self.made = {}
        self.initial = jax.device_get(base.inner[0].init_state())
        self.shardings = base.inner[0].train_state_shardings()
        self.batch_sharding = base.inner[0].batch_sharding

    def _mesh(self, R):
        return make_mesh(Layout(replica=R), self.devices[:R])

    def run(self, text, steps, before=None, after=None, train=TRAIN):
        """(DiLoCo, its run, losses) after `steps` inner steps and their syncs; `before(run, t)`
        and `after(run, t)` are called around the syncs due after inner step t."""
        layout = Layout.parse(text)
        if (text, train) not in self.made:  # one DiLoCo per layout: its outer programs compile once
            self.made[text, train] = DiLoCo(MODEL, train, layout, self._mesh(layout.replica))
        dl = self.made[text, train]
        states = {r: jax.device_put(self.initial, dl.inner[r].train_state_shardings())
                  for r in dl.local}
        run = dl.start({r: self.inner_programs[r] for r in dl.local}, states=states)
        losses = []
        for t in range(1, steps + 1):
            losses.append([float(x) for x in run.inner_step(self.batches[t - 1])])
            if before:
                before(run, t)
            run.sync_due(t)
            if after:
                after(run, t)
        return dl, run, np.array(losses)

    def params(self, run):
        return {r: jax.device_get(s["params"]) for r, s in run.states.items()}


@pytest.fixture(scope="module")
def bench():
    return Bench()


def _plain_run(bench, steps):
    """Plain single-device training (parex's TrainStep for Layout() on device 0, the program
    the bench's replica 0 runs) on rows 0 … B/2 of each batch: losses, parameters per step."""
    fn, state = bench.inner_programs[0], jax.device_put(bench.initial, bench.shardings)
    losses, params = [], {}
    for t in range(1, steps + 1):
        batch = {k: v[:TRAIN.global_batch // 2] for k, v in bench.batches[t - 1].items()}
        state, loss = fn(state, jax.device_put(batch, bench.batch_sharding))
        losses.append(float(loss))
        params[t] = jax.device_get(state["params"])
    return np.array(losses), params


def test_one_replica_with_unit_outer_step_equals_plain_training(bench):
    """R = 1, outer lr 1, momentum 0: θ ← θ_sync − (θ_sync − θ) is plain training, up to the
    rounding of that subtraction (1e-9 here); losses to 1e-6 over two rounds."""
    synced = {}
    _, run, losses = bench.run("replica=1,inner_steps=3,outer_lr=1.0,outer_momentum=0.0", 6,
                               after=lambda run, t: synced.setdefault(t, bench.params(run)),
                               train=TRAIN.replace(global_batch=TRAIN.global_batch // 2))
    plain, params = _plain_run(bench, 6)
    assert relative_error(synced[3][0], params[3]) < 1e-6  # right after the first sync
    np.testing.assert_allclose(losses[:, 0], plain, rtol=1e-6)
    assert run.syncs == 2


@pytest.mark.slow
def test_unit_outer_step_averages_the_replicas_adamw_updates(bench):
    """R = 2, H = 1, outer lr 1, momentum 0: after every step the replicas hold the mean of
    their own AdamW results (each keeps its own optimizer state)."""
    before = {}

    def capture(run, t):
        before[t] = bench.params(run)

    dl, run, _ = bench.run("replica=2,inner_steps=1,outer_lr=1.0,outer_momentum=0.0", 3, capture)
    after = bench.params(run)
    mean = jax.tree.map(lambda a, b: (a + b) / 2, before[3][0], before[3][1])
    for r in (0, 1):
        assert relative_error(after[r], mean) < 1e-6
    assert relative_error(before[3][0], before[3][1]) > 1e-4  # they really differed


def _outer_nesterov(theta, before, syncs, lr=0.7, mu=0.9):
    """numpy's outer Nesterov (DiLoCo's default η, μ) over two replicas: at each (step, mask)
    of `syncs` the masked entries of θ_sync and its momentum move by the replicas' mean
    pseudo-gradient, θ_sync − mean(replica params before the sync); the rest stay.
    Returns (θ_sync, momentum)."""
    m = jax.tree.map(np.zeros_like, theta)
    for t, mask in syncs:
        delta = jax.tree.map(lambda k, s, a, b: np.where(k, s - (a + b) / 2, 0), mask, theta,
                             before[t][0], before[t][1])
        m = jax.tree.map(lambda k, m, d: np.where(k, mu * m + d, m), mask, m, delta)
        theta = jax.tree.map(lambda k, s, m, d: np.where(k, s - lr * (d + mu * m), s), mask,
                             theta, m, delta)
    return theta, m


@pytest.mark.slow
def test_outer_nesterov_step_follows_its_formula(bench):
    """Default outer optimizer (η = 0.7, μ = 0.9) over two rounds, against numpy."""
    before = {}
    dl, run, _ = bench.run("replica=2,inner_steps=2", 4,
                           lambda run, t: before.setdefault(t, bench.params(run)))
    initial = jax.device_get(bench.initial["params"])
    whole = jax.tree.map(lambda x: np.ones(np.shape(x), bool), initial)
    theta, _ = _outer_nesterov(initial, before, [(2, whole), (4, whole)])
    assert relative_error(jax.device_get(run.outer["synced"]), theta) < 1e-5
    assert relative_error(bench.params(run)[1], theta) < 1e-5


def _agree(params, path_filter):
    """Whether the two replicas hold equal values on the leaves/rows `path_filter` selects."""
    a, b = params[0], params[1]
    out = []
    for (path, x), y in zip(jax.tree.flatten_with_path(a)[0], jax.tree.leaves(b)):
        names = tuple(k.key for k in path)
        rows = path_filter(names)
        if rows is not None:
            out.append(np.array_equal(np.asarray(x)[rows], np.asarray(y)[rows]))
    return out


@pytest.mark.slow
def test_streaming_syncs_strided_fragments_in_turn(bench):
    """P = 2, H = 2: after step 1 fragment 0 (layers 0, 2, the embeddings) is synced, the rest
    is not; after step 2 fragment 1 (layers 1, 3, final norm, unembedding) is."""
    synced = {}
    bench.run("replica=2,inner_steps=2,fragments=2", 2,
              after=lambda run, t: synced.setdefault(t, bench.params(run)))

    def frag(f):
        def rows(names):
            if names[0] == "blocks":
                return slice(f, None, 2)
            embed = names[0] in ("tokens", "positions")
            return slice(None) if embed == (f == 0) else None
        return rows

    assert all(_agree(synced[1], frag(0))) and not any(_agree(synced[1], frag(1)))
    assert all(_agree(synced[2], frag(1))) and not any(_agree(synced[2], frag(0)))


def _fragment_mask(params, f, fragments=2):
    """Per leaf, True where fragment f's values lie: its strided layers' rows, the embeddings
    (fragment 0) or the final norm and unembedding (the last fragment)."""
    def one(path, x):
        names = tuple(k.key for k in path)
        mask = np.zeros(np.shape(x), bool)
        if names[0] == "blocks":
            mask[f::fragments] = True
        else:
            mask[...] = (names[0] in ("tokens", "positions")) == (f == 0)
        return mask
    return jax.tree_util.tree_map_with_path(one, params)


@pytest.mark.slow
def test_streaming_outer_step_is_nesterov_on_each_fragment_alone(bench):
    """P = 2, H = 2 over 4 steps (fragment 0 syncs after steps 1 and 3, fragment 1 after 2 and
    4), the paper's η = 0.7, μ = 0.9, against numpy: each sync moves only its own fragment's
    θ_sync and momentum, by Nesterov on the replicas' mean pseudo-gradient of that fragment
    since its own last sync, and puts the replicas on it (Douillard et al. 2025, Streaming
    DiLoCo, arXiv:2501.18512; no overlap, so the merged fragment replaces the local one)."""
    before = {}
    dl, run, _ = bench.run("replica=2,inner_steps=2,fragments=2", 4,
                           lambda run, t: before.setdefault(t, bench.params(run)))
    initial = jax.device_get(bench.initial["params"])
    theta, m = _outer_nesterov(initial, before, [(t, _fragment_mask(initial, f))
                                                 for t, f in sync_plan(4, 2, 2)])
    assert sync_plan(4, 2, 2) == [(1, 0), (2, 1), (3, 0), (4, 1)]
    assert relative_error(jax.device_get(run.outer["synced"]), theta) < 1e-5
    assert relative_error(jax.device_get(run.outer["momentum"]), m) < 1e-5
    last = _fragment_mask(theta, 1)  # synced after step 4: the replicas hold θ_sync there
    for r in (0, 1):
        held = jax.tree.map(lambda k, x: np.asarray(x)[k], last, bench.params(run)[r])
        assert relative_error(held, jax.tree.map(lambda k, x: x[k], last, theta)) < 1e-5


@pytest.mark.slow
def test_overlap_applies_each_round_one_round_late(bench):
    """overlap=on, H = 1, outer lr 1, momentum 0: the first sync changes nothing (its mean is
    in flight); the second applies the first round's mean, and each replica keeps its own
    second-round progress on top."""
    before = {}
    dl, run, _ = bench.run("replica=2,inner_steps=1,outer_lr=1.0,outer_momentum=0.0,overlap=on",
                           2, lambda run, t: before.setdefault(t, bench.params(run)))
    theta0 = jax.device_get(bench.initial["params"])
    round1 = {r: jax.tree.map(np.subtract, theta0, before[1][r]) for r in (0, 1)}
    round2 = {r: jax.tree.map(np.subtract, before[1][r], before[2][r]) for r in (0, 1)}
    mean1 = jax.tree.map(lambda a, b: (a + b) / 2, round1[0], round1[1])
    synced = jax.tree.map(np.subtract, theta0, mean1)
    assert relative_error(jax.device_get(run.outer["synced"]), synced) < 1e-6
    for r in (0, 1):
        expected = jax.tree.map(np.subtract, synced, round2[r])
        assert relative_error(bench.params(run)[r], expected) < 1e-6


@pytest.mark.slow
def test_parex_run_on_a_diloco_layout_reports_inner_and_outer_bytes(capsys):
    """`parex run --json` on replicas of data=2: the inner program's traffic stays inside a
    replica, the exchange is half of θ per device (split over the two copies), amortised over H."""
    from parex.cli.main import main

    assert main(["run", "--layout", "replica=2,data=2,inner_steps=2", "--devices", "4",
                 "--steps", "4", "--seq", "32", "--global-batch", "8", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    block = out["diloco"]
    assert block["inner_steps"] == 2 and block["syncs"] == 2
    assert block["outer_bytes_per_sync"] == 4 * MODEL.n_params / 2  # f32, half per device
    assert block["cross_replica_bytes_per_step"] == block["outer_bytes_per_sync"] / 2
    assert all(c["axes"] == ["data"] for c in out["collectives"])  # nothing crosses replicas
    assert block["inner_bytes_per_device_per_step"] == sum(out["comm_bytes_per_device"].values())
    assert len(out["losses"]) == 4 and out["losses"][-1] < out["losses"][0]


@pytest.mark.slow
@pytest.mark.parametrize("inner", ["stage=2,data=2,schedule=1f1b,microbatches=2",
                                   "fsdp=2,tensor=2,sp=on", "seq=2,cp=ring,data=2"])
def test_diloco_losses_do_not_depend_on_the_inner_layout(inner):
    """Replicas of a pipeline, of FSDP × TP + SP, of ring attention: the same losses (1e-5) as
    replicas of one device each, through two rounds of streaming syncs."""
    from parex.entry import measure

    train, text = TRAIN.replace(steps=4), "replica=2,inner_steps=2,fragments=2"
    ref = measure(MODEL, train, Layout.parse(text), devices=jax.devices()[:2])
    got = measure(MODEL, train, Layout.parse(f"{text},{inner}"), devices=jax.devices()[:8])
    np.testing.assert_allclose(got.losses, ref.losses, rtol=1e-5)
    assert got.diloco["syncs"] == ref.diloco["syncs"] == 4  # a fragment after every step
