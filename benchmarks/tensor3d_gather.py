"""Benchmark: the 3D layouts' residual gather over X, laid out once against gathered in place.

    python benchmarks/tensor3d_gather.py [--model tiny] [--rounds 9] [--layouts tensor=4x2x1 ...]

Leaving each linear pair, AxoNN's 3D program all-gathers the residual's D over X
(parex.parallel.tensor3d.gather_hidden; its backward gathers dX the same way). Gathered along
D in place (`all_gather(y, X, axis=-1, tiled=True)`), XLA:CPU lays the result out D-major and
every loop fusion that reads it transposes it again; parex gathers along a new leading axis and
lays D out once. Each layout is compiled both ways in one process and their steps alternate,
round by round; prints the median step time of each and their ratio (in place / laid out).
"""

from __future__ import annotations

import argparse
import statistics

LAYOUTS = ("tensor=4x2x1", "tensor=2x4x1", "tensor=2x2x2", "tensor=2x1x4")


def in_place(y):
    """The gather as first written: along D itself."""
    from parex.parallel import tensor3d

    return tensor3d.gather_whole(y, tensor3d.X, axis=y.ndim - 1, tiled=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--layouts", nargs="+", default=list(LAYOUTS))
    args = parser.parse_args(argv)

    from parex.executor.mesh import emulate_devices

    emulate_devices(8)
    from parex.config import TrainConfig, model_preset
    from parex.layout import Layout
    from parex.parallel import tensor3d
    from parex.studies.pipeline import _timer

    model, train = model_preset(args.model), TrainConfig(global_batch=16)
    laid_out = tensor3d.gather_hidden
    print(f"{args.model}, global batch 16, 8 emulated devices, {args.rounds} rounds: median "
          f"step ms")
    print(f"{'layout':22s} {'laid out':>9s} {'in place':>9s} {'ratio':>6s}")
    for text in args.layouts:
        runs = {}
        for name, gather in (("laid out", laid_out), ("in place", in_place)):
            tensor3d.gather_hidden = gather  # read when the step is traced
            try:
                runs[name] = _timer(model, train, Layout.parse(text), None)
            finally:
                tensor3d.gather_hidden = laid_out
        times = {name: [] for name in runs}
        for r in range(args.rounds):
            for name in (list(runs) if r % 2 == 0 else list(runs)[::-1]):
                times[name].append(runs[name]())
        median = {name: statistics.median(t) for name, t in times.items()}
        print(f"{text:22s} {median['laid out'] * 1e3:9.1f} {median['in place'] * 1e3:9.1f} "
              f"{median['in place'] / median['laid out']:6.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
