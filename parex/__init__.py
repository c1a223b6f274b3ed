"""parex: explore distributed-training parallelism in JAX, measured and predicted side by side.

    import parex
    parex.emulate_devices(8)            # first, before anything else uses JAX
    model, train = parex.model_preset("tiny"), parex.TrainConfig(steps=10)
    m = parex.measure(model, train, parex.Layout.parse("data=2,tensor=4"))
    p = parex.predict(model, train, parex.Layout.parse("data=2,tensor=4"), "cpu-local")
    parex.records_frame([m, p])         # one tidy DataFrame: measured and predicted rows

Charts live in `parex.charts`, the Explorer and Planner widgets in `parex.explorer` (both need
the `notebook` extra).
"""

from .config import ModelConfig, TrainConfig, model_preset, preset_names
from .layout import LAYOUT_PRESETS, Axis, Layout, LayoutError
from .measure import measure, relative_error
from .mesh import emulate_devices, make_mesh
from .parallel.schedules import make_schedule
from .predict import predict, predict_batch
from .record import Measurement, Prediction, records_frame
from .step import TrainStep, reference_loss_and_grads
from .validation import validate

__version__ = "0.1.0"

__all__ = ["Axis", "LAYOUT_PRESETS", "Layout", "LayoutError", "Measurement", "ModelConfig",
           "Prediction", "TrainConfig", "TrainStep", "emulate_devices", "make_mesh",
           "make_schedule", "measure", "model_preset", "predict", "predict_batch", "preset_names",
           "records_frame", "reference_loss_and_grads", "relative_error", "validate"]
