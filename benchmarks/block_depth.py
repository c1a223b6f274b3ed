"""What a layer's forward and backward costs on the emulated mesh by where it runs: in a jitted
step with other layers (`deep L`: the gradient of L stacked blocks, every layer's activations held
until its backward) or as the body of a loop (`loop N`: N iterations of one block's forward and
backward, each using its activations at once, as a local-learning tick does). Every device runs
its own copy of tiny's block on `--sequences` sequences of 128 tokens; medians of alternated
calls, per layer (docs/results/2026-12-emulated-step.md).

    python benchmarks/block_depth.py --sequences 2
    GLIBC_TUNABLES=glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=1073741824 \\
        python benchmarks/block_depth.py          # freed blocks kept: no page faults per call
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402

jax.config.update("jax_num_cpu_devices", 8)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # noqa: E402

from parex.config import model_preset  # noqa: E402
from parex.model import transformer as gpt  # noqa: E402

DEVICES = 8


def blocks(cfg, layers: int, mesh):
    """`layers` of cfg's blocks, one copy per device (a leading device axis)."""
    cfg = cfg.replace(layers=layers)
    tree = jax.jit(lambda key: gpt.init_params(cfg, key)["blocks"])(jax.random.key(0))
    tree = jax.tree.map(lambda w: jnp.broadcast_to(w, (DEVICES,) + w.shape), tree)
    return jax.device_put(tree, NamedSharding(mesh, P("d"))), cfg


def gradient(cfg):
    return jax.grad(lambda b, x: jnp.mean(gpt.run_blocks(x, b, cfg) ** 2), argnums=(0, 1))


def deep(cfg, layers: int, mesh, x):
    """The gradient of `layers` stacked blocks on each device's sequences."""
    params, cfg = blocks(cfg, layers, mesh)
    return jax.jit(jax.vmap(gradient(cfg))), (params, x)


def loop(cfg, trips: int, mesh, x):
    """`trips` iterations of one block's forward and backward, each on the last one's output."""
    params, cfg = blocks(cfg, 1, mesh)

    def per_device(b, x):
        def body(h, _):
            g_b, g_x = gradient(cfg)(b, h)
            return h + 1e-3 * g_x, g_b
        return jax.lax.scan(body, x, None, length=trips)
    return jax.jit(jax.vmap(per_device)), (params, x)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sequences", type=int, default=2, help="per device, of 128 tokens")
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    cfg = model_preset("tiny")
    mesh = Mesh(np.array(jax.devices()[:DEVICES]), ("d",))
    x = jax.device_put(jnp.full((DEVICES, args.sequences, cfg.seq_len, cfg.hidden), 0.1),
                       NamedSharding(mesh, P("d")))
    calls = {f"deep {n}": (deep(cfg, n, mesh, x), n) for n in (1, 2, 4)}
    calls |= {f"loop {n}": (loop(cfg, n, mesh, x), n) for n in (1, 4, 8)}
    for (fn, a), _ in calls.values():
        jax.block_until_ready(fn(*a))
    times = {key: [] for key in calls}
    for _ in range(args.rounds):
        for key, ((fn, a), _) in calls.items():
            start = time.perf_counter()
            jax.block_until_ready(fn(*a))
            times[key].append(time.perf_counter() - start)
    print(f"tiny's block, {args.sequences} × {cfg.seq_len} tokens per device, {DEVICES} devices; "
          f"GLIBC_TUNABLES={os.environ.get('GLIBC_TUNABLES', '(default)')}")
    for key, (_, layers) in calls.items():
        median = statistics.median(times[key])
        print(f"  {key:8s} {median * 1e3:7.1f} ms   {median / layers * 1e3:6.1f} ms per layer")


if __name__ == "__main__":
    main()
