"""parex: explore distributed-training parallelism in JAX, measured and predicted side by side.

    import parex
    parex.emulate_devices(8)            # first, before anything else uses JAX
    model, train = parex.model_preset("tiny"), parex.TrainConfig(steps=10)
    m = parex.measure(model, train, parex.Layout.parse("data=2,tensor=4"))
    parex.ensure_local()                # this machine's cpu-local profile, measured once
    p = parex.predict(model, train, parex.Layout.parse("data=2,tensor=4"), "cpu-local")
    parex.records_frame([m, p])         # one tidy DataFrame: measured and predicted rows

This package is the public face: the values (configs, layouts, hardware, records), measuring
and predicting, reports and number formatting. Each concept above them has one public package:
`parex.charts` (altair charts), `parex.explorer` (the Explorer and Planner widgets),
`parex.plan` (the planner), `parex.studies` (experiments on the emulated mesh),
`parex.lowcomm` (DiLoCo), `parex.hetero` (mixed clusters), `parex.interop` (Megatron-LM,
torchtitan, MaxText and Hugging Face configurations, read and written) and `parex.figures` (the gallery
and the papers' tables). Charts and widgets need the `notebook` extra; `import parex` does not load it.
"""

from .calibrate.local import ensure_local
from .config import ModelConfig, TrainConfig, model_preset, preset_names
from .executor.data import Batches
from .errors import InputError
from .hardware import Link, known_hardware, load_chip, load_cluster
from .interop import (from_hf_config, from_maxtext, from_megatron, from_torchtitan, to_hf_config,
                      to_maxtext, to_megatron, to_torchtitan)
from .layout import LAYOUT_PRESETS, Axis, Layout, LayoutError
from .measure import relative_error
from .measure.report import comparison_table, measurement_report
from .executor.mesh import emulate_devices, make_mesh
from .model.transformer import init_params
from .parallel.schedules import make_schedule
from .predict import predict_batch, shared_fields
from .predict.explain import breakdown as explain, explain_text
from .predict.scaling import scaling_curve
from .record import Measurement, Prediction, records_frame
from .setting import Setting, resolve
from .executor.step import TrainStep, reference_loss_and_grads
from .sweep import load as load_sweep
from .units import format_bytes, format_count, format_frame, format_seconds
from .validation import validate

# last: importing the subpackages parex.measure and parex.predict above binds their names to
# them; the front door's two functions take those names (parex.entry)
from .entry import measure, predict  # noqa: E402

__version__ = "0.1.0"

__all__ = ["Axis", "Batches", "InputError", "LAYOUT_PRESETS", "Layout", "LayoutError", "Link",
           "Measurement", "ModelConfig", "Prediction", "TrainConfig", "TrainStep",
           "comparison_table", "emulate_devices", "ensure_local", "explain", "explain_text",
           "format_bytes", "format_count", "format_frame",
           "format_seconds", "from_hf_config", "from_maxtext", "from_megatron", "from_torchtitan",
           "init_params", "known_hardware", "load_chip", "load_cluster",
           "load_sweep", "make_mesh", "make_schedule", "measure", "measurement_report",
           "model_preset", "predict", "predict_batch", "preset_names", "records_frame",
           "reference_loss_and_grads", "relative_error", "resolve", "scaling_curve", "Setting",
           "shared_fields", "to_hf_config", "to_maxtext", "to_megatron", "to_torchtitan",
           "validate"]
