"""`parex calibrate`: measure this machine's emulated mesh and write its `cpu-local` profile
(into the user's cache, one file per machine: parex.machine).

What is measured (each a median over repeats, all devices busy at once, as in a sharded step):
- matmul rate per device against size (FLOPs of one matmul -> FLOP/s), float32; bfloat16 once;
- elementwise rate: a fused norm-and-activation kernel, in the FLOPs XLA's cost analysis counts
  (the unit of predict.flops.ELEMENTWISE), and memory bandwidth from a large copy;
- every collective kind (all-reduce, all-gather, reduce-scatter, all-to-all, collective-permute)
  over groups of 2 and of all devices at several sizes, fitted to α + β·bytes (hlo.py's bytes);
  each timed as a chain of dependent collectives inside one jitted loop, so dispatch cost is out;
- the fixed cost of one jitted step call, and the optimizer's cost per parameter;
- two real parex.model.transformer GPT blocks, forward and backward, on every device, and all
  devices' sequences on one device alone: how fast real blocks run against what the kernel rates
  above predict (`step_efficiency`, covering copies, layouts and skew between devices that
  kernel timings miss), and how many emulated devices really run at once (`parallel_devices`:
  one device alone already uses every core it can, the more so the larger its kernels);
  and one block on every device as a loop's body, each iteration's activations read back at once
  (`efficiency_curve`: the step efficiency over the activation bytes a device holds from forward
  to backward, one block's and two's; benchmarks/block_depth.py);
- the attention kernels of those blocks alone, forward and backward, on every device, the naive
  one and the blockwise one (ring attention's per-hop kernel): what each takes against its
  price at the kernel rates (`attention_factor`, `blockwise_factor`; the naive kernel's
  batched small-K products and the copies around them run far below the square matmuls'
  rates, the blockwise kernel's online softmax costs more than its scores' count:
  docs/results/2026-12-emulated-step.md), so that the block probe's efficiency no longer
  carries one kernel's loss into layouts that run the other;
- what an all-reduce costs between matmuls, as a tensor-parallel step runs it, against its chained
  α + β·S (`collective_in_step`): 8 matmuls of a (2048, 128) activation with and without an
  all-reduce of it after each (the copies compete with the other devices' matmuls for the cores);
- the pipeline executor's fixed cost per tick, on a probe model (calibrate_pipeline.py);
- what freshly mapped memory costs per byte, for a step whose temporaries the allocator maps
  afresh on every call (allocator.py).
The kernels, the block, attention and in-step probes are timed in alternated rounds
(`timed_alternately`), so that the machine's speed drifting during the calibration moves them
alike: the block probe's efficiency is a ratio of their timings. Takes 65-90 s on two cores.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import statistics
import time
from functools import partial

import numpy as np

from ..errors import InputError
from ..hardware import Calibration, Chip, Link, save_chip
from . import allocator

MATMUL_SIZES = (32, 64, 128, 192, 256, 384, 512, 768)
COLLECTIVE_BYTES = (16 * 1024, 256 * 1024, 1024 * 1024, 4 * 1024 * 1024)
KINDS = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute")
CHAIN = 8  # collectives per timed loop


def _timed(fn, *args, repeats: int = 5) -> float:
    """Median seconds of fn(*args) after one warm-up call (compilation)."""
    import jax

    jax.block_until_ready(fn(*args))
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _mesh(shape: tuple[int, ...], names: tuple[str, ...]):
    import jax
    from jax.sharding import AxisType

    return jax.make_mesh(shape, names, axis_types=(AxisType.Auto,) * len(names))


def _sharded(mesh, shape, spec, dtype="float32"):
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec

    x = jnp.asarray(np.random.default_rng(0).standard_normal(shape, np.float32), dtype)
    return jax.device_put(x, NamedSharding(mesh, PartitionSpec(*spec)))


def matmul_call(n: int, devices: int, dtype: str = "float32"):
    """(jitted fn, its arguments, FLOPs per device per call): (n, n) @ (n, n) matmuls on each of
    `devices` devices at once, enough of them per call to dwarf dispatch."""
    import jax
    import jax.numpy as jnp

    mesh = _mesh((devices,), ("d",))
    a = _sharded(mesh, (devices, n, n), ("d",), dtype)
    reps = max(1, int(2e8 // (2 * n ** 3)))

    @jax.jit
    def run(a):
        def body(_, x):
            return jnp.einsum("bij,bjk->bik", x, a) * (1.0 / n)
        return jax.lax.fori_loop(0, reps, body, a)

    return run, (a,), reps * 2 * n ** 3


def matmul_rate(n: int, devices: int, dtype: str = "float32") -> float:
    """FLOP/s per device for an (n, n) @ (n, n) matmul on each of `devices` devices at once."""
    fn, args, flops = matmul_call(n, devices, dtype)
    return flops / _timed(fn, *args)


def elementwise_calls(devices: int, tokens: int = 512, width: int = 512):
    """((fn, args, elementwise FLOPs per device per call as XLA counts them), (fn, args, bytes
    per device per call)): a fused norm-and-activation loop, and a large copy."""
    import jax

    mesh = _mesh((devices,), ("d",))
    x = _sharded(mesh, (devices, tokens, width), ("d",))

    def norm_gelu(x):  # the kind of fused elementwise work a block does
        mu = x.mean(-1, keepdims=True)
        y = (x - mu) * jax.lax.rsqrt(((x - mu) ** 2).mean(-1, keepdims=True) + 1e-5)
        return jax.nn.gelu(y) * 0.5 + x * 0.5

    reps = 20
    run = jax.jit(lambda x: jax.lax.fori_loop(0, reps, lambda _, y: norm_gelu(y), x))
    flops = jax.jit(norm_gelu).lower(x).compile().cost_analysis()
    flops = (flops[0] if isinstance(flops, (list, tuple)) else flops)["flops"]  # per device
    big = _sharded(mesh, (devices, 2048, 2048), ("d",))
    copy = jax.jit(lambda x: x * 1.0001)
    return (run, (x,), reps * flops), (copy, (big,), 2 * big.nbytes / devices)


def elementwise_rate(devices: int, tokens: int = 512, width: int = 512) -> tuple[float, float]:
    """(elementwise FLOP/s per device as XLA counts them, copy bandwidth per device in B/s)."""
    (run, x, flops), (copy, big, moved) = elementwise_calls(devices, tokens, width)
    return flops / _timed(run, *x), moved / _timed(copy, *big)


def _collective_fn(kind: str, axis: str, group: int):
    """One collective on a local block x, returning a block of x's shape (so it can chain)."""
    import jax
    import jax.numpy as jnp

    if kind == "all-reduce":
        return lambda x: jax.lax.psum(x, axis) * (1.0 / group)
    if kind == "all-gather":
        return lambda x: jax.lax.all_gather(x, axis, tiled=True)[: x.shape[0]] * 0.5
    if kind == "reduce-scatter":
        return lambda x: jnp.tile(jax.lax.psum_scatter(x, axis, tiled=True), group) * 0.5
    if kind == "all-to-all":
        return lambda x: jax.lax.all_to_all(x, axis, 0, 0, tiled=True) * 0.5
    perm = [(i, (i + 1) % group) for i in range(group)]
    return lambda x: jax.lax.ppermute(x, axis, perm) * 0.5


