"""What an import returns: parex's model, train config and layout read off another framework's
configuration, and an account of the reading (what was ignored, which of the framework's
defaults filled what the file left out, what parex counts a little differently), so that a
prediction of an imported run says which run it is.

    run = parex.from_megatron("--num-layers 96 ... --tensor-model-parallel-size 8", world_size=64)
    run.predict("h100-sxm")       # parex.predict of run.model, run.train, run.layout
    print(run.notes())            # ignored: ... / assumed (Megatron-LM core_v0.15.0): ...
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from ..config import ModelConfig, TrainConfig
from ..errors import InputError, did_you_mean
from ..files import DATA_DIR
from ..layout import Layout

# the option lists the importers check names against, read from each framework's own source at
# the version their defaults are taken from (data/interop/*.json name the version and the URL)
OPTION_LISTS = DATA_DIR / "interop"


@dataclass(frozen=True)
class Imported:
    """One framework run as parex's values. `dtype` is the run's precision, given to
    parex.predict as its dtype keyword (an accelerator profile's default would else decide it).
    `ignored`: options read and left out of the prediction, each with why; `assumed`: the
    framework's defaults taken for what the configuration leaves out; `approximated`: what
    parex counts differently from the framework (each says by how much)."""

    framework: str  # "Megatron-LM", "torchtitan", "MaxText", "Hugging Face"
    version: str  # the framework version whose option names and defaults were read
    model: ModelConfig
    train: TrainConfig
    layout: Layout | None  # None: a configuration that names no layout (an HF config.json)
    dtype: str | None = None  # None: the prediction's regime decides (parex.defaults)
    ignored: tuple[str, ...] = ()
    assumed: tuple[str, ...] = ()
    approximated: tuple[str, ...] = ()
    stack: str | None = None  # the framework's overlaps (parex.stacks), None: parex's own
    overlaps: tuple[str, ...] | None = None  # the overlaps the run turns on, replacing the
    #                                          stack's list (None: the stack's defaults)
    recipe: str | None = None  # the bytes per parameter it keeps and reduces (parex.predict.
    #                            memory.RECIPES), None: the dtype's default

    @property
    def keywords(self) -> dict:
        """parex.predict's keywords that belong to the run (its precision and recipe, its
        overlaps)."""
        return {"dtype": self.dtype, "recipe": self.recipe, "stack": self.stack,
                "overlaps": self.overlaps}

    def setting(self, hardware, **keywords):
        """parex.setting.resolve of this run on `hardware` (a profile name, Chip or Cluster)."""
        from ..setting import resolve

        return resolve(self.model, self.train, self._layout(), hardware,
                       **(self.keywords | keywords))

    def predict(self, hardware, **keywords):
        """parex.predict of this run on `hardware`."""
        from ..entry import predict

        return predict(self.model, self.train, self._layout(), hardware,
                       **(self.keywords | keywords))

    def notes(self) -> str:
        """One line each: what was ignored, assumed and approximated (nothing when empty)."""
        lines = []
        for label, items in (("ignored", self.ignored),
                             (f"assumed ({self.framework} {self.version} defaults)", self.assumed),
                             ("approximated", self.approximated)):
            if items:
                lines.append(f"{label}: {'; '.join(items)}")
        return "\n".join(lines)

    def _layout(self) -> Layout:
        if self.layout is None:
            raise InputError(f"this {self.framework} configuration names a model, not a layout: "
                             f"give parex.predict a Layout with run.model")
        return self.layout


def option_list(name: str) -> dict:
    """data/interop/<name>.json: a framework's option names, its version and source."""
    return json.loads((OPTION_LISTS / f"{name}.json").read_text())


def unknown_option(framework: str, version: str, option: str, known) -> InputError:
    """The one-line error for an option the framework does not have."""
    hint = did_you_mean(option, known)
    return InputError(f"{option}: not a {framework} {version} option; "
                      f"{hint + ' ' if hint else ''}fix or remove it")


def whole(option: str, text) -> int:
    """An option's value as a whole number, or a one-line error naming the option."""
    try:
        value = int(str(text))
    except ValueError:
        raise InputError(f"{option} {text}: give a whole number") from None
    return value


def divide(total: int, by: int, what: str, fix: str) -> int:
    """total / by, which must be whole: else a one-line error saying what and how to fix."""
    if by < 1 or total % by:
        raise InputError(f"{what}: {total} is not divisible by {by}; {fix}")
    return total // by


class Unexpressible(InputError):
    """A parex layout or setting another framework cannot express; the message names the
    nearest one it can."""


def refuse(framework: str, what: str, nearest: str) -> Unexpressible:
    return Unexpressible(f"{framework} cannot express {what}; the nearest it can: {nearest}")


def refuse_parex_only(framework: str, layout: Layout) -> None:
    """What none of the frameworks parex writes for can run: AxoNN's 3D tensor split (their
    tensor parallelism is 1D) and DiLoCo's replicas (their data parallelism is synchronous)."""
    if layout.tensor3d:
        flat = layout.tensor * layout.tensor_y * layout.tensor_z
        raise refuse(framework, f"a 3D tensor layout (tensor={layout.tensor}x{layout.tensor_y}x"
                     f"{layout.tensor_z})", f"tensor={flat} (a 1D split)")
    if layout.diloco:
        raise refuse(framework, "DiLoCo's replicas", f"data={layout.data * layout.replica} "
                     f"without replica and inner_steps (synchronous data parallelism)")


__all__ = ["Imported", "OPTION_LISTS", "Unexpressible", "divide", "option_list", "refuse",
           "refuse_parex_only", "unknown_option", "whole"]
