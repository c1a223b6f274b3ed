"""The long-sequence study: per-device memory and collective bytes against sequence length for
the ways of splitting one long sequence over n devices, read from compiled steps (nothing runs).

    mode      layout            what each device holds of the activations
    single    (1 device)        everything: the reference
    tp        tensor=n          attention/MLP regions split by heads/F, LayerNorm regions all T
    tp+sp     tensor=n, sp=on   + the LayerNorm/residual regions split to T/n (Korthikanti 2022)
    ring      seq=n, cp=ring    T/n everywhere; K/V travel the ring (collective-permute)
    ulysses   seq=n, cp=ulysses T/n everywhere; all-to-all seq <-> heads around attention

Activation memory is XLA's temp buffer (the step's arguments are parameters and optimizer state,
which tp splits n ways and the seq layouts replicate). Collective bytes follow parex.measure.hlo's
convention (the whole buffer), under which an all-reduce counts once but the reduce-scatter plus
all-gather that replace it count twice; `comm_wire_bytes` is what each device sends with ring
algorithms instead, in which both cost the same. Every point is validated before compiling.
"""

from __future__ import annotations

from ..config import ModelConfig, TrainConfig
from ..layout import Layout
from ..record import KINDS, bytes_by_kind, wire_bytes
from ..measure.report import human_bytes, table
from ..validation import validate

STUDY_MODES = {
    "single": lambda n: Layout(),
    "tp": lambda n: Layout(tensor=n),
    "tp+sp": lambda n: Layout(tensor=n, sp=True),
    "ring": lambda n: Layout(seq=n, cp="ring"),
    "ulysses": lambda n: Layout(seq=n, cp="ulysses"),
}
DEFAULT_LENGTHS = (256, 512, 1024, 2048, 4096)
COMM_COLUMNS = {kind: f"comm_{kind.replace('-', '_')}_bytes" for kind in KINDS}


def study_points(model: ModelConfig, lengths, modes, n: int, global_batch: int = 1) -> list:
    """[(mode, model with seq_len T, train, layout)], all validated (LayoutError names the fix)."""
    unknown = [m for m in modes if m not in STUDY_MODES]
    if unknown:
        raise ValueError(f"unknown study mode(s) {', '.join(unknown)}; use some of "
                         f"{', '.join(STUDY_MODES)}")
    train = TrainConfig(global_batch=global_batch)
    points = []
    for T in lengths:
        sized = model.replace(seq_len=int(T))  # GPT's position table grows with T
        for mode in modes:
            layout = STUDY_MODES[mode](n)
            validate(layout, sized, train, layout.n_devices)
            points.append((mode, sized, train, layout))
    return points


def measure_point(mode: str, model: ModelConfig, train: TrainConfig, layout: Layout,
                  devices) -> dict:
    """One row: compile the step of `layout` and read its memory and collectives."""
    from ..measure.compiled import compile_layout, compiled_stats

    step, compiled, seconds = compile_layout(model, train, layout, devices[:layout.n_devices])
    stats = compiled_stats(compiled, step)
    comm = bytes_by_kind(stats["collectives"])
    row = {"model": model.name, "seq_len": model.seq_len, "mode": mode, "layout": str(layout),
           "n_devices": layout.n_devices, "compile_time_s": seconds}
    row |= {f"memory_{k}_bytes": v for k, v in stats["memory_bytes_per_device"].items()}
    row |= {COMM_COLUMNS[k]: v for k, v in comm.items()}
    row["comm_total_bytes"] = sum(comm.values())
    row["comm_wire_bytes"] = wire_bytes(stats["collectives"])
    return row


def long_sequence_study(model: ModelConfig, lengths=DEFAULT_LENGTHS, modes=tuple(STUDY_MODES),
                        n: int = 8, global_batch: int = 1, devices=None, progress: bool = False):
    """DataFrame with one row per (sequence length, mode): memory_*_bytes per device (XLA's
    argument/output/alias/temp/total), comm_*_bytes per device per step, compile_time_s."""
    import pandas as pd
    from tqdm.auto import tqdm

    from ..executor.mesh import devices_for

    devices = devices_for(n) if devices is None else list(devices)
    points = study_points(model, lengths, modes, n, global_batch)
    rows = [measure_point(*point, devices)
            for point in tqdm(points, desc="long-sequence study", disable=not progress)]
    return pd.DataFrame(rows)


def study_table(df) -> str:
    """The CLI's table: per-device memory, its ratio to tp (sequence not split) at the same T,
    and collective bytes by kind."""
    rows = []
    for _, r in df.sort_values(["seq_len"], kind="stable").iterrows():
        base = df[(df.seq_len == r.seq_len) & (df["mode"] == "tp")]["memory_temp_bytes"]
        ratio = f"{r.memory_temp_bytes / base.iloc[0]:.2f}" if len(base) else "-"
        rows.append([r.seq_len, r["mode"], r.layout, human_bytes(r.memory_temp_bytes), ratio,
                     human_bytes(r.memory_total_bytes)]
                    + [human_bytes(r[c]) for c in COMM_COLUMNS.values()]
                    + [human_bytes(r.comm_total_bytes), human_bytes(r.comm_wire_bytes)])
    header = ["T", "mode", "layout", "temp/dev", "temp÷tp", "total/dev", "all-reduce",
              "all-gather", "reduce-scatter", "permute", "all-to-all", "comm/dev", "sent/dev"]
    return table(rows, header)