def collective_seconds(kind: str, group: int, n_bytes: int, devices: int) -> float:
    """Seconds of one collective of `n_bytes` (hlo.py's convention) over groups of `group`."""
    import jax
    from jax.sharding import PartitionSpec as P

    mesh = _mesh((devices // group, group), ("rest", "g"))
    # the per-device block: the gathered result of an all-gather has n_bytes, so its input 1/g
    elems = n_bytes // 4 // (group if kind == "all-gather" else 1)
    elems = max(group, elems // group * group)
    x = _sharded(mesh, (devices * elems,), (("rest", "g"),))
    op = _collective_fn(kind, "g", group)

    def chain(x):
        return jax.lax.fori_loop(0, CHAIN, lambda _, y: op(y), x)

    spec = P(("rest", "g"))
    manual = partial(jax.shard_map, mesh=mesh, in_specs=spec, out_specs=spec, check_vma=False)
    run = jax.jit(manual(chain))
    return max(_timed(run, x) - _empty_loop_seconds(group, elems, devices), 1e-7) / CHAIN


@functools.lru_cache(maxsize=None)
def _empty_loop_seconds(group: int, elems: int, devices: int) -> float:
    """The chain's loop without its collectives (the same for every kind of one size)."""
    import jax
    from jax.sharding import PartitionSpec as P

    mesh = _mesh((devices // group, group), ("rest", "g"))
    x = _sharded(mesh, (devices * elems,), (("rest", "g"),))
    spec = P(("rest", "g"))
    empty = jax.shard_map(lambda x: jax.lax.fori_loop(0, CHAIN, lambda _, y: y * 0.5, x),
                          mesh=mesh, in_specs=spec, out_specs=spec, check_vma=False)
    return _timed(jax.jit(empty), x)


def fit_alpha_beta(sizes, seconds) -> dict:
    """Least-squares α + β·S with both terms kept non-negative."""
    S, t = np.asarray(sizes, float), np.asarray(seconds, float)
    beta, alpha = np.polyfit(S, t, 1)
    if alpha < 0:
        alpha, beta = 0.0, float(np.dot(S, t) / np.dot(S, S))
    return {"alpha": float(alpha), "beta": float(max(beta, 0.0))}


BLOCK_SEQUENCES = 2  # per device, of 128 tokens
SHALLOW_TRIPS = 4  # iterations of the one-block probe's loop (shallow_step)


def _block_config(layers: int = 2):
    from ..config import ModelConfig

    return ModelConfig("calibration", layers=layers, hidden=128, heads=8, vocab=256, seq_len=128)


def block_step(n: int, layers: int = 2, sequences: int = BLOCK_SEQUENCES):
    """Forward and backward of `layers` parex.model.transformer GPT blocks (the kernels a step
    runs, without embedding, loss or optimizer) on each of n devices, `sequences` sequences of
    128 tokens per device: (jitted function, its arguments)."""
    import jax
    import jax.numpy as jnp

    from ..model import transformer as gpt

    cfg = _block_config(layers)
    blocks = jax.jit(lambda key: gpt.init_params(cfg, key)["blocks"])(jax.random.key(0))
    x = _sharded(_mesh((n,), ("d",)), (n * sequences, cfg.seq_len, cfg.hidden), ("d",))

    def loss(blocks, x):
        return jnp.mean(gpt.run_blocks(x, blocks, cfg) ** 2)

    return jax.jit(jax.grad(loss, argnums=(0, 1))), (blocks, x)  # every matmul 3 times


def shallow_step(n: int, trips: int = SHALLOW_TRIPS, sequences: int = BLOCK_SEQUENCES):
    """One block's forward and backward on each of n devices as the body of a loop of `trips`
    iterations, each on the last one's input moved by its gradient: a device holds one layer's
    activations at a time and reads them back at once, as a local-learning tick (or a layer
    loop's recomputing backward) does: (jitted function, its arguments)."""
    import jax

    grad, (blocks, x) = block_step(n, layers=1, sequences=sequences)

    def looped(blocks, x):
        def body(h, _):
            g_blocks, g_x = grad(blocks, h)
            return h - 1e-3 * g_x, g_blocks
        return jax.lax.scan(body, x, None, length=trips)

    return jax.jit(looped), (blocks, x)


ATTENTION_BLOCK = 32  # rows of the blockwise probe's blocks: tiny's ring blocks at seq=2


def attention_steps(n: int, sequences: int = BLOCK_SEQUENCES) -> dict:
    """The attention kernels of block_step's blocks alone, forward and backward, on each of n
    devices: {"naive": (jitted function, its arguments), "blockwise": ...}, the naive kernel
    and the blockwise one in blocks of ATTENTION_BLOCK rows (parex.model.attention; the latter
    runs ring attention's per-hop kernel). What each takes over its price at the kernel rates
    is the profile's `attention_factor` and `blockwise_factor`."""
    import jax
    import jax.numpy as jnp

    from ..model.attention import blockwise_attention, naive_attention

    cfg = _block_config()
    shape = (n * sequences, cfg.seq_len, cfg.heads, cfg.hidden // cfg.heads)
    mesh = _mesh((n,), ("d",))
    qkv = tuple(_sharded(mesh, shape, ("d",)) for _ in range(3))
    kernels = {"naive": naive_attention,
               "blockwise": partial(blockwise_attention, block=ATTENTION_BLOCK)}
    return {name: (jax.jit(jax.grad(lambda q, k, v, f=f: jnp.mean(f(q, k, v) ** 2),
                                    argnums=(0, 1, 2))), qkv)
            for name, f in kernels.items()}


def attention_factors(cal: Calibration, bandwidth: float, t_naive: float, t_blockwise: float,
                      sequences: int = BLOCK_SEQUENCES) -> dict:
    """{"attention_factor": ..., "blockwise_factor": ...}: each attention probe's time per call
    (less the fixed cost of a call) over its price at these rates, the naive kernel's by
    predict.time.naive_attention_seconds, the blockwise one's by predict.time.
    blockwise_seconds on its n(n + 1)/2 block pairs (n = T/c), each 4·c²·H·Dh matmul FLOPs
    forward and FLASH_BACKWARD times that backward (QKᵀ recomputed) per sequence."""
    from ..config import TrainConfig
    from ..predict.accelerator import FLASH_BACKWARD
    from ..predict.flops import ELEMENTWISE
    from ..predict.shapes import Grid, model_sizes
    from ..predict.time import blockwise_seconds, naive_attention_seconds

    cfg = _block_config(layers=1)
    grid = Grid.from_columns(TrainConfig(global_batch=sequences), cfg)
    naive = float(naive_attention_seconds(model_sizes(cfg), grid, "none", cal, bandwidth)[0])
    c, n, head_dim = ATTENTION_BLOCK, cfg.seq_len // ATTENTION_BLOCK, cfg.hidden // cfg.heads
    scores = n * (n + 1) / 2 * c * c * cfg.heads * sequences
    blockwise = float(blockwise_seconds((1 + FLASH_BACKWARD) * 4 * scores * head_dim,
                                        ELEMENTWISE["scores"] * scores, c, head_dim,
                                        dataclasses.replace(cal, blockwise_factor=1.0)))
    return {name: float(np.clip((t - cal.step_overhead_s) / priced, 0.25, 8.0))
            for name, t, priced in (("attention_factor", t_naive, naive),
                                    ("blockwise_factor", t_blockwise, blockwise))}


def alone_step(n: int):
    """block_step's work of all n devices on one device alone (n·BLOCK_SEQUENCES sequences), as
    a single-device layout runs a whole step: (compiled function, its arguments, the bytes of
    its temporaries, over glibc's mmap threshold, so they fault in on every call)."""
    fn, args = block_step(1, sequences=n * BLOCK_SEQUENCES)
    compiled = fn.lower(*args).compile()
    return compiled, args, float(compiled.memory_analysis().temp_size_in_bytes)


def block_probe(chip: Chip, layers: int = 2,
                sequences: int = BLOCK_SEQUENCES) -> tuple[float, float]:
    """(seconds block_step(·, layers, sequences) takes per device at the profile's kernel rates,
    bytes of activations each device holds from the blocks' forward to their backward)."""
    from ..config import TrainConfig
    from ..predict.memory import layer_bytes, recipe
    from ..predict.shapes import Grid, model_sizes
    from ..predict.time import cpu_layer_seconds

    cfg = _block_config(layers)
    grid = Grid.from_columns(TrainConfig(global_batch=sequences), cfg)
    sizes = model_sizes(cfg)
    kernels = layers * cpu_layer_seconds(sizes, grid, "none", chip.calibration,
                                         chip.hbm_bandwidth)[0]
    return float(kernels), float(layers * layer_bytes(sizes, grid, "none", recipe("parex"), 4)[0])


def calibrated_block_seconds(chip: Chip) -> float:
    """What block_step(n) took per step while `chip` was calibrated, n its calibration's devices
    (recalibrated's inverse: the kernels' time at the profile's rates over its step efficiency,
    plus its fixed cost)."""
    kernels, _ = block_probe(chip)
    return kernels / chip.calibration.step_efficiency + chip.calibration.step_overhead_s


def recalibrated(chip: Chip, t_all: float, t_alone: float, t_shallow: float | None = None,
                 alone_temp_bytes: float = 0.0) -> Chip:
    """The profile with step_efficiency and parallel_devices from block_step timings on all
    devices (t_all) and alone_step's on one (t_alone, the same work; its temporaries
    `alone_temp_bytes`), e.g. taken between measured steps under the same load: efficiency =
    what predict.time says the blocks take at the kernel rates / what they took; parallel
    devices P such that predict.time's single-device rates (n/P times the all-busy ones) give
    t_alone. Given shallow_step's time on all devices (`t_shallow`), the efficiency curve over
    the activations a device holds: its point and the two blocks' (else the curve is kept)."""
    from ..predict.time import cpu_page_fault_seconds, cpu_step_efficiency

    cal = chip.calibration
    busy = max(t_all - cal.step_overhead_s, 1e-6)
    kernels, held = block_probe(chip)
    efficiency = float(np.clip(kernels / busy, 0.05, 2.0))
    cal = dataclasses.replace(cal, step_efficiency=efficiency)
    if t_shallow is not None:
        kernels_1, held_1 = block_probe(chip, layers=1)
        shallow = float(np.clip(SHALLOW_TRIPS * kernels_1
                                / max(t_shallow - cal.step_overhead_s, 1e-6), 0.05, 2.0))
        cal = dataclasses.replace(cal, efficiency_curve=((held_1, shallow), (held, efficiency)))
    # one device alone runs n devices' work at n/P times a busy device's rates (cpu_rate_scale)
    n = cal.n_devices
    kernels_n, held_n = block_probe(chip, sequences=n * BLOCK_SEQUENCES)
    at_busy_rates = (kernels_n / float(cpu_step_efficiency(cal, held_n))
                     + float(cpu_page_fault_seconds(cal, alone_temp_bytes, 1.0)))
    alone = max(t_alone - cal.step_overhead_s, 1e-6)
    cal = dataclasses.replace(cal, parallel_devices=float(np.clip(n * alone / at_busy_rates,
                                                                  1.0, n)))
    return dataclasses.replace(chip, calibration=cal)


def optimizer_seconds(devices: int, params: int = 1 << 20) -> float:
    """Seconds per parameter of an optimizer update like parex's (global-norm clipping, AdamW
    with decay), every device updating its own `params` parameters at once."""
    import jax
    import optax

    mesh = _mesh((devices,), ("d",))
    tree = {"w": _sharded(mesh, (devices, params // 1024, 1024), ("d",))}
    opt = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(1e-3, b2=0.95))
    state = jax.jit(opt.init)(tree)

    @jax.jit
    def update(tree, state):
        updates, state = opt.update(tree, state, tree)
        return optax.apply_updates(tree, updates), state

    return _timed(update, tree, state, repeats=7) / params


def step_overhead(devices: int) -> float:
    """Seconds of a trivial jitted call on every device: dispatch and synchronisation."""
    import jax

    mesh = _mesh((devices,), ("d",))
    x = _sharded(mesh, (devices, 8), ("d",))
    return _timed(jax.jit(lambda x: x + 1.0), x, repeats=20)


IN_STEP_ROWS = 2048  # per device, of width 128: a 1 MiB float32 activation, as a tiny model's
KERNEL_ROUNDS = 7  # alternated rounds of the kernels, the block probe and the in-step probe


def in_step_calls(devices: int):
    """Two jitted loops of CHAIN matmuls x = tanh(x @ W) on every device, the second with an
    all-reduce of x over all devices after each, as a tensor-parallel step runs them:
    ((fn, args) without, (fn, args) with). The difference is what an all-reduce costs between
    matmuls, where every device's compute competes with the copies for the shared cores."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import PartitionSpec as P

    mesh = _mesh((devices,), ("d",))
    x = _sharded(mesh, (devices * IN_STEP_ROWS, 128), ("d",))
    w = _sharded(mesh, (128, 128), (None, None)) * (1 / 128 ** 0.5)

    def loop(reduce: bool):
        def layer(y, w):
            y = jnp.tanh(y @ w)
            return jax.lax.psum(y, "d") * (1.0 / devices) if reduce else y

        def chain(x, w):
            return jax.lax.fori_loop(0, CHAIN, lambda _, y: layer(y, w), x)
        return jax.jit(jax.shard_map(chain, mesh=mesh, in_specs=(P("d"), P()),
                                     out_specs=P("d"), check_vma=False))

    return (loop(False), (x, w)), (loop(True), (x, w))


def timed_alternately(calls: dict, repeats: int = KERNEL_ROUNDS) -> dict:
    """Median seconds of each (fn, args) in `calls`, one call of each per round after a warm-up
    call, so that a change of the machine's speed during the calibration hits all alike (the
    block probe's efficiency is a ratio of their timings)."""
    import jax

    for fn, args in calls.values():
        jax.block_until_ready(fn(*args))
    times: dict = {key: [] for key in calls}
    for _ in range(repeats):
        for key, (fn, args) in calls.items():
            start = time.perf_counter()
            jax.block_until_ready(fn(*args))
            times[key].append(time.perf_counter() - start)
    return {key: statistics.median(t) for key, t in times.items()}


def kernel_timings(devices: int) -> dict:
    """The kernels whose rates price a step (matmuls by size, bf16, elementwise, copy), the
    block probe on all devices and its work on one (alone_step), and the in-step all-reduce
    probe, timed alternately (`timed_alternately`): {"matmul": [(FLOPs, FLOP/s)], "bf16":
    FLOP/s, "elementwise": (FLOP/s, B/s), "blocks<n>": s, "alone": (s, temporaries' bytes),
    "shallow": s, "in_step": (s without, s with), "attention": (s naive, s blockwise)}."""
    calls, work = {}, {}
    for n in MATMUL_SIZES:
        fn, args, work[("matmul", n)] = matmul_call(n, devices)
        calls[("matmul", n)] = (fn, args)
    fn, args, work["bf16"] = matmul_call(256, devices, "bfloat16")
    calls["bf16"] = (fn, args)
    (ew, ew_args, work["norm"]), (copy, copy_args, work["copy"]) = elementwise_calls(devices)
    calls |= {"norm": (ew, ew_args), "copy": (copy, copy_args)}
    calls[f"blocks{devices}"] = block_step(devices)
    alone, alone_args, alone_temp = alone_step(devices)
    calls["alone"] = (alone, alone_args)
    calls["shallow"] = shallow_step(devices)
    calls["plain"], calls["reduced"] = in_step_calls(devices)
    calls |= {("attention", k): call for k, call in attention_steps(devices).items()}
    t = timed_alternately(calls)
    return {"matmul": [(2.0 * n ** 3, work[("matmul", n)] / t[("matmul", n)])
                       for n in MATMUL_SIZES],
            "bf16": work["bf16"] / t["bf16"],
            "elementwise": (work["norm"] / t["norm"], work["copy"] / t["copy"]),
            f"blocks{devices}": t[f"blocks{devices}"], "alone": (t["alone"], alone_temp),
            "shallow": t["shallow"],
            "in_step": (t["plain"], t["reduced"]),
            "attention": (t[("attention", "naive")], t[("attention", "blockwise")])}


def in_step_factor(plain: float, reduced: float, chained_seconds: float) -> float:
    """How many times its chained α + β·S an all-reduce costs between matmuls: the probe's
    extra seconds per all-reduce over the chained fit's, at least 1 (a collective is never
    cheaper than alone on the cores)."""
    return float(max((reduced - plain) / CHAIN / max(chained_seconds, 1e-9), 1.0))


def calibrate(devices: int = 8, progress: bool = True, on_task=None) -> Chip:
    """Measure everything and return the cpu-local Chip (not yet saved); `on_task(done,
    total)` is called after each measurement."""
    import jax
    from tqdm.auto import tqdm

    if len(jax.devices()) < devices:
        raise InputError(f"calibration needs {devices} devices, JAX has {len(jax.devices())}: "
                         f"call parex.emulate_devices({devices}) first")
    tasks = ([("kernels", devices), ("overhead", 0), ("optimizer", 0), ("pipeline", devices),
              ("page faults", devices)]
             + [("coll", (k, g, s)) for k in KINDS for g in (2, devices)
                for s in COLLECTIVE_BYTES])
    results: dict = {"coll": {}, "load": os.getloadavg()[0]}  # others' work
    _empty_loop_seconds.cache_clear()  # baselines are timed afresh in every calibration
    for done, (name, arg) in enumerate(tqdm(tasks, desc="calibrating", disable=not progress)):
        if on_task is not None:
            on_task(done, len(tasks))
        if name == "kernels":
            results |= kernel_timings(arg)
        elif name == "pipeline":
            from .pipeline import tick_seconds

            results["pipeline"] = tick_seconds(arg)
        elif name == "optimizer":
            results["optimizer"] = optimizer_seconds(devices)
        elif name == "page faults":
            results["page_fault_rate"] = allocator.page_fault_rate(arg)
        elif name == "overhead":
            results["overhead"] = step_overhead(devices)
        else:
            kind, group, size = arg
            results["coll"].setdefault((kind, group), []).append(
                (size, collective_seconds(kind, group, size, devices)))
    if on_task is not None:
        on_task(len(tasks), len(tasks))
    return _profile(results, devices)


def _profile(results: dict, devices: int) -> Chip:
    curve = tuple(results["matmul"])
    collectives: dict = {}
    for (kind, group), points in results["coll"].items():
        collectives.setdefault(kind, {})[str(group)] = fit_alpha_beta(*zip(*points))
    ew_rate, bandwidth = results["elementwise"]
    chained = fit_alpha_beta(*zip(*results["coll"][("all-reduce", devices)]))
    in_step = in_step_factor(*results["in_step"],
                             chained["alpha"] + chained["beta"] * IN_STEP_ROWS * 128 * 4)
    from ..machine import fingerprint, machine_description

    cal = Calibration(matmul_curve=curve, collectives=collectives,
                      step_overhead_s=results["overhead"], elementwise_rate=ew_rate,
                      optimizer_s_per_param=results["optimizer"],
                      pipeline_tick_s=results["pipeline"], collective_in_step=in_step,
                      page_fault_rate=results["page_fault_rate"],
                      mmap_threshold_bytes=allocator.mmap_threshold_bytes(), n_devices=devices,
                      cores=os.cpu_count() or 1, machine=fingerprint(),
                      load_average=results.get("load"))
    cal = dataclasses.replace(cal, **attention_factors(cal, bandwidth, *results["attention"]))
    peak = max(rate for _, rate in curve)
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    shared = Link(bandwidth=bandwidth, latency=collectives["all-reduce"][str(devices)]["alpha"],
                  name="shared memory between emulated devices")
    chip = Chip(name="cpu-local", description=f"this machine's CPU as {devices} emulated devices "
                f"on {cal.cores} cores (parex calibrate)",
                peak_flops={"float32": peak, "bfloat16": results["bf16"]},
                hbm_bytes=float(memory) / devices, hbm_bandwidth=bandwidth, intra_node=shared,
                inter_node=shared, devices_per_node=devices, scaleup_domain=devices,
                matmul_efficiency=1.0, network_efficiency=1.0,
                sources=(f"measured by `parex calibrate` on {time.strftime('%Y-%m-%d')} on "
                         f"{machine_description()} (JAX {_jax_version()})",
                         "peak = the best measured matmul rate per device with all devices busy; "
                         "HBM = physical memory / devices"),
                calibration=cal)
    t_alone, alone_temp = results["alone"]
    return recalibrated(chip, results[f"blocks{devices}"], t_alone, results["shallow"],
                        alone_temp)


def _jax_version() -> str:
    import jax

    return jax.__version__


def run(devices: int = 8, directory=None, progress: bool = True, on_task=None,
        path=None) -> tuple[Chip, str, float]:
    """Calibrate, save, and return (profile, path, seconds taken). The profile goes to `path`,
    else `directory`/cpu-local.json, else this machine's file in the user's cache
    (parex.machine.profile_path); never to the tracked data/hardware/."""
    from ..machine import profile_path

    start = time.perf_counter()
    chip = calibrate(devices, progress, on_task)
    if path is None and directory is None:
        path = profile_path()
    path = save_chip(chip, directory, path)
    return chip, str(path), time.perf_counter() - start


def summary(chip: Chip) -> str:
    cal = chip.calibration
    lines = [f"{chip.description}",
             f"matmul      peak {chip.peak('float32') / 1e9:.2f} GFLOP/s per device "
             f"(bf16 {chip.peak('bfloat16') / 1e9:.2f}); "
             + ", ".join(f"{int(round(f ** (1 / 3) / 2 ** (1 / 3)))}³: {r / 1e9:.2f}"
                         for f, r in cal.matmul_curve),
             f"elementwise {cal.elementwise_rate / 1e9:.2f} GFLOP/s per device · copy "
             f"{chip.hbm_bandwidth / 1e9:.2f} GB/s per device",
             f"step        {cal.step_overhead_s * 1e3:.2f} ms fixed · "
             f"{cal.parallel_devices:.2f} of {cal.n_devices} devices run at once · a step runs "
             f"at {cal.step_efficiency:.0%} of the kernel rates"
             + "".join(f" ({e:.0%} holding {b / 1e6:.1f} MB)"
                       for b, e in cal.efficiency_curve[:1])
             + " · a pipeline tick "
             f"{cal.pipeline_tick_s * 1e3:.2f} ms fixed · a collective between matmuls "
             f"{cal.collective_in_step:.2f}× its chained time · attention "
             f"{cal.attention_factor:.2f}× its kernel rates' time (naive), "
             f"{cal.blockwise_factor:.2f}× (in blocks)"
             + (f" · fresh pages {cal.page_fault_rate / 1e9:.2f} GB/s per device above "
                f"{cal.mmap_threshold_bytes / 2**20:.0f} MiB of temporaries"
                if cal.page_fault_rate and cal.mmap_threshold_bytes else "")]
    for kind, groups in cal.collectives.items():
        fits = ", ".join(f"g={g}: α {v['alpha'] * 1e6:.0f} µs, "
                         f"{1 / max(v['beta'], 1e-15) / 1e9:.2f} GB/s"
                         for g, v in sorted(groups.items(), key=lambda kv: int(kv[0])))
        lines.append(f"{kind:18s} {fits}")
    return "\n".join(lines)


__all__ = ["block_step", "calibrate", "calibrated_block_seconds", "collective_seconds",
           "fit_alpha_beta", "matmul_rate", "run", "summary"]
