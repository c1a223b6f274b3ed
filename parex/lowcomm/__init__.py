"""Low-communication training (DiLoCo, arXiv:2311.08105; streaming DiLoCo, arXiv:2501.18512;
DiLoCoX's one-step-delay overlap): R replicas of an inner layout on the outermost `replica` mesh
axis, each taking H inner steps between outer synchronisations.

    rounds.py     which fragments sync after which step, bytes per exchanged element
    exchange.py   the replicas' mean, in f32, bf16 or block-quantised int8/int4
    diloco.py     the executor: inner steps, the outer Nesterov step, streaming fragments
    measure.py    a DiLoCo layout measured (parex.measure dispatches here)
    predict.py    one replica's inner step plus the exchange over a WAN link
    studies.py    loss against bytes exchanged: sync DP beside DiLoCo on the same tokens, from
                  a sync-DP warm start (warm_up) as DiLoCo's paper ran it
    dilocox.py    DiLoCoX's headline (107B, 2 clusters, 1 Gb/s) predicted against AllReduce
    noise_scale.py  the gradient noise scale B_simple (McCandlish et al. 2018): a worker's
                  batch against it says whether its inner steps are noise-dominated

    Layout.parse("replica=4,data=2,inner_steps=50")      measured and predicted as any layout
    frame = loss_study(model, train, default_runs(8, 4, (10, 50)))   final_gaps(frame)
    start = warm_up(model, train, 100); loss_study(..., start=start, offset=100)
    dilocox_speedups()          DiLoCoX's speed-up over AllReduce per unread setting
    model_noise_scale(model, start["params"], seq_len=64).b_simple     in sequences
    wan_sweep(scale_models(), "h100-sxm", 2, [1, 10, 100], wan_link(1.0))   time over a WAN
"""

from .diloco import DiLoCo
from .dilocox import cases_frame as dilocox_speedups
from .noise_scale import model_noise_scale, noise_scale
from .predict import predict_diloco, scale_models, wan_link, wan_sweep
from .studies import StudyRun, default_runs, final_gaps, loss_study, warm_up

__all__ = ["DiLoCo", "StudyRun", "default_runs", "dilocox_speedups", "final_gaps", "loss_study",
           "model_noise_scale", "noise_scale", "predict_diloco", "scale_models", "wan_link",
           "wan_sweep", "warm_up"]
