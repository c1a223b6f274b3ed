"""The emulated mesh's activation traffic (predict.time.layer_traffic): sequence parallelism
splits the D-sized activations a layer keeps, not the tensors its matmuls read and write."""

import jax
import numpy as np
import pytest

from parex.config import TrainConfig, model_preset
from parex.layout import Layout
from parex.measure.compiled import compile_layout
from parex.measure.hlo import dot_shapes
from parex.predict.shapes import Grid, model_sizes
from parex.predict.time import layer_traffic

TRAIN = TrainConfig(global_batch=16)


def whole_and_split(spec: str, model) -> tuple[int, int]:
    """Dot operands and results of the compiled step that hold every token of a device's
    sequences by D (whole) and those holding T/t of them (split)."""
    layout = Layout.parse(spec, 8)
    _, compiled, _ = compile_layout(model, TRAIN, layout, jax.devices()[:8])
    tokens = TRAIN.global_batch // layout.data * model.seq_len
    tensors = [dims for dot in dot_shapes(compiled.as_text()) for dims in dot]
    return (tensors.count((tokens, model.hidden)),
            tensors.count((tokens // layout.tensor, model.hidden)))


@pytest.mark.parametrize("name", ["tiny", "tiny-llama"])
def test_the_tensors_around_sps_matmuls_stay_whole(name):
    model = model_preset(name)
    whole, split = whole_and_split("data=2,tensor=4", model)
    whole_sp, split_sp = whole_and_split("data=2,tensor=4,sp=on", model)
    assert whole > 0 and whole_sp == whole  # gathered inputs, partial outputs, their gradients
    assert split == split_sp == 0


def test_sp_saves_the_traffic_of_the_kept_activations_only():
    model = model_preset("tiny")
    sizes = model_sizes(model)
    grids = Grid.from_layouts([Layout.parse(s, 8) for s in
                               ("data=2,tensor=4", "data=2,tensor=4,sp=on")], TRAIN, model)
    off, on = layer_traffic(sizes, grids, "none", 4)
    # of a sequential block's 8 D-sized streams (memory.xla_layer_elements), the 4 around the
    # matmuls stay whole under SP: 4·D·(1 − 1/t) per token of the 8·D·(1 − 1/t) it keeps less
    per_stream = 2 * 4 * sizes.D * grids.tokens[0] * 3 * (1 - 1 / 4)  # write + read, 3 passes
    assert np.isclose(off - on, 4 * per_stream)
