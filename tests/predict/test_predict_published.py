"""The papers' tables (data/reference/) against the predictor's real path, and the published runs:
the committed profile's fitted constant comes from the fit set only, the sets held out of that
fit are scored as committed, and every file's fit labels are what the code fits.

Accuracy tests assert the stated targets (docs/predict.md: runs held out of their own stack's fit
median ≤ 3.5 %, max ≤ 8.5 %; runs predicted by a fit on another stack or on one run ≤ 5 % /
≤ 12 %), as strict xfails while a target is missed; regression pins, named `_pin`, hold today's
numbers, which the xfails' reasons quote."""

import dataclasses
import math

import numpy as np
import pytest

from parex.hardware import load_chip
from parex.predict import published, references
from parex.predict import published_runs as runs


def _half_unit(value: float) -> float:
    text = f"{value:g}"
    return 0.5 * 10 ** -(len(text.split(".")[1]) if "." in text else 0)


def _zero_by_hand(n, n_d, stage, psi):
    """ZeRO's 2 + 2 + 12 bytes per parameter, each kind over N_d devices from its stage on, per
    parameter × ψ, in GB: every parameter partitioned, as ZeRO's flat buffers and parex's ideal
    program hold them (norms and biases too)."""
    shard = {kind: n_d if stage >= s else 1 for kind, s in (("p", 3), ("g", 2), ("o", 1))}
    state = sum(b * n / shard[k] for k, b in (("p", 2), ("g", 2), ("o", 12)))
    return state / n * psi / 1e9


def test_zero_table1_through_predicts_state_memory():
    table = published.zero_table1()
    assert len(table) == 54  # 3 models × 6 data-parallel degrees × 3 stages
    models = references.read_reference("zero_models").set_index("model")
    for row in table.itertuples():
        m = models.loc[row.model]
        model = published._gpt(row.model, m.layers, m.hidden, m.heads)
        expected = _zero_by_hand(model.n_params, row.n_d, row.stage, row.params)
        assert row.parex_gb == pytest.approx(expected, rel=1e-9), row
        # the paper's value within 1 % or its rounding everywhere, ZeRO-3 at N_d = 1024 too
        assert abs(row.parex_gb - row.gb_per_device) <= max(0.01 * row.gb_per_device,
                                                            _half_unit(row.gb_per_device)), row


def test_korthikanti_table2_through_the_activation_model():
    """A wiring check, not a reproduction: the activation model is Table 2's formulas, so this
    shows they reach predict() for every configuration (the measured ratios are the gallery's
    korthikanti-measured figure)."""
    table = published.korthikanti_table()
    assert len(table) == 6 * 4  # six configurations for the paper's four models
    assert np.allclose(table.ratio, 1.0, rtol=1e-12, atol=0)
    # the component sum is the paper's Table 2 formula, e.g. 175B with TP + SP + selective:
    # 34·s·b·h/t bytes, 107 MB per layer
    sel = table[(table.model == "175B") & (table.configuration ==
                                           "tensor + sequence parallel + selective recompute")]
    assert sel.paper_bytes.item() == pytest.approx(34 * 2048 * 12288 / 8)


def test_fit_and_held_out_sets_are_disjoint_and_sourced():
    fit, held, added = runs.fit_runs(), runs.heldout_runs(), runs.added_runs()
    other = runs.other_runs()
    assert len(fit) == 10 and len(held) == 11 and len(added) == 6 and len(other) == 13
    names = [set(fit.run), set(held.run), set(added.run), set(other.run)]
    assert sum(map(len, names)) == len(set().union(*names))  # no run in two sets
    header = (references.REFERENCE_DIR / "heldout_runs.csv").read_text().splitlines()[:40]
    assert any("arXiv:2205.05198" in line for line in header)  # Korthikanti et al. 2022
    assert any("arXiv:2201.11990" in line for line in header)  # MT-NLG
    header = (references.REFERENCE_DIR / "added_runs.csv").read_text().splitlines()[:30]
    assert any("arXiv:2104.04473), Table 2" in line for line in header)  # Narayanan et al.
    header = (references.REFERENCE_DIR / "other_runs.csv").read_text().splitlines()[:60]
    assert any("arXiv:2402.15627" in line for line in header)  # MegaScale


def _fits_in_code() -> dict[str, set[str]]:
    """Every fit parex makes on published runs, read from the code: the committed a100-80gb
    profile's step efficiency (fit_runs, Megatron-LM Table 1; its fit is checked below), each
    stack's own (published.STACKS) and each H100 release's one-run calibration
    (published.H100_STACKS): published.FIT_SETS."""
    return {"a100-80gb": set(runs.fit_runs().run)} | {
        stack: set(names) for stack, names in published.FIT_SETS.items()}


TABLES = {runs.FIT_SET: runs.fit_runs, runs.TEST_SET: runs.heldout_runs,
          runs.ADDED_SET: runs.added_runs, runs.OTHER_SET: runs.other_runs,
          runs.H100_SET: runs.h100_runs, runs.BLACKWELL_SET: runs.blackwell_runs}
