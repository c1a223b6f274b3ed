"""Context parallelism on the seq axis: ring attention (zig-zag, online softmax) and Ulysses
all-to-all attention reproduce the single-device model, and the compiled step shows their
collectives."""

from collections import Counter
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import optax
import parity
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from parex.model import transformer as gpt
from parex.config import ModelConfig, TrainConfig, model_preset
from parex.measure.hlo import parse_collectives
from parex.layout import Axis, Layout, LayoutError
from parex.measure.compiled import compile_layout, memory_stats
from parex.measure import relative_error
from parex.executor.mesh import make_mesh
from parex.parallel.context import ring_attention, ulysses_attention, zigzag, zigzag_chunks
from parex.executor.step import TrainStep, clip_by_global_norm
from parex.validation import validate

TOLERANCE = parity.TOLERANCE
TRAIN = TrainConfig(global_batch=4)  # the tiny models' own sequence length, 128
SEQ = Axis.SEQ.value
KEY = jax.random.key(3)


# --- the kernels on their own ---------------------------------------------------------------------

def test_zigzag_gives_shard_i_chunks_i_and_its_mirror():
    s, T = 4, 32
    assert zigzag_chunks(s).tolist() == [0, 7, 1, 6, 2, 5, 3, 4]
    shards = np.asarray(zigzag(jnp.arange(T)[None], s)).reshape(s, 2, T // (2 * s))
    for i in range(s):  # chunk index of the first and second half of shard i
        assert shards[i, :, 0].tolist() == [4 * i, 4 * (2 * s - 1 - i)]


def _qkv(B=2, T=64, H=8, K=4, Dh=16):
    kq, kk, kv = jax.random.split(jax.random.key(1), 3)
    return (jax.random.normal(kq, (B, T, H, Dh)), jax.random.normal(kk, (B, T, K, Dh)),
            jax.random.normal(kv, (B, T, K, Dh)))


def _on_seq_axis(core, s, cp):
    """core(q, k, v) run by shard_map on a mesh whose seq axis has s devices."""
    mesh = make_mesh(Layout(seq=s, cp=cp))
    spec = P(None, SEQ)
    return jax.shard_map(core, mesh=mesh, in_specs=(spec,) * 3, out_specs=spec)


def _kernel_errors(attend, order):
    """Output and (q, k, v)-gradient errors of attend against parex.model.transformer.attention_core, with
    a cotangent that weighs every position differently."""
    q, k, v = _qkv()
    weights = jax.random.normal(jax.random.key(2), q.shape)

    def loss(core, reorder):
        return lambda q, k, v: jnp.sum(core(*map(reorder, (q, k, v))) * reorder(weights))

    ref = jax.jit(jax.value_and_grad(loss(gpt.attention_core, lambda x: x), (0, 1, 2)))(q, k, v)
    got = jax.jit(jax.value_and_grad(loss(attend, order), (0, 1, 2)))(q, k, v)
    return abs(float(got[0] - ref[0])) / abs(float(ref[0])), relative_error(got[1], ref[1])


@pytest.mark.parametrize("s", [pytest.param(2, marks=pytest.mark.slow), 8])
def test_ring_attention_equals_causal_attention(s):
    """Blocks of 64/(2s) tokens: with s = 8, chunks of 4 tokens cross every block boundary."""
    ring = _on_seq_axis(lambda q, k, v: ring_attention(q, k, v, SEQ, s), s, "ring")
    value_error, grad_error = _kernel_errors(ring, lambda x: zigzag(x, s))
    assert value_error < TOLERANCE and grad_error < TOLERANCE


def test_ring_custom_vjp_gradients_equal_those_of_attention_core():
    """The ring's own backward (flash-style: blocks recomputed from q, k and the saved lse)
    against jax.grad of the single-device attention, each of dq, dk, dv on its own. As the
    pipeline executor would run it: jax.vjp inside a shard_map whose stage axis is manual too,
    a different problem on each of 2 stages; 4 query heads per KV head, chunks of 4 tokens."""
    s, stage, seq = 4, Axis.STAGE.value, SEQ
    mesh = make_mesh(Layout(stage=2, seq=s, cp="ring"))
    (q, k, v), weights = _qkv(B=2, T=32, H=8, K=2, Dh=8), jax.random.normal(KEY, (2, 32, 8, 8))

    def per_stage(q, k, v, weights):  # one stage's sequence, a quarter of it per device
        loss = lambda q, k, v: jnp.sum(ring_attention(q, k, v, seq, s) * weights)
        value, pull = jax.vjp(loss, q, k, v)
        return pull(jnp.ones_like(value))

    spec = P(stage, seq)
    ring = jax.shard_map(per_stage, mesh=mesh, in_specs=(spec,) * 4, out_specs=(spec,) * 3)
    got = jax.jit(ring)(*(zigzag(x, s) for x in (q, k, v, weights)))
    grad = jax.grad(lambda q, k, v: jnp.sum(gpt.attention_core(q, k, v) * weights), (0, 1, 2))
    ref = jax.jit(grad)(q, k, v)
    for name, g, r in zip("qkv", got, ref):
        assert relative_error(g, zigzag(r, s)) < TOLERANCE, name


@pytest.mark.slow
def test_ring_hops_in_a_stage_switch_are_all_to_alls_per_seq_group():
    """Inside pipeline stages each stage takes its own branch of the tick switch, and XLA's CPU
    runtime meets a collective-permute with every device of the mesh: ppermute hops there wait
    for the other stage and abort. With per_group the hops are all-to-alls, one replica group per
    stage's seq group. Stage 0 differentiates the ring (forward and backward hops), stage 1 only
    runs its forward (other collectives, fewer): both equal attention_core, and the compiled
    program permutes nothing. s = 4, so the backward's middle hops run too."""
    s, stage = 4, Axis.STAGE.value
    mesh = make_mesh(Layout(stage=2, seq=s, cp="ring"))
    (q, k, v), weights = _qkv(B=2, T=32, H=8, K=2, Dh=8), jax.random.normal(KEY, (2, 32, 8, 8))

    def per_stage(q, k, v, weights):  # one sequence per stage, a quarter of it per device
        attend = partial(ring_attention, axis_name=SEQ, s=s, per_group=True)

        def grads(q, k, v):
            value, pull = jax.vjp(lambda q, k, v: jnp.sum(attend(q, k, v) * weights), q, k, v)
            return pull(jnp.ones_like(value))

        def forward(q, k, v):  # the output in dq's place
            return attend(q, k, v), jnp.zeros_like(k), jnp.zeros_like(v)

        return jax.lax.switch(jax.lax.axis_index(stage), [grads, forward], q, k, v)

    spec = P(stage, SEQ)
    run = jax.jit(jax.shard_map(per_stage, mesh=mesh, in_specs=(spec,) * 4,
                                out_specs=(spec,) * 3))
    args = tuple(zigzag(x, s) for x in (q, k, v, weights))
    compiled = run.lower(*args).compile()
    got = compiled(*args)
    loss = lambda q, k, v: jnp.sum(gpt.attention_core(q, k, v) * weights)
    ref = jax.jit(jax.grad(loss, (0, 1, 2)))(q, k, v)
    out = jax.jit(gpt.attention_core)(q, k, v)
    assert relative_error(got[0][1], zigzag(out, s)[1]) < TOLERANCE  # stage 1: the forward
    for name, g, r in zip("qkv", got, ref):  # stage 0: the gradients
        assert relative_error(g[0], zigzag(r, s)[0]) < TOLERANCE, name
    kinds = Counter(c.kind for c in parse_collectives(compiled.as_text(), mesh.devices.shape,
                                                      mesh.axis_names))
    assert kinds["all-to-all"] > 0 and kinds["collective-permute"] == 0


# --- memory: the backward keeps no hop's blocks ---------------------------------------------------

KV_HEAVY = ModelConfig(layers=2, hidden=512, heads=2, seq_len=512)  # Dh = 256


def _scanned_ring_temp(s: int, layers: int = 2) -> int:
    """Temp bytes per device of the gradient of `layers` ring attentions run by lax.scan, as the
    model runs its blocks, on KV_HEAVY's attention: B = 1, T = 512, H = K = 2, Dh = 256."""
    mesh = make_mesh(Layout(seq=s, cp="ring"), jax.devices()[:s])
    spec = P(None, None, SEQ)  # (layers, B, T, heads, Dh)

    def attend_layers(q, k, v):
        def layer(x, qkv):  # x (B, T/s, K, Dh) feeds the next layer, as a residual stream
            q, k, v = qkv
            return ring_attention(q + x, k + x, v, SEQ, s), None

        return jax.lax.scan(layer, jnp.zeros_like(k[0]), (q, k, v))[0]

    f = jax.shard_map(attend_layers, mesh=mesh, in_specs=(spec,) * 3, out_specs=P(None, SEQ))
    x = jax.ShapeDtypeStruct((layers, 1, KV_HEAVY.seq_len, KV_HEAVY.heads, KV_HEAVY.head_dim),
                             jnp.float32, sharding=NamedSharding(mesh, spec))
    grad = jax.jit(jax.grad(lambda q, k, v: jnp.sum(f(q, k, v) ** 2), (0, 1, 2)))
    return grad.lower(x, x, x).compile().memory_analysis().temp_size_in_bytes


def test_ring_backward_memory_falls_with_the_ring():
    """A device keeps q, k, v, the output and lse per layer (all ∝ T/s) and works on one
    visiting block at a time, so 4x the devices hold about a quarter. Measured: 11.2 MB at
    seq=2, 3.4 MB at seq=8 (0.31); autodiff through the ring kept every hop's k and v (0.78)."""
    assert _scanned_ring_temp(8) <= 0.4 * _scanned_ring_temp(2)


@pytest.mark.slow
def test_ring_step_memory_falls_with_the_ring():
    """The compiled train step of KV_HEAVY, one 512-token sequence on seq devices (issue 10: at
    most 0.55x from seq=2 to seq=8). A whole, replicated gradient accumulator (27.3 MB, all-
    reduced over seq layer by layer) was a floor under the 1/s activations: 93.7 MB -> 62.6 MB
    (0.67). Held split over seq in the backward and gathered for the update (TrainStep.
    grads_sharded_over_seq): 81.1 MB -> 40.6 MB (0.50); seq=4 53.9 MB (0.66)."""
    def temp(s):
        layout, train = Layout(seq=s, cp="ring"), TrainConfig(global_batch=1, seq_len=512)
        step, compiled, _ = compile_layout(KV_HEAVY, train, layout, jax.devices()[:s])
        assert step.grads_sharded_over_seq
        return memory_stats(compiled)["temp"]

    assert temp(8) <= 0.55 * temp(2)


@pytest.mark.parametrize("max_norm", [1e-3, 1e3])  # clipped, and left as it is
def test_ring_step_clips_gradients_on_their_slices_as_optax_does(max_norm):
    """The ring step's gradients reach the update split over seq (TrainStep.
    backward_grad_shardings); its clip, norm taken on the slices, equals optax's on whole ones."""
    step = TrainStep(model_preset("tiny"), TRAIN, Layout(seq=4, cp="ring"),
                     make_mesh(Layout(seq=4, cp="ring"), jax.devices()[:4]))
    assert step.grads_sharded_over_seq
    shardings = step.backward_grad_shardings()
    rng = np.random.default_rng(0)
    params = jax.tree.map(lambda x: rng.normal(size=x.shape).astype(np.float32),
                          gpt.param_shapes(step.model))
    split = jax.device_put(params, shardings)
    assert split["blocks"]["mlp"]["w_in"].sharding.spec == P(None, SEQ, None)
    got = jax.jit(clip_by_global_norm, static_argnums=1)(split, max_norm)
    clip = optax.clip_by_global_norm(max_norm)
    ref = jax.jit(lambda p: clip.update(p, optax.EmptyState())[0])(params)
    assert relative_error(got, ref) < TOLERANCE


def test_ulysses_attention_equals_causal_attention():
    s = 4  # 8 query heads and 4 KV heads: one KV head and its two query heads per device
    uly = _on_seq_axis(lambda q, k, v: ulysses_attention(q, k, v, SEQ), s, "ulysses")
    value_error, grad_error = _kernel_errors(uly, lambda x: x)
    assert value_error < TOLERANCE and grad_error < TOLERANCE


# --- the whole model ------------------------------------------------------------------------------

class Reference(parity.Reference):
    """The shared reference, also keeping temp bytes and returning the compiled collectives."""

    def __init__(self, name):
        super().__init__(name, TRAIN)
        self.temp = {}  # layout -> temp bytes per device of its compiled loss and gradients

    def check(self, text, train=TRAIN):
        step, fn = super().check(Layout.parse(text), train)
        self.temp[text] = fn.memory_analysis().temp_size_in_bytes
        return parse_collectives(fn.as_text(), step.mesh.devices.shape, step.mesh.axis_names)


@pytest.fixture(scope="module")
def tiny():
    return Reference("tiny")


@pytest.fixture(scope="module")
def tiny_llama():
    return Reference("tiny-llama")


def _kv_block_bytes(model, text):
    """Bytes of one device's K (or V) block: (B/data, T/seq, K/tensor, Dh) float32."""
    layout = Layout.parse(text)
    return (TRAIN.global_batch // layout.data_parallel * model.seq_len // layout.seq
            * model.kv_heads // layout.tensor * model.head_dim * 4)


def _on_seq(collectives, kind):
    return sum(c.total_bytes for c in collectives if c.kind == kind and c.axes == (SEQ,))


@pytest.mark.parametrize("text", ["data=2,seq=4,cp=ring", "seq=2,tensor=2,data=2,cp=ring"])
def test_ring_matches_single_device_and_permutes_kv_on_seq(tiny, text):
    """Each layer sends K and V s − 1 hops forward (2(s − 1) permutes of one block); the
    backward re-runs the ring: (K, V) on hop 1, (K, V, dK, dV) as one buffer on hops 2 … s − 1,
    and (dK, dV) home, s permutes of 4(s − 1) blocks in all."""
    collectives = tiny.check(text)
    s, L, block = Layout.parse(text).seq, tiny.model.layers, _kv_block_bytes(tiny.model, text)
    permutes = Counter()
    for c in collectives:
        if c.kind == "collective-permute" and c.axes == (SEQ,):
            permutes[c.bytes // block] += c.count
    assert permutes == +Counter({1: L * 2 * (s - 1), 2: L * 2, 4: L * (s - 2)})
    assert _on_seq(collectives, "collective-permute") == 6 * L * (s - 1) * block
    assert _on_seq(collectives, "all-to-all") == 0


@pytest.mark.parametrize("text", ["data=2,seq=4,cp=ulysses", "seq=2,tensor=2,data=2,cp=ulysses"])
def test_ulysses_matches_single_device_and_all_to_alls_on_seq(tiny, text):
    """Per layer, forward: q, k, v to head shards and the output back; backward the same."""
    collectives = tiny.check(text)
    L, block = tiny.model.layers, _kv_block_bytes(tiny.model, text)  # H = K in GPT
    assert _on_seq(collectives, "all-to-all") == 2 * L * 4 * block
    assert _on_seq(collectives, "collective-permute") == 0


def test_splitting_the_sequence_lowers_activation_memory(tiny):
    """Two sequences per device either way; seq=4 holds a quarter of each, so activations fall
    to about a quarter (the gradients of the replicated parameters stay). Measured: 33.1 MB ->
    6.6 MB (ring, which keeps no scores; 8.8 MB with autodiff through it) and 8.9 MB (Ulysses).
    (The parity tests above already compiled the split layouts.)"""
    tiny.check("data=2")
    for text in ("data=2,seq=4,cp=ring", "data=2,seq=4,cp=ulysses"):
        if text not in tiny.temp:
            tiny.check(text)
        assert tiny.temp[text] < 0.5 * tiny.temp["data=2"], (text, tiny.temp)


@pytest.mark.parametrize("text", ["data=2,seq=4,cp=ring", "seq=2,tensor=2,data=2,cp=ulysses"])
def test_llama_context_parallel_matches_single_device(tiny_llama, text):
    """Rotary positions follow the zig-zag order; 4 KV heads serve 8 query heads."""
    tiny_llama.check(text)


@pytest.mark.slow
@pytest.mark.parametrize("text", ["seq=8,cp=ring", "data=2,seq=4,cp=ring,microbatches=2",
                                  "data=2,seq=4,cp=ulysses",
                                  "seq=2,tensor=2,data=2,cp=ring,sp=on",
                                  "seq=2,tensor=2,data=2,cp=ulysses,sp=on",
                                  "fsdp=2,seq=4,cp=ring"])
def test_more_context_layouts_match_single_device(tiny_llama, text):
    tiny_llama.check(text)


@pytest.mark.slow
@pytest.mark.parametrize("remat", ["selective", "full"])
def test_ring_with_rematerialisation_matches(tiny, remat):
    tiny.check("data=2,seq=4,cp=ring", TRAIN.replace(remat=remat))


# --- bad input ------------------------------------------------------------------------------------

@pytest.mark.parametrize("text, seq_len, words", [
    ("seq=4,cp=ring", 100, "2·seq = 8"),  # zig-zag needs 2·seq chunks
    ("seq=8,cp=ring", 120, "multiple of 16"),
    ("seq=3,cp=ulysses", 120, "heads=8 is not divisible"),
    ("seq=4,cp=ulysses", 126, "not divisible by 4"),
    ("seq=4", 128, "cp=ring"),  # a split without a mode
    ("cp=ring", 128, "seq=2 or more"),  # a mode without a split
    ("seq=4,cp=stripe", 128, "unknown context-parallel mode"),
    ("seq=2,tensor=4,sp=on,cp=ring", 100, "seq × tensor = 8"),
])
def test_bad_context_layouts_are_rejected_before_compiling(text, seq_len, words):
    model = model_preset("tiny").replace(seq_len=seq_len)
    layout = Layout.parse(text)
    with pytest.raises(LayoutError, match=words):
        validate(layout, model, TRAIN, layout.n_devices)


def test_ulysses_needs_kv_heads_divisible_by_seq():
    layout = Layout(seq=8, cp="ulysses")  # tiny-llama has 4 KV heads
    with pytest.raises(LayoutError, match="kv_heads=4 .* cp=ring"):
        validate(layout, model_preset("tiny-llama"), TRAIN, 8)
