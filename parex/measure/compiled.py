"""The pieces of a measurement: compile a layout's step, read what XLA did (memory, FLOPs,
collectives, per device) and time steps (perf_counter around the call plus block_until_ready)."""

from __future__ import annotations

import os
import statistics
import time

import jax
from tqdm.auto import tqdm

from ..config import ModelConfig, TrainConfig
from ..executor.data import batches_for
from ..layout import Layout, LayoutError
from ..record import Measurement
from ..setting import EMULATED, platform_regime
from ..executor.mesh import make_mesh
from ..executor.step import TrainStep
from ..validation import validate
from .hlo import matmul_flops, parse_collectives


def memory_stats(compiled) -> dict[str, int]:
    """Per-device bytes. On the CPU `peak_memory_in_bytes` is unreliable, so the total is
    argument + output − alias (donated buffers reused) + temp."""
    m = compiled.memory_analysis()
    parts = {"argument": m.argument_size_in_bytes, "output": m.output_size_in_bytes,
             "alias": m.alias_size_in_bytes, "temp": m.temp_size_in_bytes}
    parts["total"] = parts["argument"] + parts["output"] - parts["alias"] + parts["temp"]
    return {k: int(v) for k, v in parts.items()}


def cost_stats(compiled) -> tuple[float, float]:
    """(FLOPs, bytes accessed) per device from XLA's cost analysis."""
    cost = compiled.cost_analysis()
    if isinstance(cost, (list, tuple)):  # older JAX returned one dict per device
        cost = cost[0] if cost else {}
    return float(cost.get("flops", 0.0)), float(cost.get("bytes accessed", 0.0))


def state_bytes_on_host(model: ModelConfig, layout: Layout) -> float:
    """Bytes of float32 parameters, gradients and AdamW's two moments summed over all devices:
    what an emulated mesh holds in host memory at the least (activations come on top)."""
    per_device = sum(copies * 4 * model.n_params / layout.shard_count("embed", kind)
                     for kind, copies in (("param", 1), ("grad", 1), ("opt", 2)))
    return per_device * layout.n_devices


def fits_host(model: ModelConfig, layouts, devices) -> bool:
    """Whether the states of `layouts` (parameters, gradients, optimizer), held at once, fit in
    0.8 of this machine's memory; always on real accelerators (each has its own)."""
    platform = (devices[0] if devices else jax.devices()[0]).platform
    return (platform_regime(platform) != EMULATED or
            sum(state_bytes_on_host(model, layout) for layout in layouts)
            <= 0.8 * _host_memory_bytes())


def check_fits_host(model: ModelConfig, layout: Layout, devices, *, together=()) -> None:
    """Refuse, before compiling, a model whose state alone exceeds this machine's memory when the
    devices are emulated CPUs (they all share the host's RAM); `together`: other layouts whose
    states are resident beside this one's (parex.measure.rotation)."""
    if fits_host(model, (layout, *together), devices):
        return
    need = sum(state_bytes_on_host(model, each) for each in (layout, *together))
    what = (f"layout {layout}" if not together else
            f"{1 + len(together)} layouts held at once (measure fewer side by side)")
    raise LayoutError(
        f"{model.name} ({model.n_params / 1e9:.2f}B parameters) needs at least "
        f"{need / 1e9:.1f} GB for parameters, gradients and optimizer state on "
        f"{layout.n_devices} emulated devices with {what}, and this machine has "
        f"{_host_memory_bytes() / 1e9:.1f} GB: use `parex predict` for models this size, or a "
        f"smaller preset (tiny, small)")


def _host_memory_bytes() -> float:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def compile_layout(model: ModelConfig, train: TrainConfig, layout: Layout, devices=None,
                   before=None):
    """(TrainStep, compiled step, seconds spent lowering and compiling). Validation errors
    raise here, before anything is traced; so do `before(step)`'s (called before lowering)."""
    platform = (devices[0] if devices else jax.devices()[0]).platform
    layout = validate(layout, model, train, layout.n_devices if devices is None else len(devices),
                      platform=platform)
    check_fits_host(model, layout, devices)
    step = TrainStep(model, train, layout, make_mesh(layout, devices))
    if before is not None:
        before(step)
    start = time.perf_counter()
    compiled = step.lower().compile()
    return step, compiled, time.perf_counter() - start


