"""Checkpoints of a training run on the mesh, with Orbax (the JAX ecosystem's checkpointer).

    checkpoints = RunCheckpoints(CheckpointPlan(directory, every=10, resume=True), step, "corpus")
    state, start, losses = checkpoints.restore_or(step.init_state)
    ... after step i: checkpoints.after_step(i, state, losses)
    block = checkpoints.finish()             # the Measurement's `checkpoint` entry

What is saved is everything the next step reads, so that a resumed run repeats the uninterrupted
one bit for bit:
  * the sharded train state (parameters and AdamW's moments and step count, which carries the
    learning-rate schedule's position), each device writing its own shards;
  * the data position: the number of steps done. Batches are functions of (seed, step)
    (executor.data), so the seed, the source and the step count restore the data stream, and
    the run's RNG (the seed; the step draws no other random numbers);
  * the losses so far, so that a resumed run reports the whole run.
Saves are asynchronous (Orbax copies the shards to host memory, then writes them in a background
thread while training goes on) and atomic: a run killed mid-save leaves the previous checkpoint.

A run may resume on another layout: Orbax reads the saved arrays into the new layout's shardings
(resharding). Refused in one line: a different model or training config (the math would
differ), a different stored order of the pipeline's blocks, and a different state tree (the
local-learning schedule's per-stage optimizers). The executed state holds no FP8 scales (parex
trains in float32 or bfloat16), so there are none to save.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import jax

from ..errors import InputError

# TrainConfig fields that change the numbers a step computes; microbatch and the kernels are
# the layout's business and may differ on a resharded resume (the losses then agree to ~1e-6,
# not bit for bit).
SAME_MATH_FIELDS = ("global_batch", "seq_len", "steps", "learning_rate", "warmup_steps",
                    "min_lr_ratio", "weight_decay", "grad_clip", "seed")


@dataclass(frozen=True)
class CheckpointPlan:
    """Where and how often a run checkpoints."""

    directory: Path  # one run's checkpoints (Orbax's layout: one folder per saved step)
    every: int  # save after every `every` steps (and after the last)
    resume: bool = False  # continue from the latest checkpoint in `directory`, if any
    keep: int = 2  # checkpoints kept; older ones are deleted after a newer one is complete

    def __post_init__(self):
        if self.every < 1:
            raise InputError(f"--every {self.every}: checkpoint after at least 1 step")


def _manager(plan: CheckpointPlan):
    import orbax.checkpoint as ocp

    options = ocp.CheckpointManagerOptions(max_to_keep=plan.keep,
                                           enable_async_checkpointing=True)
    return ocp.CheckpointManager(Path(plan.directory).absolute(), options=options)


def bytes_per_device(state) -> int:
    """The bytes one device holds to write: its shards of every array (this process's first
    device; Orbax writes each replicated shard once, from one of the devices holding it)."""
    device = jax.local_devices()[0]
    total = 0
    for leaf in jax.tree.leaves(state):
        shards = [s for s in leaf.addressable_shards if s.device == device]
        total += sum(s.data.nbytes for s in shards)
    return total


class RunCheckpoints:
    """One run's checkpoints: restore at the start, save every `plan.every` steps."""

    def __init__(self, plan: CheckpointPlan, step, data: str, *, extra: dict | None = None):
        """Opens `plan.directory` and checks, before anything is compiled, that this run may
        write there or resume from it (refusals in one line). `step`: the TrainStep whose
        model and training options the run uses; `extra`: more of the run's identity that a
        resume must match (DiLoCo's layout)."""
        self.plan, self.step, self.data, self.extra = plan, step, data, extra or {}
        self.manager = _manager(plan)
        self.save_seconds: list[float] = []  # the blocking part of each save (device -> host)
        self.restored_from: int | None = None
        self.bytes = 0
        self.latest, self.meta = self._latest()

    # --- what identifies the run --------------------------------------------------------------
    def identity(self) -> dict:
        step = self.step
        train = {k: getattr(step.train, k) for k in SAME_MATH_FIELDS}
        order = step.block_order
        return {"model": dataclasses.asdict(step.model), "train": train, "data": self.data,
                "block_order": None if order is None else [int(i) for i in order],
                "local": step.local is not None, "extra": self.extra}

    def _check_same_run(self, saved: dict, where: str) -> None:
        mine = self.identity()
        for key, what, fix in (
                ("model", "model", "resume with the same --model and sizes"),
                ("data", "data source", "resume with the same --data"),
                ("local", "state tree (the local schedule's per-stage optimizers)",
                 "resume with a layout of the same schedule family"),
                ("block_order", "stored order of the pipeline's blocks",
                 "resume with the same stage and virtual-stage counts"),
                ("extra", "layout of replicas (DiLoCo's state is not resharded)",
                 "resume with the same --layout")):
            if saved[key] != mine[key]:
                raise InputError(f"the checkpoint in {where} has another {what} than this run; "
                                 f"{fix}, or start afresh without --resume")
        differ = [f"--{k.replace('_', '-')} {saved['train'][k]}"
                  for k in SAME_MATH_FIELDS if saved["train"][k] != mine["train"][k]]
        if differ:
            raise InputError(f"the checkpoint in {where} was written by a run with "
                             f"{', '.join(differ)}; resume with the same training options "
                             f"(they set the data and the learning-rate schedule)")

    # --- restore and save ---------------------------------------------------------------------
    def _latest(self) -> tuple[int | None, dict | None]:
        """(the step to resume from, its metadata), (None, None) when starting afresh."""
        import orbax.checkpoint as ocp

        latest, where = self.manager.latest_step(), str(self.plan.directory)
        if latest is not None and not self.plan.resume:
            raise InputError(f"{where} holds the checkpoints of an earlier run (step {latest}); "
                             f"add --resume to continue it, or give an empty directory")
        if latest is None:
            return None, None
        meta = self.manager.restore(latest, args=ocp.args.Composite(
            meta=ocp.args.JsonRestore()))["meta"]
        self._check_same_run(meta["identity"], where)
        if meta["steps_done"] >= self.step.train.steps:
            raise InputError(f"the checkpoint in {where} already holds all "
                             f"{self.step.train.steps} steps of this run; give a new "
                             f"--checkpoint directory or leave out --resume")
        return latest, meta

    def restore_or(self, init, shardings=None):
        """(state, steps done, losses so far): the latest checkpoint's if resuming and one
        exists, else (init(), 0, []). The state is read into `shardings` (default: the
        TrainStep's train state's)."""
        import orbax.checkpoint as ocp

        if self.latest is None:
            return init(), 0, []
        shardings = self.step.train_state_shardings() if shardings is None else shardings
        abstract = jax.tree.map(
            lambda s, sh: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sh),
            jax.eval_shape(init), shardings)
        try:
            state = self.manager.restore(self.latest, args=ocp.args.Composite(
                state=ocp.args.StandardRestore(abstract)))["state"]
        except (ValueError, KeyError) as err:  # shapes or tree the new layout cannot hold
            raise InputError(f"the checkpoint in {self.plan.directory} cannot be read into "
                             f"layout {self.step.layout}: {str(err).splitlines()[0]}; resume "
                             f"with the layout that wrote it ({self.meta['layout']})") from None
        self.restored_from = self.latest
        # (JSON writes a float's shortest exact form: the losses come back bit for bit)
        return state, int(self.meta["steps_done"]), list(self.meta["losses"])

    def after_step(self, i: int, state, losses: list[float]) -> None:
        """Save after step i (0-based) when i + 1 is a multiple of `every` or the last step."""
        import orbax.checkpoint as ocp

        done = i + 1
        if done % self.plan.every and done != self.step.train.steps:
            return
        meta = {"steps_done": done, "losses": list(losses), "layout": str(self.step.layout),
                "identity": self.identity()}
        start = time.perf_counter()
        self.manager.save(done, args=ocp.args.Composite(
            state=ocp.args.StandardSave(state), meta=ocp.args.JsonSave(meta)))
        self.save_seconds.append(time.perf_counter() - start)
        self.bytes = bytes_per_device(state)

    def finish(self) -> dict:
        """Wait for the last save to be written; the Measurement's `checkpoint` entry."""
        start = time.perf_counter()
        self.manager.wait_until_finished()
        drain = time.perf_counter() - start
        self.manager.close()
        blocking = self.save_seconds
        return {"directory": str(self.plan.directory), "every": self.plan.every,
                "saves": len(blocking), "resumed_from_step": self.restored_from,
                "bytes_per_device": self.bytes,
                "save_blocking_s": statistics.median(blocking) if blocking else None,
                "final_drain_s": drain}

