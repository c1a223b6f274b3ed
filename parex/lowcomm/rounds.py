"""DiLoCo's bookkeeping as plain data: which layout each replica runs, which parameters form each
streaming fragment, and after which inner steps each fragment synchronises. Pure Python, no JAX
arrays: the executor (diloco.py), the measurement and the predictor all read these.

Schedule (Streaming DiLoCo, Douillard et al. 2025): with H inner steps and P fragments, fragment f
synchronises after inner steps t = (f + 1)·H/P, (f + 1)·H/P + H, ... so some fragment syncs every
H/P steps and every fragment every H steps. P = 1 is plain DiLoCo (everything after t = H, 2H, ...).

Fragments are strided over the layers (Streaming DiLoCo's "strided" pattern): fragment f holds the
blocks l with l mod P = f, the token and position embeddings join fragment 0 and the final norm and
unembedding the last fragment. Strided fragments keep a fragment's share of every pipeline stage
equal: with the layers split contiguously over `stage`, local layer i of every stage is global
layer s·L/p + i, so `blocks[f::P]` selects the same local rows on each stage (needs P | L/p).
"""

from __future__ import annotations

HEAD_OF_FIRST = ("tokens", "positions")  # non-block parameters synced with fragment 0
EXCHANGE_BYTES = {"f32": 4.0, "bf16": 2.0, "int8": 1.0, "int4": 0.5}  # per element, no scales


def fragment_of(path: tuple[str, ...], fragments: int) -> int | None:
    """The fragment a non-block parameter belongs to (None for the stacked blocks, which are
    split by layer)."""
    if path[0] == "blocks":
        return None
    return 0 if path[0] in HEAD_OF_FIRST else fragments - 1


def fragment_layers(layers: int, fragments: int, f: int) -> list[int]:
    """The global block indices of fragment f (strided)."""
    return list(range(f, layers, fragments))


def syncs_after(step: int, inner_steps: int, fragments: int) -> list[int]:
    """The fragments that synchronise after inner step `step` (counted from 1)."""
    period = inner_steps // fragments
    if step % period:
        return []
    return [(step // period - 1) % fragments]


def sync_plan(total_steps: int, inner_steps: int, fragments: int) -> list[tuple[int, int]]:
    """(inner step, fragment) of every synchronisation in a run of `total_steps` steps."""
    return [(t, f) for t in range(1, total_steps + 1)
            for f in syncs_after(t, inner_steps, fragments)]


def exchange_bytes_per_element(outer_dtype: str, block: int) -> float:
    """Bytes per exchanged element, the per-block float32 scale included for int8/int4."""
    scale = 4.0 / block if outer_dtype in ("int8", "int4") else 0.0
    return EXCHANGE_BYTES[outer_dtype] + scale
