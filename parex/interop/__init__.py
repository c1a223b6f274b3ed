"""Plan here, run there: other frameworks' configurations read into parex's values and written
back from them.

    parex.from_megatron("torchrun ... pretrain_gpt.py --num-layers 96 ...")   an Imported run
    parex.from_hf_config("config.json").model                              a ModelConfig
    parex.to_megatron(model, train, layout, "h100-sxm")                     a command line
    parex.from_torchtitan("job.toml"), parex.from_maxtext("base.yml", ["key=value"])

One module per framework (megatron.py, torchtitan.py, maxtext.py, hf.py); result.py is what an
import returns: the values, and one line each for the options ignored, the framework's defaults
assumed (at the version named) and what parex counts differently. An export refuses what the
framework cannot express, naming the nearest layout it can (Unexpressible, an InputError).
"""

from .hf import from_hf_config, to_hf_config
from .maxtext import from_maxtext, to_maxtext
from .megatron import from_megatron, megatron_command, to_megatron
from .result import Imported, Unexpressible
from .torchtitan import from_torchtitan, to_torchtitan

# the frameworks a resolved Setting can be written for, by the name `--emit` takes
FRAMEWORKS = {"megatron": "Megatron-LM", "torchtitan": "torchtitan", "maxtext": "MaxText"}


def emit(framework: str, setting) -> str:
    """The framework's options of one resolved Setting (Unexpressible names the nearest layout
    it can run when it cannot express this one)."""
    from .maxtext import maxtext_command
    from .megatron import megatron_command
    from .torchtitan import torchtitan_toml

    return {"megatron": megatron_command, "torchtitan": torchtitan_toml,
            "maxtext": maxtext_command}[framework](setting)


__all__ = ["FRAMEWORKS", "Imported", "Unexpressible", "emit", "from_hf_config", "from_maxtext",
           "from_megatron", "from_torchtitan", "megatron_command", "to_hf_config", "to_maxtext",
           "to_megatron", "to_torchtitan"]
