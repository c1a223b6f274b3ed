"""What each process that `parex launch` starts runs: join the others, then one parex command.

    python -m parex.cli.child CMD ...   (with the PAREX_* settings the launcher passes)
"""

from __future__ import annotations

import sys

from ..launch import join_from_env
from .main import main


def child_main(argv: list[str]) -> int:
    join_from_env()
    return main(argv)


if __name__ == "__main__":
    sys.exit(child_main(sys.argv[1:]))
