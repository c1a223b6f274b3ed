"""The Explorer's expert control: a mixture of experts' layout loads with its expert axis (as
the Planner hands it over) and shows predict()'s numbers; on a dense model it is refused."""

import pytest

from parex.config import TrainConfig, model_preset
from parex.explorer.guide import controls_of
from parex.explorer.state import layout_of, resolve
from parex.explorer.widget import Explorer
from parex.layout import Layout, LayoutError
from parex.predict import predict


def test_a_moe_layout_loads_with_its_expert_axis():
    explorer = Explorer(model="tiny-moe", n_devices=8, global_batch=16, steps=2)
    explorer.load_layout("data=2,expert=4")
    assert layout_of(explorer.values) == Layout.parse("data=2,expert=4")
    want = predict(model_preset("tiny-moe"), TrainConfig(global_batch=16, steps=2, remat="none"),
                   Layout.parse("data=2,expert=4"), "cpu-local")
    assert explorer.prediction.layout == "data=2,expert=4"
    shown = explorer.prediction.comm_bytes_per_device["all-to-all"]
    assert shown > 0 and shown == pytest.approx(want.comm_bytes_per_device["all-to-all"])


def test_the_fit_guide_can_set_the_expert_axis():
    values = {"devices": 8, "tensor": 1, "tensor_y": 1, "tensor_z": 1, "fsdp": 1, "expert": 1,
              "seq": 1, "stage": 1, "zero": 0, "sp": False, "cp": "none", "microbatches": 1,
              "schedule": "gpipe", "virtual": 1, "remat": "none"}
    assert controls_of(values, Layout.parse("data=2,expert=4"), "none") == {"expert": 4}


def test_expert_on_a_dense_model_is_refused_with_the_fix():
    values = {"model": "tiny", "layers": 4, "hidden": 128, "heads": 8, "seq_len": 128,
              "dtype": "float32", "global_batch": 16, "steps": 2, "remat": "none",
              "devices": 8, "expert": 4, "fsdp": 1, "tensor": 1, "tensor_y": 1, "tensor_z": 1,
              "seq": 1, "stage": 1, "zero": 0, "sp": False, "cp": "none", "microbatches": 1,
              "schedule": "gpipe", "virtual": 1, "hardware": "cpu-local"}
    with pytest.raises(LayoutError, match="dense model"):
        resolve(values)


def test_a_folded_layout_loads_with_its_fold_and_the_guide_can_set_it():
    """MoE parallel folding (expert_tensor=1) is the 'experts over tensor too' checkbox."""
    folded = Layout.parse("expert=4,tensor=2,expert_tensor=1")
    explorer = Explorer(model="tiny-moe", n_devices=8, global_batch=16, steps=2)
    explorer.load_layout(str(folded))
    assert explorer.values["expert_fold"] is True and layout_of(explorer.values) == folded
    want = predict(model_preset("tiny-moe"), TrainConfig(global_batch=16, steps=2, remat="none"),
                   folded, "cpu-local")
    assert explorer.prediction.layout == str(folded)
    assert explorer.prediction.comm_bytes_per_device["all-to-all"] == pytest.approx(
        want.comm_bytes_per_device["all-to-all"])
    values = {"devices": 8, "tensor": 2, "tensor_y": 1, "tensor_z": 1, "fsdp": 1, "expert": 4,
              "seq": 1, "stage": 1, "zero": 0, "sp": False, "cp": "none", "microbatches": 1,
              "schedule": "gpipe", "virtual": 1, "remat": "none"}
    assert controls_of(values, folded, "none") == {"expert_fold": True}