UNQUALIFIED = ("never used to fit any constant", "never fitted on")


def test_held_out_labels_are_what_the_code_fits():
    """Each run's `fitted_by` names exactly the fits that use it; each file's `# held out of:`
    fits use none of its runs; a file or docstring that says its runs were never fitted holds
    no fitted run."""
    fits = _fits_in_code()
    for name, load in TABLES.items():
        table, text = load(), (references.REFERENCE_DIR / f"{name}.csv").read_text()
        in_code = [sorted(f for f, members in fits.items() if run in members)
                   for run in table.run]
        labelled = [sorted(label.split("+")) if label != "-" else [] for label in
                    table.fitted_by]
        assert labelled == in_code, (name, list(zip(table.run, labelled, in_code)))
        held_out_of = next(line.split(":", 1)[1] for line in text.splitlines()
                           if line.startswith("# held out of:"))
        for fit in (f.strip() for f in held_out_of.split(",") if f.strip() != "-"):
            assert not fits[fit] & set(table.run), (name, fit)
        header = " ".join(" ".join(line.strip("# ") for line in text.splitlines()
                                   if line.startswith("#")).split()).lower()
        if any(in_code):
            assert not any(claim in header for claim in UNQUALIFIED), name
    # the module that describes all four sets, fitted ones among them, says which fit each set
    # is held out of, never that it was not fitted at all
    doc = " ".join(runs.__doc__.split()).lower()
    assert not any(claim in doc for claim in UNQUALIFIED)


def test_other_runs_bloom_is_the_published_setup_and_scored_as_a_test_set():
    # BigScience tr11-176B-ml: TP 4 x PP 12 x DP 8, MBS 2, GBS 2048, 105 s per iteration
    # (149 TFLOP/s per GPU by Narayanan et al.'s count, the chronicles' "150 TFLOPS")
    header = (references.REFERENCE_DIR / "other_runs.csv").read_text().splitlines()[:30]
    assert any("tr11-176B-ml" in line for line in header)
    row = runs.other_runs().iloc[0]
    assert (row.tp, row.pp, row.gpus, row.microbatch, row.global_batch) == (4, 12, 384, 2, 2048)
    flops = references.megatron_flops(row, s=2048, V=250880)
    assert flops / (row.gpus * row.step_s) == pytest.approx(149e12, rel=0.01)
    other = runs.scored(runs.other_runs(), load_chip("a100-80gb"))
    # a pin, measured with the committed profile: 1.030 (1.026 with 16-bit gradient reductions,
    # 1.041 with memory-bound kernels at the datasheet's HBM bandwidth, 1.048 before the scale
    # physics of issue 42), partly errors cancelling (several facts of the run not described);
    # within the target for another stack's run (≤ 5 %)
    assert other.ratio.iloc[0] == pytest.approx(1.030, abs=5e-4)
    assert abs(other.ratio.iloc[0] - 1) <= OTHER_STACK_TARGET["median"]


def test_added_runs_are_the_papers_tflops_over_its_flop_count():
    # Narayanan et al. 2021 Table 2: 174.6B on 1536 GPUs at 141 TFLOP/s per GPU, batch 1536
    added = runs.added_runs()
    row = added[added.run == "narayanan-t2-174.6b-1536"].iloc[0]
    flops = 96 * 1536 * 2048 * 96 * 12288 ** 2 * (1 + 2048 / (6 * 12288)
                                                  + 51200 / (16 * 96 * 12288))
    assert row.step_s == pytest.approx(flops / (1536 * 141e12))
    assert (row.tp, row.pp, row.virtual, row.microbatch) == (8, 12, 4, 1)


def test_a100_step_efficiency_is_the_fit_on_megatron_table1_alone():
    chip = load_chip("a100-80gb")
    fitted = runs.fit_step_efficiency(runs.fit_runs(), chip, tol=5e-4)
    assert chip.step_efficiency == pytest.approx(fitted, abs=1e-3)  # committed to 3 decimals
    assert "Table 1" in chip.efficiency_sources["step_efficiency"]


def test_the_fitted_efficiency_is_the_minimum_of_the_log_error():
    """Gauss-Newton lands on the least-squares minimum: one run is met exactly, and on three
    runs the summed squared log error rises on either side of the fit."""
    chip = load_chip("a100-80gb")

    def error(rows, e):
        tuned = dataclasses.replace(chip, step_efficiency=e)
        return sum(math.log(runs.predict_run(r, tuned)["total"] / r.step_s) ** 2
                   for r in rows.itertuples())

    one = runs.fit_runs().iloc[[9]]  # the 1008B on 64 stages
    e = runs.fit_step_efficiency(one, chip, tol=1e-6)
    assert error(one, e) < 1e-10
    three = runs.fit_runs().iloc[[0, 4, 9]]
    e = runs.fit_step_efficiency(three, chip, tol=1e-6)
    assert error(three, e) < min(error(three, e - 2e-3), error(three, e + 2e-3))
    # a minimum past a bound stops at the bound
    assert runs.fit_step_efficiency(one, chip, hi=0.7) == pytest.approx(0.7)
    # nothing that the efficiency moves, nothing to fit: said, not divided by 0
    with pytest.raises(ValueError, match="depends on the step efficiency"):
        runs.fit_step_efficiency(one.iloc[:0], chip)


