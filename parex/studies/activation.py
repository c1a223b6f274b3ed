"""Korthikanti et al. 2022's activation table (their Table 2), measured on the emulated mesh.

    mode              layout       remat       the paper's bytes per layer (16-bit, dropout)
    none              one device   none        s·b·h·(34 + 5·a·s/h)
    tp                tensor=t     none        s·b·h·(10 + 24/t + 5·a·s/(h·t))
    tp+sp             tensor=t,sp  none        s·b·h/t·(34 + 5·a·s/h)
    tp+selective      tensor=t     selective   s·b·h·(10 + 24/t)
    tp+sp+selective   tensor=t,sp  selective   s·b·h·34/t
    full              tensor=t     full        2·s·b·h (the block input, replicated over t)

How activation memory is read from a compiled program: XLA's temp buffer of the compiled
loss-and-gradients program (no optimizer, so the gradients are outputs, not temporaries), at two
depths L and 2L of the same model; the difference divided by L is what one layer saves from its
forward for its backward. Everything that does not grow with depth cancels: the logits and the
loss, the embedding, the one layer being differentiated (its whole working set), XLA's scratch.
Nothing is subtracted by formula. The paper's formulas count dropout masks, which parex does not
have (it has no dropout); `korthikanti_table(..., dropout=False)` is the same accounting without
them (the masks are 1 byte per element: s·b·h after attention and after the MLP, a·s²·b after
the softmax, and the dropout's output beside the softmax's, 2·a·s²·b):
    none 32 + 2·a·s/h, tp 8 + 24/t + 2·a·s/(h·t), tp+sp (32 + 2·a·s/h)/t, tp+selective 8 + 24/t,
    tp+sp+selective 32/t, full 2 (each × s·b·h bytes, 16-bit).
Ratios to `none` do not depend on the element size, so parex's float32 measurements compare
with them directly. tp+sp+selective and full do not match the table, because parex's unsplit
layer keeps 36 h-sized and 2 score-sized values per token where the paper's keeps 16 and 1
(measured ratios: docs/results/2026-12-activation-memory.md).
"""

from __future__ import annotations

import jax

from ..config import ModelConfig, TrainConfig
from ..layout import Layout
from ..predict.memory import korthikanti_layer_bytes
from ..validation import validate

ACTIVATION_MODES = {  # mode -> (layout for t devices, remat)
    "none": (lambda t: Layout(), "none"),
    "tp": (lambda t: Layout(tensor=t), "none"),
    "tp+sp": (lambda t: Layout(tensor=t, sp=True), "none"),
    "tp+selective": (lambda t: Layout(tensor=t), "selective"),
    "tp+sp+selective": (lambda t: Layout(tensor=t, sp=True), "selective"),
    "full": (lambda t: Layout(tensor=t), "full"),
}
DEFAULT_LENGTHS = (1024, 2048, 4096)


def korthikanti_table(s, b, h, a, t, dropout: bool = True) -> dict[str, float]:
    """Bytes per layer of every mode, Korthikanti et al. 2022 Table 2 (16-bit activations);
    `dropout=False` drops the dropout masks and the dropout's output (see the module doc)."""
    table = {}
    for mode, (layout, remat) in ACTIVATION_MODES.items():
        tensor = layout(t).tensor
        table[mode] = korthikanti_layer_bytes(s, b, h, a, tensor, layout(t).sp, remat, dropout)
    return table


def _loss_and_grads_temp(model: ModelConfig, train: TrainConfig, layout: Layout, devices) -> int:
    """XLA's temp bytes per device of the compiled loss-and-gradients program (nothing runs)."""
    from ..model import transformer as gpt
    from ..executor.mesh import make_mesh
    from ..executor.step import TrainStep

    validate(layout, model, train, layout.n_devices)
    step = TrainStep(model, train, layout, make_mesh(layout, devices[:layout.n_devices]))
    params = jax.tree.map(lambda s, sh: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sh),
                          gpt.param_shapes(model), step.state_shardings("param"))
    compiled = step.jitted_loss_and_grads().lower(params, step.abstract_batch()).compile()
    return int(compiled.memory_analysis().temp_size_in_bytes)


def layer_activation_bytes(model: ModelConfig, train: TrainConfig, layout: Layout, devices,
                           depth: int = 2) -> float:
    """Bytes per device one layer keeps from its forward for its backward: the growth of the
    compiled loss-and-gradients' temp buffer from `depth` to 2·`depth` layers, per layer."""
    shallow, deep = (_loss_and_grads_temp(model.replace(layers=n), train, layout, devices)
                     for n in (depth, 2 * depth))
    return (deep - shallow) / depth


def predicted_layer_bytes(model: ModelConfig, train: TrainConfig, layout: Layout) -> float:
    """parex.predict's bytes per layer per device for the same program ("xla" formula)."""
    import jax.numpy as jnp

    from ..predict.memory import RECIPES, layer_bytes
    from ..predict.shapes import Grid, model_sizes

    grid = Grid.from_layouts([layout], train, model)
    act_bytes = jnp.dtype(model.dtype).itemsize
    return float(layer_bytes(model_sizes(model), grid, train.remat, RECIPES["parex"],
                             act_bytes)[0])


def activation_study(model: ModelConfig, lengths=DEFAULT_LENGTHS, t: int = 4,
                     global_batch: int = 1, modes=tuple(ACTIVATION_MODES), devices=None,
                     progress: bool = False):
    """DataFrame, one row per (sequence length, mode): measured bytes per layer per device
    (`layer_bytes`; `predicted_layer_bytes` beside it), its ratio to `none` at the same length
    (`ratio`; `modes` must include none), and the paper's (`paper_ratio`, and
    `paper_ratio_no_dropout` for a model without dropout, such as parex's)."""
    import pandas as pd
    from tqdm.auto import tqdm

    from ..executor.mesh import devices_for

    devices = devices_for(t) if devices is None else list(devices)
    points = [(T, mode) for T in lengths for mode in modes]
    rows = []
    for T, mode in tqdm(points, desc="activation study", disable=not progress):
        layout, remat = ACTIVATION_MODES[mode]
        train = TrainConfig(global_batch=global_batch, remat=remat)
        sized = model.replace(seq_len=int(T))
        measured = layer_activation_bytes(sized, train, layout(t), devices)
        rows.append({"model": model.name, "seq_len": int(T), "mode": mode,
                     "layout": str(layout(t)), "remat": remat, "layer_bytes": measured,
                     "predicted_layer_bytes": predicted_layer_bytes(sized, train, layout(t))})
    df = pd.DataFrame(rows)
    base = df[df["mode"] == "none"].set_index("seq_len")["layer_bytes"]
    df["ratio"] = df["layer_bytes"] / df["seq_len"].map(base)
    for column, dropout in (("paper_ratio", True), ("paper_ratio_no_dropout", False)):
        df[column] = [_paper_ratio(model, T, global_batch, t, mode, dropout)
                      for T, mode in zip(df["seq_len"], df["mode"])]
    return df


def _paper_ratio(model, T, b, t, mode, dropout) -> float:
    table = korthikanti_table(T, b, model.hidden, model.heads, t, dropout)
    return table[mode] / table["none"]
