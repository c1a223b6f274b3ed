"""Low-communication training (DiLoCo, arXiv:2311.08105; streaming DiLoCo, arXiv:2501.18512;
DiLoCoX's one-step-delay overlap): R replicas of an inner layout on the outermost `replica` mesh
axis, each taking H inner steps between outer synchronisations.

    rounds.py     which fragments sync after which step, bytes per exchanged element
    exchange.py   the replicas' mean, in f32, bf16 or block-quantised int8/int4
    diloco.py     the executor: inner steps, the outer Nesterov step, streaming fragments
    measure.py    a DiLoCo layout measured (parex.measure dispatches here)
    predict.py    one replica's inner step plus the exchange over a WAN link
    studies.py    loss against bytes exchanged: sync DP beside DiLoCo on the same tokens
"""