def test_megatron_table1_in_sample_pin_and_the_bubble_only_where_pipelined():
    """In sample (the fit set scored with its own fit): a pin, not an accuracy check."""
    table = published.megatron_table1("a100-80gb")
    assert len(table) == 10
    s = runs.summary(table.ratio)
    # 1.9 % / 6.2 % with memory-bound kernels at the datasheet's HBM bandwidth
    assert (s["median"], s["max"]) == pytest.approx((0.0149, 0.0437), abs=5e-4)
    assert ((table.parex_bubble_fraction > 0) == (table.pp > 1)).all()


# runs of other papers (another stack's code) predicted by the committed profile, fitted on
# Megatron-LM 2021: the target for a fit on another stack is median ≤ 5 %, max ≤ 12 %
OTHER_STACK_TARGET = {"median": 0.05, "max": 0.12}
# Korthikanti's 1T on 64 stages: +11.6 % (+14.0 % with memory-bound kernels at the datasheet's
# HBM bandwidth, median 4.4 %, before the A100's measured 88 % of it)
HELD_OUT_MEASURED = {"median": 0.0287, "max": 0.1159}


@pytest.fixture(scope="module")
def held_out():
    # fully published runs only: a run with an unpublished setting is a bracket, never a point
    # (test_from_run's stack tests: MT-NLG 3 of 3 and Table 2 4 of 6 inside their brackets)
    held = runs.heldout_runs()
    assert set(held[held.unknown != "-"].run.str[:6]) == {"mt-nlg"}
    return runs.summary(runs.scored(held[held.unknown == "-"], load_chip("a100-80gb")).ratio)


def test_held_out_runs_with_the_committed_profile_pin(held_out):
    assert held_out["n"] == 8
    assert held_out == pytest.approx(HELD_OUT_MEASURED | {"n": 8}, abs=5e-4)


def test_held_out_runs_with_the_committed_profile_meet_the_target(held_out):
    assert held_out["median"] <= OTHER_STACK_TARGET["median"]
    assert held_out["max"] <= OTHER_STACK_TARGET["max"]


def test_table2_runs_are_brackets_over_their_interleaving():
    # Narayanan et al. 2021 Table 2 publishes no virtual-stage count: every run is a bracket
    added = runs.added_runs()
    assert (added.unknown.str.startswith("virtual=")).all() and len(added) == 6


def test_each_runs_implementation_moves_its_prediction_the_physical_way():
    # the 39.1B row of Table 1 reduces its gradients after the backward (local DDP): with the
    # overlap on, less comm is exposed; Korthikanti's async TP backward likewise hides some
    chip = load_chip("a100-80gb")
    fit, held = runs.fit_runs(), runs.heldout_runs()
    row = fit[fit.run == "megatron-39.1b"].iloc[0]
    assert row.grad_overlap == "off"
    overlapped = row.copy()
    overlapped["grad_overlap"] = "on"
    assert (runs.predict_run(overlapped, chip)["exposed_comm"]
            < runs.predict_run(row, chip)["exposed_comm"])
    k = held[held.run == "korthikanti-175b-full"].iloc[0]
    assert k.tp_overlap == "on"
    plain = k.copy()
    plain["tp_overlap"] = "off"
    assert runs.predict_run(k, chip)["total"] < runs.predict_run(plain, chip)["total"]


@pytest.mark.slow
def test_megatron_table1_leave_one_out_meets_the_target():
    """Each row held out of its own stack's fit: the target is median ≤ 3.5 %, max ≤ 8.5 %
    (measured 2.1 % / 7.4 %; 1.4 % / 6.6 % before the stragglers of issue 42)."""
    loo = runs.leave_one_out(runs.fit_runs(), load_chip("a100-80gb"))
    s = runs.summary(loo.ratio)
    assert s["median"] <= 0.035 and s["max"] <= 0.085, loo[["run", "ratio"]]
    # each fit a plausible share of the kernels' rates (0.76 before the stragglers took the
    # slowest device's wait out of it, 0.80 since)
    assert loo.fitted_efficiency.between(0.7, 0.85).all()


def test_the_component_list_sums_to_the_papers_table2_formulas():
    # two typed-in readings of the paper: Section 4.1's components, Table 2's closed forms
    formulas = references.read_reference("korthikanti_activations")
    for f in formulas.itertuples():
        t = 1 if f.configuration == "no parallelism" else 8
        for h, a in ((6144, 64), (25600, 160)):
            values = {"s": 2048, "b": 1, "h": h, "a": a, "t": t}
            table2 = eval(f.formula, {"__builtins__": {}}, values)  # typed-in arithmetic only
            parts = published.korthikanti_paper_bytes(2048, 1, h, a, t, f.sp == "on", f.remat)
            assert parts == pytest.approx(table2, rel=1e-12), f.configuration
