"""The vectorised path: the same numbers as predict(), for many layouts at once."""

import numpy as np
import pytest

from parex.config import TrainConfig, model_preset
from parex.hardware import Cluster, load_chip
from parex.layout import Layout, LayoutError
from parex.predict import predict, predict_batch
from parex.predict.shapes import Grid

LAYOUTS = [Layout(data=64), Layout(data=8, zero=1), Layout(fsdp=64), Layout(data=8, tensor=8),
           Layout(data=4, tensor=8, sp=True, microbatches=2),
           Layout(data=2, tensor=8, stage=4, schedule="1f1b", microbatches=8),
           Layout(data=2, tensor=4, stage=4, schedule="interleaved", virtual_stages=2,
                  microbatches=8),
           Layout(data=16, seq=4, cp="ring"), Layout(data=16, seq=4, cp="ulysses")]


@pytest.mark.parametrize("hardware, convention", [("h100-sxm", "gpu"), ("cpu-local", "xla-cpu")])
def test_batch_equals_one_by_one(hardware, convention):
    model = model_preset("llama2-7b").replace(dtype="bfloat16", layers=32)
    train = TrainConfig(global_batch=64, seq_len=2048, remat="selective")
    batch = predict_batch(model, train, LAYOUTS, hardware, convention=convention)
    for i, layout in enumerate(LAYOUTS):
        one = predict(model, train, layout, hardware, convention=convention)
        row = one.to_row()
        for key in ("step_time_s", "memory_total_bytes", "memory_argument_bytes",
                    "flops_per_device", "comm_all_reduce_bytes", "comm_all_gather_bytes",
                    "comm_collective_permute_bytes", "mfu"):
            assert batch[key][i] == pytest.approx(row[key]), (layout, key)
        assert bool(batch["fits"][i]) == one.fits


def test_grid_from_columns_is_the_grid_of_the_layouts():
    model, train = model_preset("small"), TrainConfig(global_batch=64)
    cols = Grid.from_columns(train, model, data=[8, 4, 2], tensor=[1, 2, 4], zero=[1, 0, 0],
                             sp=[0, 0, 1], cp="none", schedule="gpipe")
    layouts = [Layout(data=8, zero=1), Layout(data=4, tensor=2), Layout(data=2, tensor=4, sp=True)]
    objs = Grid.from_layouts(layouts, train, model)
    a, b = predict_batch(model, train, cols, "a100-80gb"), predict_batch(model, train, objs,
                                                                         "a100-80gb")
    for key in a:
        np.testing.assert_allclose(np.asarray(a[key], float), np.asarray(b[key], float))


def test_impossible_layout_gets_the_validation_error():
    model, train = model_preset("tiny"), TrainConfig(global_batch=16)
    with pytest.raises(LayoutError, match="heads=8 is not divisible by tensor=3"):
        predict(model, train, Layout(tensor=3), "a100-80gb")
    one_node = Cluster(load_chip("a100-80gb"), nodes=1)
    with pytest.raises(LayoutError, match="use 2 nodes of 8"):
        predict(model, train, Layout(data=16), one_node)
    assert predict(model, train, Layout(data=16), "a100-80gb").hardware == "a100-80gb×2"


def _verdicts_match(model, train, layouts) -> dict:
    from parex.validation.checks import check_layout, check_valid

    out = predict_batch(model, train, layouts, "a100-80gb")
    for i, layout in enumerate(layouts):
        verdicts = []
        for check in (check_valid, check_layout):
            try:
                check(layout, model, train, layout.n_devices)
                verdicts.append(True)
            except LayoutError:
                verdicts.append(False)
        assert (out["valid"][i], out["executable"][i]) == tuple(verdicts), layout
        assert np.isnan(out["step_time_s"][i]) != verdicts[0]
    return out


def test_batch_flags_rows_validation_would_reject():
    model, train = model_preset("tiny"), TrainConfig(global_batch=16, remat="none")  # resolved
    layouts = [Layout(data=8), Layout(tensor=3), Layout(data=8, microbatches=4),
               Layout(stage=2, schedule="interleaved", microbatches=2, virtual_stages=2),
               Layout(stage=2, schedule="interleaved", microbatches=3, virtual_stages=2),
               Layout(data=2, seq=4, cp="ring"), Layout(seq=4),
               Layout(tensor=2, sp=True, stage=2, schedule="gpipe"),  # SP inside stages: runs
               Layout(data=2, seq=2, cp="ring", stage=2, schedule="gpipe")]  # ring: runs
    out = _verdicts_match(model, train, layouts)
    assert out["valid"][-2] and out["executable"][-2]
    assert out["valid"][-1] and out["executable"][-1]
    # 6 layers stored evenly over 4 stages: a real program that parex's executor cannot run
    six = _verdicts_match(model.replace(layers=6), train,
                          [Layout(data=2, stage=4, microbatches=4, layers_per_stage=(2, 2, 1, 1), schedule="gpipe")])
    assert six["valid"][0] and not six["executable"][0]
