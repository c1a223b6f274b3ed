"""The `parex` command: one module per group of subcommands, their shared argument helpers in
args.py, `main` in main.py."""

from .main import main

__all__ = ["main"]
