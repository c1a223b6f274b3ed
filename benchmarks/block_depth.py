"""What a layer's forward and backward costs on the emulated mesh by where it runs: in a jitted
step with other layers (`deep L`: calibrate.block_step, the gradient of L stacked blocks, every
layer's activations held until its backward) or as the body of a loop (`loop N`:
calibrate.shallow_step, N iterations of one block's forward and backward, each using its
activations at once, as a local-learning tick does). Every device runs the calibration's block
(width 128) on `--sequences` sequences of 128 tokens; medians of alternated calls, per layer
(docs/results/2026-12-emulated-step.md).

    python benchmarks/block_depth.py --sequences 2
    GLIBC_TUNABLES=glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=1073741824 \\
        python benchmarks/block_depth.py          # freed blocks kept: no page faults per call
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402

jax.config.update("jax_num_cpu_devices", 8)

from parex.calibrate import run as calibrate  # noqa: E402

DEVICES = 8


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sequences", type=int, default=2, help="per device, of 128 tokens")
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    calls = {f"deep {n}": (calibrate.block_step(DEVICES, n, args.sequences), n) for n in (1, 2, 4)}
    calls |= {f"loop {n}": (calibrate.shallow_step(DEVICES, n, args.sequences), n)
              for n in (1, 4, 8)}
    medians = calibrate.timed_alternately({key: call for key, (call, _) in calls.items()},
                                          args.rounds)
    print(f"the calibration's block, {args.sequences} × 128 tokens per device, {DEVICES} "
          f"devices; GLIBC_TUNABLES={os.environ.get('GLIBC_TUNABLES', '(default)')}")
    for key, (_, layers) in calls.items():
        print(f"  {key:8s} {medians[key] * 1e3:7.1f} ms   {medians[key] / layers * 1e3:6.1f} ms "
              f"per layer")


if __name__ == "__main__":
    main()
