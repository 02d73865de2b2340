"""A command's arguments, checked one way whether a shell or Python passed them.

argparse hands a command strings it has already typed; a Python caller can pass anything (None, a
str where a list belongs, a float where an int does). These checkers refuse what a command cannot
use with a SpecError whose source is the argument's name as the caller wrote it: `Spelling` maps the
Python API's keyword to the command's flag (`out_dir` -> `--out`). Imports nothing but the checkers.
"""
from __future__ import annotations

import errno
import inspect
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from engine.errors import SpecError
from engine.specs.checks import is_whole, number


class Spelling(dict):
    """Each argument's name where the user wrote it: a command's flags; a name not given is its own (the API's)."""

    def __missing__(self, argument: str) -> str:
        return argument


API = Spelling()  # the Python API names each argument by its keyword


def path_argument(value: Any, name: str, what: str) -> Path:
    """A path (a str or an os.PathLike); `what` says what it should be, for the message ("a folder's path")."""
    text = os.fspath(value) if isinstance(value, (str, os.PathLike)) else None
    if not isinstance(text, str):
        raise SpecError(name, "", f"must be {what} (a str or a Path), got {shown(value)}")
    if "\0" in text:  # the OS refuses it, in a ValueError that names neither the path nor the argument
        raise SpecError(name, "", f"{text!r} holds a NUL character; no path can")
    try:
        os.stat(text)
    except OSError as err:  # a missing path is the command's to judge; one too long is no path at all
        if err.errno == errno.ENAMETOOLONG:
            raise SpecError(name, "", f"{shown(text)}: {err.strerror}") from None
    return Path(text)


def shown(value: Any, most: int = 60) -> str:
    """A value as a message quotes it: its repr, cut short (a loaded Experiment's runs to pages)."""
    text = repr(value)
    return text if len(text) <= most else f"{text[:most]}... (a {type(value).__name__})"


def strings(value: Any, name: str, example: str) -> list[str]:
    """A list (or tuple) of strings; a lone str is one of them, never its characters; None is none."""
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if not isinstance(value, (list, tuple)):
        raise SpecError(name, "", f"must be a list of strings, e.g. {example}, got {shown(value)}")
    for i, item in enumerate(value):
        if not isinstance(item, str):
            raise SpecError(name, f"[{i}]", f"must be a string, e.g. {example}, got {shown(item)}")
    return list(value)


def switch(value: Any, name: str) -> bool:
    """True or False: a truthy 'yes' or 0 is more likely a slip than a choice."""
    if not isinstance(value, bool):
        raise SpecError(name, "", f"must be True or False, got {shown(value)}")
    return value


def callback(value: Any, name: str) -> Callable[[str], object]:
    """A function called with each line to report; None reports nothing."""
    if value is None:
        return _quiet
    if not callable(value):
        raise SpecError(name, "", f"must be a function taking each line (e.g. print), or None, got {shown(value)}")
    try:  # found now: called with the first line, it would fail after the first results are written
        inspect.signature(value).bind("line")
    except TypeError:
        raise SpecError(name, "", f"must take one argument, the line; {shown(value)} does not") from None
    except ValueError:  # a builtin that shows no signature: taken on trust
        pass
    return value


def _quiet(line: str) -> None:
    pass


def jobs(value: Any, name: str) -> int:
    """Processes to run in parallel: at least 1, or 0 for one per core."""
    if is_whole(value) and value < 0:  # the command line's message
        raise SpecError(name, str(value), "must be at least 1, or 0 for one per core")
    return number(value, name, "", low=0, whole=True)


def per_core(jobs: int, most: int | None = None) -> int:
    """`jobs`, where 0 is one per core; never more than `most` (the runs there are to share out)."""
    width = jobs or os.cpu_count() or 1
    return max(1, min(width, most)) if most is not None else width
