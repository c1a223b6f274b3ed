"""Plain-text reports of measurements, for the CLI and for logs."""

from __future__ import annotations

from ..record import Measurement


def human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1000
    return f"{n:.2f} TB"


def table(rows: list[list], header: list[str]) -> str:
    """Left-aligned first column, right-aligned others."""
    cells = [header] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = []
    for j, row in enumerate(cells):
        parts = [row[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(row[1:], widths[1:])]
        lines.append("  ".join(parts).rstrip())
        if j == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def measurement_report(m: Measurement, n_params: int) -> str:
    st = m.step_time_s
    mem = m.memory_bytes_per_device
    lines = [
        f"parex run · {m.model} ({n_params / 1e6:.2f}M parameters) · layout {m.layout} · "
        f"{m.n_devices} {m.platform} devices",
        f"loss          {m.losses[0]:.4f} → {m.losses[-1]:.4f} over {len(m.losses)} steps",
        f"step time     median {st['median'] * 1e3:.1f} ms (min {st['min'] * 1e3:.1f}, "
        f"max {st['max'] * 1e3:.1f}) · {m.tokens_per_s:,.0f} tokens/s · "
        f"compile {m.compile_time_s:.1f} s",
        f"compute       {m.matmul_flops_per_device / 1e9:.3f} GFLOP of matmuls per device per "
        f"step (every dot, loop trips included; XLA's cost analysis, which counts loop bodies "
        f"once, says {m.flops_per_device / 1e9:.3f})",
        "memory per device  " + " · ".join(f"{k} {human_bytes(v)}" for k, v in mem.items()),
        "",
    ]
    if m.collectives:
        rows = [[c.kind, ",".join(c.axes), c.group_size, c.count, human_bytes(c.bytes),
                 human_bytes(c.total_bytes)] for c in m.collectives]
        lines.append(table(rows, ["collective", "axes", "group", "count", "bytes/op", "bytes"]))
    else:
        lines.append("no collectives")
    return "\n".join(lines)


def comparison_table(measurements: list[Measurement], predictions=None) -> str:
    """One row per layout: what the demo and sweeps print. With predictions (one per measurement,
    same order), the predicted step time and memory sit beside the measured ones."""
    rows = []
    for i, m in enumerate(measurements):
        comm = m.comm_bytes_per_device
        row = [m.layout, f"{m.losses[0]:.3f}→{m.losses[-1]:.3f}",
               f"{m.step_time_s['median'] * 1e3:.1f}"]
        if predictions:
            row.append(f"{predictions[i].step_time_s['total'] * 1e3:.1f}")
        row += [f"{m.tokens_per_s:,.0f}", human_bytes(m.memory_bytes_per_device["argument"]),
                human_bytes(m.memory_bytes_per_device["total"])]
        if predictions:
            row.append(human_bytes(predictions[i].memory_bytes_per_device["total"]))
        row += [human_bytes(comm["all-reduce"]), human_bytes(comm["all-gather"]),
                human_bytes(comm["reduce-scatter"] + comm["all-to-all"]
                            + comm["collective-permute"])]
        rows.append(row)
    header = ["layout", "loss", "step ms"] + (["pred ms"] if predictions else []) + [
        "tokens/s", "state/dev", "memory/dev"] + (["pred mem"] if predictions else []) + [
        "all-reduce", "all-gather", "other comm"]
    return table(rows, header)
