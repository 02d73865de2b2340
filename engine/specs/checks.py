"""The numbers a user writes, checked one way for every file: finite, of the right kind, in range.

Experiment and workload configs, model and hardware specs and profiles all read their numbers
through `number` (or its short forms), so NaN, inf, YAML's true/false and out-of-range values are
refused at load time, before anything runs, with a SpecError naming the file, the key and what is
valid. Their keys are checked one way too, by `known_keys`. Imports nothing but SpecError, so the
control plane may use it too.
"""
from __future__ import annotations

import math
import numbers
from collections.abc import Collection, Iterable
from typing import Any

from engine.errors import SpecError


def is_number(value: Any) -> bool:
    """A real, finite number (numpy's too: a Python caller's come from arrays). YAML reads `true` as a
    bool, which Python counts as an int: not a number."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)


def is_whole(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def number(value: Any, source: str, key: str, *, low: float | None = None, high: float | None = None,
           low_open: bool = False, high_open: bool = False, whole: bool = False) -> Any:
    """`value` as a float (an int if `whole`), or a SpecError saying which numbers are valid.

    `low` and `high` bound it, inclusive unless `low_open` / `high_open`.
    """
    ok = is_whole(value) if whole else is_number(value)
    if ok and low is not None:
        ok = value > low if low_open else value >= low
    if ok and high is not None:
        ok = value < high if high_open else value <= high
    if not ok:
        raise SpecError(source, key, f"must be {valid_range(low, high, low_open, high_open, whole)}, got {value!r}")
    return int(value) if whole else float(value)


def valid_range(low: float | None, high: float | None, low_open: bool, high_open: bool, whole: bool) -> str:
    """In words: 'a positive number', 'a positive number up to 86400', 'an integer >= 1', 'a number in (0, 1]'."""
    noun = "integer" if whole else "number"
    if low == 0 and (high is None or high > 1):  # a sign, and a cap far above any sensible value
        sign = f"a {'positive' if low_open else 'non-negative'} {noun}"
        return sign if high is None else f"{sign} {'below' if high_open else 'up to'} {_text(high)}"
    article = "an" if whole else "a"
    if low is not None and high is not None:
        return f"{article} {noun} in {'(' if low_open else '['}{_text(low)}, {_text(high)}{')' if high_open else ']'}"
    if low is not None:
        return f"{article} {noun} {'>' if low_open else '>='} {_text(low)}"
    if high is not None:
        return f"{article} {noun} {'<' if high_open else '<='} {_text(high)}"
    return f"{article} finite {noun}" if not whole else "an integer"


def _text(bound: float) -> str:
    return str(int(bound)) if float(bound).is_integer() else f"{bound:g}"


# the ranges most keys need, by name
def positive(value: Any, source: str, key: str) -> float:
    return number(value, source, key, low=0, low_open=True)


def non_negative(value: Any, source: str, key: str) -> float:
    return number(value, source, key, low=0)


def positive_int(value: Any, source: str, key: str) -> int:
    return number(value, source, key, low=0, low_open=True, whole=True)


def share(value: Any, source: str, key: str) -> float:
    """An efficiency: some of the peak, never none and never more than all of it."""
    return number(value, source, key, low=0, high=1, low_open=True)


def optional(check, value: Any, source: str, key: str):
    """`check` for a key whose null means 'not given'."""
    return None if value is None else check(value, source, key)


def choice(value: Any, source: str, key: str, choices) -> Any:
    """One of `choices`; a list or mapping where a name belongs is refused, not a TypeError."""
    try:
        ok = value in choices
    except TypeError:  # unhashable: a list or a mapping
        ok = False
    if not ok:
        raise SpecError(source, key, f"{value!r} is not one of {list(choices)}")
    return value


def known_keys(keys: Iterable[Any], valid: Collection[str], source: str, where: str = "", note: str = "") -> None:
    """Every key of a mapping (`keys`: the mapping or its keys) one of `valid`, or a SpecError naming the
    first other one (`where.key`) and listing `valid` in the order given; `note` adds what the list alone
    does not say."""
    allowed = set(valid)
    for key in keys:
        if key not in allowed:
            said = f" ({note})" if note else ""
            raise SpecError(source, f"{where}.{key}" if where else str(key),
                            f"unknown key; valid keys are {list(valid)}{said}")


def existing_file(value: Any, source: str, key: str = "", what: str = "a file") -> Any:
    """A path that must name a file: a missing one is "not found", a folder "is a folder" (a folder
    opened as a file fails later with an error that names neither)."""
    from pathlib import Path

    path = Path(value).expanduser()
    if path.is_dir():
        raise SpecError(source, key, f"{str(value)!r} is a folder; give the path of {what}")
    if path.exists() and not path.is_file():  # a device, a pipe: nothing a command can read as a table
        raise SpecError(source, key, f"{str(value)!r} is not a regular file; give the path of {what}")
    if not path.is_file():
        raise SpecError(source, key, f"{str(value)!r}: file not found")
    return value


def output_file(value: Any, source: str, key: str = "") -> Any:
    """A path a command writes a file to: an existing folder there is refused now, not after the work
    (where the atomic write's rename would fail naming its temporary file)."""
    from pathlib import Path

    if Path(value).expanduser().is_dir():
        raise SpecError(source, key, f"{str(value)!r} is a folder; give the path of the file to write")
    return value


def option(check, value: Any, name: str, **bounds) -> Any:
    """A command-line option's value through a config checker: the message names the option
    (`--folds: must be an integer >= 2, got 1`), as a config's names its key."""
    return check(value, name, "", **bounds)
