"""The papers' tables read off the predictor (fast, nothing compiles).

    zero-table1         ZeRO's model-state memory per device, 3 models × N_d × stage, predict()
    korthikanti-table2  Korthikanti et al.'s activation bytes per layer, Table 2's closed forms
                        evaluated for the paper's four models, against predict(), which
                        computes them by the same formulas: a wiring check
    megatron-table1     Megatron-LM's TFLOP/s per GPU, each row predicted with the step
                        efficiency fitted on the other nine (leave-one-out)
"""

from __future__ import annotations

import ast
import csv
import operator

from ..predict.references import REFERENCE_DIR, read_reference
from .core import Figure, Row, Tolerance, figure


def charts():
    """The chart helpers (altair, the notebook extra), imported only when a chart is drawn."""
    from . import charts as module

    return module


def printed_half_unit(text: str) -> float:
    """Half a unit in the last digit the paper printed: "0.12" -> 0.005, "4187" -> 0.5."""
    decimals = len(text.split(".")[1]) if "." in text else 0
    return 0.5 * 10.0 ** -decimals


def _raw_column(name: str, column: str) -> list[str]:
    """A reference table's column as printed in the file (to know the paper's rounding)."""
    lines = [line for line in (REFERENCE_DIR / f"{name}.csv").read_text().splitlines()
             if line and not line.startswith("#")]
    return [row[column].strip() for row in csv.DictReader(lines)]


# --- ZeRO, Table 1 ------------------------------------------------------------------------------

ZERO_STAGES = {1: "P_os", 2: "P_os+g", 3: "P_os+g+p"}


@figure("zero-table1", title="ZeRO: model-state memory per device (stages × N_d)",
        source="Rajbhandari et al. 2019, ZeRO (arXiv:1910.02054), Table 1",
        tolerance=Tolerance(0.99, 1.01, "within 1 %, or within the paper's printed rounding"),
        evidence="analysis")
def zero_table1() -> Figure:
    from ..predict.published import zero_table1 as table

    df = table()
    printed = _raw_column("zero_table1", "gb_per_device")
    rows = []
    for r, text in zip(df.itertuples(), printed):
        slack = max(0.01, printed_half_unit(text) / r.gb_per_device)
        tol = Tolerance(1 - slack, 1 + slack, "1 % or the printed rounding")
        # ZeRO-3's share is 16Ψ/N_d: what parex's prediction adds to it, stated on every
        # ZeRO-3 row (the ideal program's flat buffers split every parameter; their padding to
        # a multiple of N_d, under N_d elements, is not modelled)
        share = 16 * r.params / r.n_d
        note = f"{r.parex_gb * 1e9 / share - 1:+.2%} over 16Ψ/N_d" if r.stage == 3 else ""
        rows.append(Row(f"{r.model} · N_d={r.n_d} · {ZERO_STAGES[r.stage]} (GB)",
                        r.gb_per_device, r.parex_gb, "predicted", tol, note=note))
    df["stage_name"] = df.stage.map(ZERO_STAGES)
    chart = lambda: charts().lines_vs_points(
        df, x="n_d", paper="gb_per_device", parex="parex_gb", series="stage_name",
        facet="model", x_title="data-parallel devices N_d", y_title="GB per device",
        log_x=True, log_y=True)
    return Figure(rows, chart, ["parex: params + grads + optimizer of predict() with the mixed "
                                "recipe (2 + 2 + 12 bytes per parameter), per parameter × Ψ",
                                "the ideal program (an A100 prediction) partitions every "
                                "parameter, biases and norms too, as ZeRO's flat buffers do; "
                                "parex's own compiled step splits the norms and D-sized biases "
                                "along D and keeps GPT's QKV and MLP-input biases whole, 7·D "
                                "per layer (docs/layouts.md)"])


# --- Korthikanti et al., Table 2 ---------------------------------------------------------------

_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
        ast.Div: operator.truediv}


