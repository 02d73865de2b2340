"""engine/specs/loader.py reads YAML with libyaml's parser where PyYAML has it (_FastLoader), and with the pure
Python one (_Loader) where it has not or where the text is not valid YAML. Both must give the same data, of the
same types (a run's records depend on every number in a profile), on every YAML file the project ships, and
the same one-line error on bad YAML."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from engine.errors import SpecError
from engine.specs import loader

ROOT = Path(__file__).resolve().parents[3]
SHIPPED = sorted(p for folder in ("configs", "calibrate", "engine/specs", "sim", "fidelity")
                 for p in (ROOT / folder).rglob("*.yaml"))


def typed(data: object) -> object:
    """The data with each value's type beside it: == alone says 1 == 1.0 == True."""
    if isinstance(data, dict):
        return {typed(k): typed(v) for k, v in data.items()}
    if isinstance(data, list):
        return [typed(v) for v in data]
    return (type(data).__name__, repr(data))


def test_the_project_ships_yaml_to_compare_on():
    assert len(SHIPPED) > 20 and any("profiles" in p.parts for p in SHIPPED)


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_fast_loader_reads_every_shipped_file_as_the_python_one(path):
    text = path.read_text(encoding="utf-8")
    assert typed(yaml.load(text, Loader=loader._FastLoader)) == typed(yaml.load(text, Loader=loader._Loader))


def test_numbers_as_users_write_them_on_both():
    text = "a: 1e3\nb: -2E-4\nc: 1.5\nd: 7\ne: '1e3'\nf: .inf\ng: 0x10\nh: 1_000\n"
    for parsed in (yaml.load(text, Loader=loader._FastLoader), yaml.load(text, Loader=loader._Loader),
                   loader.parse_yaml(text, "t.yaml")):
        assert typed(parsed) == typed({"a": 1000.0, "b": -2e-4, "c": 1.5, "d": 7, "e": "1e3", "f": float("inf"),
                                       "g": 16, "h": 1000})


@pytest.mark.parametrize("text", ["a: [1, 2\n", "a: b: c\n", "- a\nb: 1\n", "a:\n\t- 1\n"])
def test_bad_yaml_is_reported_as_the_python_parser_words_it(text):
    with pytest.raises(yaml.YAMLError) as python_error:
        yaml.load(text, Loader=loader._Loader)
    with pytest.raises(SpecError) as err:
        loader.parse_yaml(text, "bad.yaml")
    assert loader._yaml_problem(python_error.value) in str(err.value)
