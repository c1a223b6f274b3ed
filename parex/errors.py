"""Bad input, as one type: the message names the problem and the fix.

The `parex` command prints an InputError (or a LayoutError, its sibling for layouts) as one line
and exits with status 2; any other exception is a bug in parex and keeps its traceback (status 1).
A mistyped name gets the nearest known ones, always in the same words (`did_you_mean`).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class InputError(ValueError):
    """A value the user gave (a flag, a name, a profile file) cannot be used; the message says
    what to give instead."""


class UsageError(InputError):
    """A command line argparse cannot read; its message already names the command."""


def _plain(text: str) -> str:
    """Lower case, letters and digits only: 'Llama2_7B' and 'llama2-7b' read the same."""
    return "".join(ch for ch in str(text).lower() if ch.isalnum())


def close_names(word: str, known: Iterable[str], n: int = 3) -> list[str]:
    """Up to n known names nearest to `word`, nearest first: those that contain it (ignoring
    case and punctuation: 'h100' → 'h100-sxm'), then the close ones by difflib's ratio (on
    the lower-case names without leading dashes, so '--foo' is not near '--ffn')."""
    known = [str(k) for k in known]
    typed, bare = _plain(word), str(word).lower().lstrip("-")
    by_bare = {k.lower().lstrip("-"): k for k in known}
    ratio = {k: difflib.SequenceMatcher(None, bare, b).ratio() for b, k in by_bare.items()}
    containing = sorted((k for k in known if len(typed) >= 2 and typed in _plain(k)),
                        key=lambda k: -ratio.get(k, 0))
    close = difflib.get_close_matches(bare, list(by_bare), n=n, cutoff=0.6)
    names = containing + [by_bare[c] for c in close]
    return list(dict.fromkeys(k for k in names if k != word))[:n]


def did_you_mean(word: str, known: Iterable[str]) -> str:
    """"did you mean 'data'?" (or "'a' or 'b'?") for the known names nearest to `word`; ''
    when none is close. The one wording of the suggestion, in every command and the API."""
    names = [repr(k) for k in close_names(word, known)]
    if not names:
        return ""
    listed = names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"
    return f"did you mean {listed}?"


def unknown(what: str, word: str, known: Iterable[str]) -> str:
    """The message for a name that is not one of `known`:
    "unknown model preset 'llama2-7'; did you mean 'llama2-7b'? use one of tiny, ..."."""
    known = [str(k) for k in known]
    hint = did_you_mean(word, known)
    return f"unknown {what} {word!r}; {hint + ' ' if hint else ''}use one of {', '.join(known)}"


def one_line(message: str) -> str:
    """A message as one line, whole: its lines joined with '; ' (never cut)."""
    return "; ".join(line.strip() for line in str(message).splitlines() if line.strip())


__all__ = ["InputError", "UsageError", "close_names", "did_you_mean", "one_line", "unknown"]