def evaluate_formula(text: str, **names: float) -> float:
    """A reference table's arithmetic formula (+ − × ÷, numbers, the given names) evaluated."""
    def walk(node):
        if isinstance(node, ast.Expression):
            return walk(node.body)
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](walk(node.left), walk(node.right))
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
            return float(node.value)
        if isinstance(node, ast.Name) and node.id in names:
            return float(names[node.id])
        raise ValueError(f"formula {text!r}: only + - * / of numbers and "
                         f"{', '.join(names)} are allowed")
    return walk(ast.parse(text, mode="eval"))


# A wiring check: predict()'s activation model is Table 2's closed forms, so agreement shows the
# formulas are wired into predict() for every configuration, not that parex reproduces the paper
# (the measured ratios are figure korthikanti-measured).
@figure("korthikanti-table2",
        title="Korthikanti et al.: activation memory per layer (wiring check: Table 2's formulas "
              "in predict())",
        source="Korthikanti et al. 2022 (arXiv:2205.05198), Table 2, models of Table 3",
        tolerance=Tolerance(0.999, 1.001, "the closed form, to rounding error"),
        evidence="wiring")
def korthikanti_table2() -> Figure:
    from ..predict.published import CONFIGURATIONS, _gpt, predicted_layer_bytes

    formulas = read_reference("korthikanti_activations").set_index("configuration")["formula"]
    rows, points = [], []
    for m in read_reference("korthikanti_models").itertuples():
        model = _gpt(f"korthikanti-{m.model.lower()}", m.layers, m.hidden, m.heads)
        for name, t, sp, remat in CONFIGURATIONS:
            paper = evaluate_formula(formulas[name], s=model.seq_len, b=1, h=m.hidden,
                                     a=m.heads, t=t)
            ours = predicted_layer_bytes(model, t, sp, remat)
            rows.append(Row(f"{m.model} · {name} (bytes/layer)", paper, ours, "predicted"))
            points.append({"model": m.model, "configuration": name, "paper": paper,
                           "parex": ours})
    chart = lambda: charts().points_vs_ticks(points, category="configuration", facet="model",
                                 y_title="activation bytes per layer (s=2048, b=1, t=8)")
    return Figure(rows, chart, ["parex: predict()'s activation memory per layer, mixed recipe "
                                "(the Korthikanti path), one sequence, t = 8"])


# --- Megatron-LM, Table 1 ----------------------------------------------------------------------

@figure("megatron-table1", title="Megatron-LM: TFLOP/s per GPU, leave-one-out",
        source="Narayanan et al. 2021 (arXiv:2104.04473), Table 1",
        tolerance=Tolerance(0.915, 1.085, "the predictor's target for runs held out of the "
                                          "fit of their stack: max |error| ≤ 8.5 % (median "
                                          "≤ 3.5 %)"),
        evidence="measurement")
def megatron_table1() -> Figure:
    from ..hardware import load_chip
    from ..predict.published import megatron_flops
    from ..predict.published_runs import fit_runs, leave_one_out

    loo = leave_one_out(fit_runs(), load_chip("a100-80gb"))
    loo["parex_tflops"] = [megatron_flops(r) / (r.parex_step_s * r.gpus) / 1e12
                           for r in loo.itertuples()]
    rows = [Row(f"{r.params_b:g}B · {r.gpus} GPUs (TFLOP/s per GPU)", float(r.tflops_per_gpu),
                float(r.parex_tflops), "predicted",
                note=f"step efficiency fitted on the other 9 rows: {r.fitted_efficiency:.3f}")
            for r in loo.itertuples()]
    loo["model"] = [f"{b:g}B" for b in loo.params_b]
    chart = lambda: charts().lines_vs_points(
        loo, x="gpus", paper="tflops_per_gpu", parex="parex_tflops", series=None, facet=None,
        x_title="GPUs (model grows with them)", y_title="TFLOP/s per GPU", log_x=True)
    return Figure(rows, chart, ["parex: the paper's FLOPs per iteration over the predicted step "
                                "time, one A100 profile; each row's step efficiency fitted on "
                                "the other nine rows (published_runs.leave_one_out)"])
