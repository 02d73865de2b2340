"""Reading a real run's files field by field: every error names the file, the row (a JSONL line) or key, the
field, and what would be valid, in one line (engine.errors.SpecError, as the rest of servesim)."""
from __future__ import annotations

import gzip
import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from engine.errors import SpecError


def open_text(path: Path):
    """A text file, gzip-compressed or not (by its name)."""
    return gzip.open(path, "rt", encoding="utf-8") if path.suffix == ".gz" else open(path, encoding="utf-8")


def jsonl_rows(path: Path) -> Iterator[tuple[int, dict]]:
    """(line number from 1, object) for every non-blank line."""
    try:
        with open_text(path) as lines:
            for number, line in enumerate(lines, 1):
                if line.strip():
                    yield number, json_object(line, path, number)
    except (OSError, EOFError, UnicodeDecodeError) as err:
        raise SpecError(str(path), "", f"cannot be read: {err}") from None


def json_object(line: str, path: Path, number: int) -> dict:
    """One line of a JSON-lines file, which must hold an object."""
    try:
        value = json.loads(line)
    except json.JSONDecodeError as err:
        raise SpecError(str(path), f"line {number}", f"is not JSON ({err.msg} at column {err.colno})") from None
    if not isinstance(value, dict):
        raise SpecError(str(path), f"line {number}", f"must be a JSON object, got {type(value).__name__}")
    return value


def json_file(path: Path, what: str = "a JSON object") -> dict:
    try:
        with open_text(path) as f:
            value = json.load(f)
    except json.JSONDecodeError as err:
        if err.msg == "Extra data":  # vllm bench serve --append-result: a result a line
            raise SpecError(str(path), f"line {err.lineno}", f"a second JSON value: the file must hold {what}, "
                            "one result (split results appended one a line into files of their own)") from None
        raise SpecError(str(path), f"line {err.lineno}", f"is not JSON ({err.msg} at column {err.colno})") from None
    except (OSError, UnicodeDecodeError) as err:
        raise SpecError(str(path), "", f"cannot be read: {err}") from None
    if not isinstance(value, dict):
        raise SpecError(str(path), "", f"must be {what}, got {type(value).__name__}")
    return value


def required(row: dict, name: str, path: Path, where: str) -> Any:
    if name not in row:
        raise SpecError(str(path), _key(where, name), "missing")
    return row[name]


def whole(value: Any, path: Path, key: str, low: int = 0) -> int:
    """An integer >= low (JSON's 3.0 is not one: a count is written as an integer)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise SpecError(str(path), key, f"must be an integer >= {low}, got {value!r}")
    if value < low:
        raise SpecError(str(path), key, f"must be an integer >= {low}, got {value}")
    return value


def seconds(value: Any, path: Path, key: str) -> float:
    """A finite, non-negative number of seconds."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise SpecError(str(path), key, f"must be a finite number of seconds >= 0, got {value!r}")
    return float(value)


def text(value: Any, path: Path, key: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise SpecError(str(path), key, f"must be a non-empty string, got {value!r}")
    return value


def optional(value: Any, check, path: Path, key: str):
    """check(value) where given; None (JSON null, or absent) stays None."""
    return None if value is None else check(value, path, key)


def flag(value: Any, path: Path, key: str) -> bool:
    if not isinstance(value, bool):
        raise SpecError(str(path), key, f"must be true or false, got {value!r}")
    return value


def fraction(value: Any, path: Path, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
        raise SpecError(str(path), key, f"must be a number in (0, 1], got {value!r}")
    return float(value)


def line_key(line: int, name: str) -> str:
    return f"line {line}: {name}"


def _key(where: str, name: str) -> str:
    return f"{where}: {name}" if where else name
