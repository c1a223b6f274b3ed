"""Layouts measured side by side (parex.measure.rotation): their steps alternate, each layout
runs exactly as it runs alone."""

import jax
import jax.numpy as jnp
import pytest

from parex.config import TrainConfig, model_preset
from parex.errors import InputError
from parex.layout import Layout, LayoutError
from parex.measure import measure
from parex.measure import compiled as compiled_module
from parex.measure.rotation import measure_rotation

TINY = model_preset("tiny")
TRAIN = TrainConfig(global_batch=8, seq_len=32, steps=3)


def test_each_layout_in_the_rotation_runs_as_it_runs_alone():
    """The second layout, stepped after the first's step every round, has the losses and
    compile statistics parex.measure gives it alone; every layout one step per round; a
    reference timed in the same rotation."""
    layouts = [Layout.parse("data=2"), Layout.parse("tensor=2")]  # two devices: quick compiles
    reference = (jax.jit(lambda x: x @ x), (jnp.ones((64, 64)),))
    together, (reference_s,) = measure_rotation(TINY, TRAIN, layouts, references=(reference,))
    assert [m.layout for m in together] == [str(layout) for layout in layouts]
    alone = measure(TINY, TRAIN, layouts[1])  # the second, stepped after another program
    assert together[1].losses == alone.losses
    assert together[1].flops_per_device == alone.flops_per_device
    assert together[1].collectives == alone.collectives
    for side_by_side in together:
        times = side_by_side.step_time_s
        assert len(side_by_side.losses) == TRAIN.steps
        assert 0 < times["min"] <= times["median"] <= times["max"]
    assert reference_s > 0


def test_a_diloco_layout_is_refused_before_compiling():
    with pytest.raises(InputError, match="DiLoCo"):
        measure_rotation(TINY, TRAIN, [Layout.parse("data=8"),
                                       Layout.parse("data=4,replica=2")])


def test_layouts_that_fit_alone_but_not_together_are_refused(monkeypatch):
    """Every layout's state stays resident until the last round, so their sum must fit."""
    layouts = [Layout.parse("data=2"), Layout.parse("tensor=2")]
    sizes = [compiled_module.state_bytes_on_host(TINY, layout) for layout in layouts]
    # room (0.8 of the host's memory) for the larger alone, not for both
    monkeypatch.setattr(compiled_module, "_host_memory_bytes",
                        lambda: (max(sizes) + 0.5 * min(sizes)) / 0.8)
    for layout in layouts:
        compiled_module.check_fits_host(TINY, layout, None)
    with pytest.raises(LayoutError, match="2 layouts held at once"):
        measure_rotation(TINY, TRAIN, layouts)


@pytest.mark.slow  # a mixture's compiles, twice
def test_a_mixture_in_the_rotation_reports_its_router_as_alone():
    tiny_moe = model_preset("tiny-moe")
    train = TrainConfig(global_batch=16, steps=3)
    layout = Layout.parse("data=2,expert=4")
    (together,), _ = measure_rotation(tiny_moe, train, [layout])
    alone = measure(tiny_moe, train, layout)
    assert together.losses == alone.losses
    assert together.moe == alone.moe and len(together.moe["expert_load"]) == train.steps
