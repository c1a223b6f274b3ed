"""The front door: `measure` and `predict` for every layout, DiLoCo's included.

    parex.measure(model, train, layout)               what XLA did on this machine's mesh
    parex.predict(model, train, layout, hardware)     what the analytic model says

DiLoCo's replicas (parex.lowcomm) are built on the synchronous engines (parex.measure,
parex.predict), which therefore cannot dispatch to them; this module, above all three, does.
Both resolve what they are given once (parex.setting) before any engine runs.
"""

from __future__ import annotations

from .config import ModelConfig, TrainConfig
from .layout import Layout
from .record import Measurement, Prediction
from .setting import resolve


def measure(model: ModelConfig, train: TrainConfig, layout: Layout, *, devices=None,
            data: str = "corpus", warmup: int = 1, progress: bool = False,
            checkpoint=None) -> Measurement:
    """Compile and run `train.steps` steps of `layout` on this machine's devices (the first
    `warmup` not timed): parex.measure.measure, or DiLoCo's replicas and their outer
    synchronisations (parex.lowcomm.measure). `checkpoint`: a CheckpointPlan
    (parex.executor.checkpoint) to save and resume the run."""
    options = {"devices": devices, "data": data, "warmup": warmup, "progress": progress}
    if layout.diloco:
        from .lowcomm.measure import measure_diloco

        return measure_diloco(model, train, layout, checkpoint=checkpoint, **options)
    from .measure import measure as measure_synchronous

    return measure_synchronous(model, train, layout, checkpoint=checkpoint, **options)


def predict(model: ModelConfig, train: TrainConfig, layout: Layout, hardware, *,
            convention=None, recipe=None, dtype: str | None = None, wan=None,
            expert_imbalance: float | None = None, stack: str | None = None,
            overlaps=None) -> Prediction:
    """Predicted step time, memory, FLOPs and communication of one layout on `hardware` (a
    profile name, a Chip or a Cluster): parex.predict.predict, or for a DiLoCo layout one
    replica's inner step plus the outer exchange over `wan` (a hardware.Link, default 1 Gb/s:
    parex.lowcomm.predict). What is not given takes the profile's defaults (parex.setting);
    `stack` and `overlaps` name the communication overlaps priced (parex.stacks)."""
    setting = resolve(model, train, layout, hardware, dtype=dtype, recipe=recipe,
                      convention=convention, expert_imbalance=expert_imbalance, stack=stack,
                      overlaps=overlaps)
    if layout.diloco:
        from .lowcomm.predict import predict_diloco

        return predict_diloco(setting, wan)
    from .predict import predict_setting

    return predict_setting(setting)


__all__ = ["measure", "predict"]
