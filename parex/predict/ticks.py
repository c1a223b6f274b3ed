"""A pipeline's step on the calibrated CPU mesh (`cpu-local`), tick by tick, as parex's executor
runs it (parallel/pipeline.py): one scan over the schedule table's ticks; each tick every stage
runs its op (or idles), writes what it produced into the stash slots, and sends twice
(ppermute), so no stage starts the next tick before every stage has finished this one.

    compute = Σ_ticks max(d·S_t, P·M_t) · t_F / n  +  m · head / p
    ticks   = n_ticks · (tick_s + 2 · copied bytes / bandwidth)
    sends   = 2 · n_ticks · β · bytes     (the collective-permute fit without its α)

S_t, M_t: the summed and the largest cost of tick t's ops over the stages in units of t_F, the
forward of one chunk's layers for one microbatch (schedule_stats.lockstep_columns); d = n/p
devices per stage; P = the devices that really run at once on the cores (`parallel_devices`):
a tick's busy devices share the cores, so it lasts its work over the cores, or its slowest op
when fewer busy devices than P are left (then idle cores are lost: the emulated bubble). With
P ≤ d this is the busy time alone. The head (final norm, unembedding, loss) runs on the last
stage only: its m microbatches are 1/p of the mesh's work.

tick_s is measured (`parex calibrate`, calibrate_pipeline.py: the executor on a probe model too
small for arithmetic or bytes to count): the switch, the loop and every device's rendezvous at
the sends, which the α of the collective-permute fit would otherwise stand for. The bytes a tick
copies around its switch are the memory model's (predict.stash.window_bytes), each copy moving
them in and out at the measured copy bandwidth.
"""

from __future__ import annotations

import numpy as np

from .alpha_beta import calibrated_seconds
from .flops import passes_per_layer
from .schedule_stats import lockstep_columns
from .shapes import Grid

def lockstep_compute(grid: Grid, layers_per_micro, head_per_micro, remat: str, parallel: float,
                     unit_costs) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(seconds of a pipelined step's arithmetic on the emulated mesh, the same without the
    lockstep: its busy time, the table's ticks; module docstring). `layers_per_micro`,
    `head_per_micro`: one stage's layers' and the head's seconds per microbatch, all devices
    busy; `unit_costs`: (t_B, t_W) in units of t_F (time.unit_costs)."""
    per_stage = grid.n_devices / grid.stage
    t_b, t_w = unit_costs
    t_f = layers_per_micro / grid.virtual_stages / passes_per_layer(grid, remat)
    head = grid.microbatches * head_per_micro / grid.stage
    ticks, busy, lock = lockstep_columns(grid, t_b, t_w, parallel / per_stage)
    piped = grid.stage > 1
    lock, busy = (np.where(piped, per_stage / grid.n_devices * s * t_f + head, 0.0)
                  for s in (lock, busy))
    return lock, busy, ticks


def tick_seconds(grid: Grid, ticks, cal, copied, bandwidth: float, hops
                 ) -> tuple[np.ndarray, np.ndarray]:
    """(seconds per step of the `ticks` of the executor beyond their ops' arithmetic: the fixed cost
    of each tick and its copies, `copied` bytes per tick; of its two sends' bytes). `hops`: the
    pipeline term's collective-permute seconds, α + β·S per send at its in-step cost
    (alpha_beta.term_seconds), of which the α is replaced by tick_s."""
    alpha = cal.collective_in_step * calibrated_seconds("collective-permute", grid.stage,
                                                        np.zeros(len(grid)), cal)  # as priced
    sends = np.maximum(hops - 2 * ticks * alpha, 0.0)
    per_tick = cal.pipeline_tick_s + 2 * copied / bandwidth
    piped = grid.stage > 1
    return np.where(piped, ticks * per_tick, 0.0), np.where(piped, sends, 0.0)


__all__ = ["lockstep_compute", "tick_seconds"]
