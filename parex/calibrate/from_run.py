"""`parex calibrate --from-run SECONDS`: one measured step of the user's own training code turned
into a hardware profile.

A profile's `step_efficiency` is the fraction of the kernels' best rates a training step sustains
(parex.predict.accelerator); it is a property of the software stack as much as of the chip
(Megatron-LM's 2021 and 2022 code differ by 7-20 % at the same layout). Given one measured
step time T at one layout, parex solves predicted(e) = T for e: compute and the bubble scale as
1/e and the exposed communication only grows as compute shrinks, so predicted(e) is monotone
non-increasing and bisection on log e finds the one root. The result is a copy of the profile
under a new name among the user's own profiles (parex.hardware.user_hardware_dir), its
`efficiency_sources` saying where the number came from; `parex predict --hardware NAME`, `parex
plan` and the Explorer read it as they read a shipped one.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

from ..errors import InputError
from ..hardware import HARDWARE_DIR, LOCAL, Chip, save_chip, user_hardware_dir

LOW, HIGH = 1e-3, 1.0  # the step efficiency searched: a step sustains at most its kernels' rates


def solve_efficiency(seconds_of, chip: Chip, measured_s: float, tol: float = 1e-12) -> float:
    """The step efficiency e of `chip` with seconds_of(chip with e) = measured_s, by bisection
    on log e in [LOW, HIGH] (seconds_of is monotone non-increasing in e)."""
    check_seconds(measured_s)

    def at(e: float) -> float:
        return seconds_of(dataclasses.replace(chip, step_efficiency=e))

    fastest, slowest = at(HIGH), at(LOW)
    if measured_s < fastest * (1 - 1e-12):
        raise InputError(f"--from-run {measured_s:g} s: faster than this layout can run on "
                         f"{chip.name} even at its kernels' best rates ({fastest:.4g} s at step "
                         f"efficiency 1); check the layout, batch and hardware flags")
    if measured_s > slowest:
        raise InputError(f"--from-run {measured_s:g} s: slower than step efficiency {LOW:g} "
                         f"predicts ({slowest:.4g} s); check the layout, batch and units "
                         f"(seconds per iteration)")
    if slowest - fastest <= 1e-9 * slowest:
        raise InputError(f"the predicted step time of this layout ({fastest:.4g} s) does not "
                         f"depend on the step efficiency: calibrate on a layout whose compute "
                         f"is not hidden behind communication")
    lo, hi = math.log(LOW), math.log(HIGH)
    while hi - lo > tol:
        mid = (lo + hi) / 2
        if at(math.exp(mid)) > measured_s:
            lo = mid  # still too slow: the stack sustains more than e
        else:
            hi = mid
    return math.exp((lo + hi) / 2)


def check_seconds(measured_s: float) -> None:
    if not measured_s > 0 or not math.isfinite(measured_s):
        raise InputError(f"--from-run {measured_s!r}: a measured step time is a positive number "
                         f"of seconds per iteration")


def from_run(model, train, layout, cluster, measured_s: float, **predict_kwargs) -> float:
    """The step efficiency of `cluster`'s chip that makes predict() of this layout take
    `measured_s` seconds. A layout that does not fit in memory is refused."""
    from ..hardware import Cluster
    from ..predict import predict

    check_seconds(measured_s)
    p = predict(model, train, layout, cluster, **predict_kwargs)
    if not p.fits:
        raise InputError(f"layout {layout} does not fit on {cluster.chip.name} "
                         f"({p.over_capacity_bytes / 1e9:.1f} GB over): a run that did not fit "
                         f"cannot have been measured; check the layout, batch and remat flags")

    def seconds_of(chip: Chip) -> float:
        return predict(model, train, layout, Cluster(chip, cluster.nodes),
                       **predict_kwargs).step_time_s["total"]

    return solve_efficiency(seconds_of, cluster.chip, measured_s)


def calibrated_chip(chip: Chip, name: str, efficiency: float, source: str) -> Chip:
    """A copy of `chip` called `name` with the fitted step efficiency and its source."""
    sources = dict(chip.efficiency_sources) | {"step_efficiency": source}
    return dataclasses.replace(chip, name=name, step_efficiency=efficiency,
                               description=f"{chip.description} (step efficiency from a run)",
                               efficiency_sources=sources)


def check_name(name: str) -> str:
    """A profile name a file can carry, that shadows neither a shipped profile nor cpu-local."""
    name = name.strip().lower()
    if not name or any(c in name for c in "/\\ ") or name.startswith("."):
        raise InputError(f"--name {name!r}: a profile name is one word without slashes, e.g. "
                         f"a100-mystack")
    if name == LOCAL or (HARDWARE_DIR / f"{name}.json").exists():
        raise InputError(f"--name {name}: a shipped profile has that name; choose another, e.g. "
                         f"{name}-mystack")
    return name


def write_profile(chip: Chip, directory: Path | None = None) -> Path:
    """Save `chip` among the user's own profiles (hardware.user_hardware_dir), where
    load_chip finds it, or in `directory`."""
    return save_chip(chip, Path(directory) if directory is not None else user_hardware_dir())


__all__ = ["calibrated_chip", "check_name", "check_seconds", "from_run",
           "solve_efficiency", "write_profile"]