def compiled_stats(compiled, step: TrainStep) -> dict:
    """Memory, FLOPs and collectives of a compiled step, per device, without running it. Under
    a pipeline each stage takes a different branch of the tick switch on each tick: the
    collectives and matmul FLOPs are the busiest stage's, each branch counted on the ticks that
    take it (Timetable.branch_shares)."""
    flops, bytes_accessed = cost_stats(compiled)
    text, mesh = compiled.as_text(), step.mesh
    shares = [None]
    if step.layout.stage > 1 and step.local is None:  # local: no switch, every tick alike
        from ..parallel.pipeline import timetable_for

        shares = timetable_for(step).branch_shares()
    collectives = max((parse_collectives(text, mesh.devices.shape, mesh.axis_names, s)
                       for s in shares), key=lambda cs: sum(c.total_bytes for c in cs))
    return {"memory_bytes_per_device": memory_stats(compiled), "flops_per_device": flops,
            "matmul_flops_per_device": max(matmul_flops(text, s) for s in shares),
            "bytes_accessed_per_device": bytes_accessed, "collectives": collectives}


def run_step(step: TrainStep, compiled, state, batches, i: int, probe=None):
    """Step i of a run: its batch on the mesh, `probe(state, batch)` first (untimed), then the
    compiled step timed with perf_counter around the call and block_until_ready on its loss.
    Returns (state, loss, seconds)."""
    batch = batches.on_mesh(i, step.batch_sharding)
    if probe is not None:
        probe(state, batch)
    start = time.perf_counter()
    state, loss = compiled(state, batch)
    jax.block_until_ready(loss)
    return state, float(loss), time.perf_counter() - start


def time_steps(step: TrainStep, compiled, data: str, progress: bool, *, state=None,
               on_step=None, probe=None, checkpoints=None) -> tuple[list, list]:
    """(losses, seconds) for `train.steps` steps from `state` (default: the initial state);
    `on_step(i)` is called after step i, `probe(state, batch)` before it, untimed. With
    `checkpoints` (executor.checkpoint.RunCheckpoints) the run starts from the latest checkpoint
    when resuming (the losses returned then include the restored ones; the seconds only this
    process's steps) and saves after the steps it names, untimed."""
    train, model = step.train, step.model
    batches = batches_for(model, data, train.global_batch, step.seq_len, train.seed)
    init = step.init_state if state is None else (lambda: state)
    state, start_at, losses = (checkpoints.restore_or(init) if checkpoints is not None
                               else (init(), 0, []))
    times = []
    for i in tqdm(range(start_at, train.steps), desc=f"{model.name} {step.layout}",
                  disable=not progress, leave=False):
        state, loss, seconds = run_step(step, compiled, state, batches, i, probe)
        times.append(seconds)
        losses.append(loss)
        if checkpoints is not None:
            checkpoints.after_step(i, state, losses)
        if on_step is not None:
            on_step(i)
    return losses, times


WARMUP = 1  # steps run before timing starts: the first call's dispatch and allocations


def timed_steps(times: list[float], warmup: int = WARMUP) -> list[float]:
    """The step times after `warmup` (all of them when there are no more)."""
    return times[warmup:] if len(times) > warmup else times


def measurement_of(model: ModelConfig, train: TrainConfig, layout: Layout, mesh,
                   losses: list[float], times: list[float], compile_time: float, stats: dict,
                   warmup: int = WARMUP, **blocks) -> Measurement:
    """The one Measurement builder: a run's losses, the median, fastest and slowest of its
    timed steps, its compile statistics (`stats`: compiled_stats) and the blocks a technique
    adds (diloco, moe)."""
    timed = timed_steps(times, warmup)
    return Measurement(
        model=model.name, layout=str(layout), n_devices=mesh.size,
        platform=mesh.devices.flat[0].platform, losses=losses,
        step_time_s={"median": statistics.median(timed), "min": min(timed), "max": max(timed)},
        compile_time_s=compile_time, tokens_per_step=train.tokens_per_step(model),
        **stats, **blocks)
