"""The papers' tables, typed in under data/reference/, against the predictor."""

import numpy as np

from parex.predict import published


def _half_unit(value: float) -> float:
    text = f"{value:g}"
    return 0.5 * 10 ** -(len(text.split(".")[1]) if "." in text else 0)


def test_zero_table1_within_one_percent_or_the_papers_rounding():
    table = published.zero_table1()
    assert len(table) == 54  # 3 models × 6 data-parallel degrees × 3 stages
    for row in table.itertuples():
        tolerance = max(0.01 * row.gb_per_device, _half_unit(row.gb_per_device))
        assert abs(row.parex_gb - row.gb_per_device) <= tolerance, row
    assert np.median(np.abs(table.ratio - 1)) < 0.001


def test_korthikanti_activation_formulas_reproduced_exactly():
    table = published.korthikanti_table()
    assert len(table) == 6 * 4  # six formulas for the paper's four models
    assert (table.parex_bytes == table.paper_bytes).all()


def test_megatron_table1_tflops_within_15_percent_on_one_a100_profile():
    table = published.megatron_table1("a100-80gb")
    assert len(table) == 10
    assert (np.abs(table.ratio - 1) <= 0.15).all(), table[["params_b", "ratio"]]
    # the pipelined rows have a bubble, the others none
    assert ((table.parex_bubble_fraction > 0) == (table.pp > 1)).all()
