"""The heterogeneous plan as a value: its string and JSON forms, and validation with fixes."""

import pytest

from parex.cluster import load_hetero_cluster
from parex.config import model_preset
from parex.hetero.draw import plan_frame, plan_text
from parex.hetero.plan import HeteroPlan, PlanError
from parex.hetero.validate import check_plan, tensor_degrees
from parex.layout import LayoutError

TEXT = ("batch=24 micro=6: a100-pcie-80gb[0:2] t2 L12 > rtx-4090[0:4] t4 L20; "
        "batch=8 micro=2: rtx-3090[0:8] t8 L32")
CLUSTER = load_hetero_cluster("het-48")
MODEL = model_preset("llama2-7b")


def test_string_and_json_forms_round_trip():
    plan = HeteroPlan.parse(TEXT)
    assert str(plan) == TEXT and HeteroPlan.parse(str(plan)) == plan
    assert HeteroPlan.from_json(plan.to_json()) == plan
    assert plan.global_batch == 32 and plan.n_devices == 14
    first = plan.pipelines[0]
    assert (first.microbatch, first.layers, [s.tensor for s in first.stages]) == (4, 32, [2, 4])
    assert [list(r) for r in first.layer_ranges()] == [list(range(12)), list(range(12, 32))]
    stage = first.stages[1]
    assert (stage.group, list(stage.devices), stage.layers) == ("rtx-4090", [0, 1, 2, 3], 20)
    # the tensor degree may be left to the device range
    assert HeteroPlan.parse("batch=8 micro=2: rtx-3090[0:8] L32").pipelines[0].stages[0].tensor == 8
    check_plan(plan, CLUSTER, MODEL, 32)


def test_the_plan_is_drawn_with_chips_layers_and_tensor_degrees():
    plan = HeteroPlan.parse(TEXT)
    text = plan_text(plan, CLUSTER)
    assert "pipeline  1" in text and "a100-pcie[0:2] n0 t2 L12" in text
    assert "rtx-3090[0:8] n0 t8 L32" in text and "24 = 6 × 4" in text
    frame = plan_frame(plan)
    assert list(frame["end"]) == [12, 32, 32] and list(frame["tensor"]) == [2, 4, 8]


@pytest.mark.parametrize("text, message", [
    ("batch=24 micro=6: a100-pcie-80gb[0:2] L12 > rtx-4090[0:4] L18; "
     "batch=8 micro=2: rtx-3090[0:8] L32",
     "pipeline 1's stages hold 12 \\+ 18 = 30 layers but llama2-7b has 32: add 2 layers"),
    ("batch=24 micro=6: a100-pcie-80gb[0:2] L32; batch=4 micro=2: rtx-3090[0:8] L32",
     "batch shares add up to 24 \\+ 4 = 28 sequences but the global batch is 32"),
    ("batch=24 micro=5: a100-pcie-80gb[0:2] L32; batch=8 micro=2: rtx-3090[0:8] L32",
     "batch=24 does not split into micro=5 equal microbatches; use micro from 1, 2, 3, 4"),
    ("batch=24 micro=6: rtx-4090[12:20] L32; batch=8 micro=2: rtx-3090[0:8] L32",
     "placed on rtx-4090\\[12:20\\], but group rtx-4090 has 16 devices"),
    ("batch=24 micro=6: rtx-3090[0:4] L32; batch=8 micro=2: rtx-3090[2:4] L32",
     "device rtx-3090\\[2\\] is used by pipeline 1 stage 1 and by pipeline 2 stage 1"),
    ("batch=24 micro=6: h100-sxm[0:4] L32; batch=8 micro=2: rtx-3090[0:8] L32",
     "has no group 'h100-sxm'; its groups: rtx-4090, rtx-3090, a100-pcie-80gb"),
    ("batch=24 micro=6: rtx-3090[0:3] L32; batch=8 micro=2: rtx-4090[0:8] L32",
     "heads=32 is not divisible by tensor=3"),
    ("batch=24 micro=6: rtx-3090[0:4] L0 > rtx-4090[0:4] L32; "
     "batch=8 micro=2: rtx-4090[8:16] L32", "holds no layers"),
])
def test_impossible_plans_are_rejected_with_the_fix(text, message):
    with pytest.raises(PlanError, match=message):
        check_plan(HeteroPlan.parse(text), CLUSTER, MODEL, 32)


def test_malformed_strings_quote_the_form():
    assert issubclass(PlanError, LayoutError)
    with pytest.raises(PlanError, match="cannot read pipeline"):
        HeteroPlan.parse("24/6: a100[0:2] L12")
    with pytest.raises(PlanError, match="cannot read stage 'a100 L12'"):
        HeteroPlan.parse("batch=24 micro=6: a100 L12")
    with pytest.raises(PlanError, match="t4 but \\[0:2\\] is 2 devices"):
        HeteroPlan.parse("batch=24 micro=6: a100[0:2] t4 L12")
    with pytest.raises(PlanError, match="an empty plan"):
        HeteroPlan.parse(" ; ")


def test_tensor_degrees_split_every_tensor_dim():
    assert tensor_degrees(MODEL, 8) == [1, 2, 4, 8]
    assert tensor_degrees(model_preset("gpt2-small"), 8) == [1, 2, 3, 4, 6]
