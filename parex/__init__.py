"""parex: explore distributed-training parallelism in JAX, measured and predicted side by side.

    import parex
    parex.emulate_devices(8)            # first, before anything else uses JAX
    model, train = parex.model_preset("tiny"), parex.TrainConfig(steps=10)
    m = parex.measure(model, train, parex.Layout.parse("data=2,tensor=4"))
"""

from .config import ModelConfig, TrainConfig, model_preset, preset_names
from .layout import LAYOUT_PRESETS, Axis, Layout, LayoutError
from .measure import measure, relative_error
from .mesh import emulate_devices, make_mesh
from .record import Measurement
from .step import TrainStep, reference_loss_and_grads

__version__ = "0.1.0"

__all__ = ["Axis", "LAYOUT_PRESETS", "Layout", "LayoutError", "Measurement", "ModelConfig",
           "TrainConfig", "TrainStep", "emulate_devices", "make_mesh", "measure", "model_preset",
           "preset_names", "reference_loss_and_grads", "relative_error"]
