"""A config's `--set key.path=value` overrides, and an error about a value one of them set, blamed on it."""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from engine.errors import SpecError
from engine.specs.loader import parse_yaml


def apply_overrides(raw: dict, overrides: list[str], source: str) -> dict:
    """--set a.b=value: the value is parsed as YAML (numbers, lists, null)."""
    for item in overrides:
        if "=" not in item:
            raise SpecError(source, item, "an override is key.path=value")
        path, text = item.split("=", 1)
        node = raw
        keys = path.split(".")
        for key in keys[:-1]:
            node = node.setdefault(key, {})
            if not isinstance(node, dict):
                raise SpecError(source, path, f"{key} is not a mapping")
        try:
            node[keys[-1]] = parse_yaml(text, source, path)
        except SpecError as err:
            raise SpecError(source, path, f"--set {item!r}: {err.message}") from None
    return raw


def override_of(key: str, overrides: list[str]) -> str | None:
    """The last --set whose key path is `key` or holds it (`--set cost_model={...}` gave cost_model.path)."""
    for item in reversed(overrides):
        path = item.split("=", 1)[0]
        if key == path or key.startswith((f"{path}.", f"{path}[")):
            return item
    return None


@contextmanager
def blamed_on_overrides(source: str, overrides: list[str]) -> Iterator[None]:
    """An error about a value a --set gave says so, and which --set: the file `source` it names (the config
    that was overridden, as every config error names its file first) does not hold that value, and a user
    looking there for it would not find it."""
    try:
        yield
    except SpecError as err:
        item = override_of(err.key, overrides) if err.source == source and err.key else None
        if item is None:
            raise
        raise SpecError(err.source, err.key, f"{err.message} (given by --set {item}, not by the file)") from None
