"""Reading the TOML files users write (clusters, sweep grids, SLURM options): a missing or
malformed file is an InputError that says which file it was and where its keys are documented."""

from __future__ import annotations

import tomllib
from pathlib import Path

from .errors import InputError

DATA_DIR = Path(__file__).resolve().parent.parent / "data"  # the checkout's data/ folder


def read_toml(path, what: str, keys: str) -> dict:
    """The TOML file at `path` as a dict. `what` names the file ("sweep grid"), `keys` where
    its keys are documented ("see parex.sweep.grid for the keys")."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"no {what} file {path}: give the path of a TOML file ({keys})")
    try:
        return tomllib.loads(path.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
        raise InputError(f"{what} file {path}: {err}; fix the TOML ({keys})") from None


__all__ = ["DATA_DIR", "read_toml"]
