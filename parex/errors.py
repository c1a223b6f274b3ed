"""Bad input, as one type: the message names the problem and the fix.

The `parex` command prints an InputError (or a LayoutError, its sibling for layouts) as one line
and exits with status 2; any other exception is a bug in parex and keeps its traceback (status 1).
"""

from __future__ import annotations


class InputError(ValueError):
    """A value the user gave (a flag, a name, a profile file) cannot be used; the message says
    what to give instead."""


__all__ = ["InputError"]
