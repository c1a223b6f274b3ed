"""The Explorer's X, Y and Z controls (AxoNN's tensor=XxYxZ): what they show is predict()'s,
and the fit guide can describe a 3D layout."""

import pytest

from parex.config import TrainConfig, model_preset
from parex.explorer.guide import controls_of
from parex.explorer.state import layout_of
from parex.explorer.widget import Explorer
from parex.layout import Layout
from parex.predict import predict


@pytest.mark.slow
def test_x_y_z_controls_show_the_3d_layouts_prediction():
    explorer = Explorer(model="tiny", n_devices=8, global_batch=8, steps=2)
    explorer.set(tensor=2, tensor_y=2, tensor_z=2)
    layout = layout_of(explorer.values)
    assert layout == Layout.parse("tensor=2x2x2")
    assert explorer.prediction.layout == "tensor=2x2x2"
    want = predict(model_preset("tiny"), TrainConfig(global_batch=8, steps=2, remat="none"),
                   layout, "cpu-local")
    assert explorer.prediction.comm_bytes_per_device == pytest.approx(
        want.comm_bytes_per_device)
    explorer.set(tensor_y=1, tensor_z=1, tensor=4)  # both at 1: Megatron's tensor=4
    assert explorer.prediction.layout == "data=2,tensor=4"
    explorer.set(tensor=2, tensor_y=2, stage=2, microbatches=2)  # 3D inside pipeline stages
    layout = layout_of(explorer.values)
    # the schedule control shows the one a pipeline resolves to here (GPipe on the emulated mesh)
    assert layout == Layout.parse("tensor=2x2x1,stage=2,microbatches=2,schedule=gpipe")
    want = predict(model_preset("tiny"), TrainConfig(global_batch=8, steps=2, remat="none"),
                   layout, "cpu-local")
    assert explorer.prediction.layout == str(layout)
    assert explorer.prediction.comm_bytes_per_device == pytest.approx(
        want.comm_bytes_per_device)
    assert {"t3d-gather-x", "pipeline"} <= {c["name"] for c in explorer.prediction.collectives}


def test_the_fit_guide_sets_y_and_z_for_a_3d_layout():
    values = {"devices": 8, "tensor": 8, "tensor_y": 1, "tensor_z": 1, "fsdp": 1, "seq": 1, "stage": 1,
              "zero": 0, "sp": False, "cp": "none", "microbatches": None, "schedule": "gpipe",
              "virtual": 1, "remat": "none"}
    changes = controls_of(values, Layout.parse("tensor=2x2x2"), "none")
    assert changes["tensor"] == 2 and changes["tensor_y"] == 2 and changes["tensor_z"] == 2
