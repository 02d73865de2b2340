"""engine/specs/loader.read_yaml parses the same bytes once per process: each call gets data of its own, and a file
edited, even within a clock tick and to the same size, is read again."""
from __future__ import annotations

import os

import pytest

from engine.errors import SpecError
from engine.specs import loader


@pytest.fixture
def parses(monkeypatch):
    seen = []
    parse = loader.parse_yaml
    monkeypatch.setattr(loader, "parse_yaml", lambda text, source, key="": seen.append(source) or parse(text, source))
    return seen


def test_a_file_is_parsed_once_and_each_call_gets_its_own_data(tmp_path, parses):
    path = tmp_path / "spec.yaml"
    path.write_text("name: a\nlayers: [1, 2]\n")
    first, second = loader.read_yaml(path), loader.read_yaml(path)
    assert first == second == {"name": "a", "layers": [1, 2]} and len(parses) == 1
    first["layers"].append(3)
    assert loader.read_yaml(path)["layers"] == [1, 2]


def test_an_edited_file_is_read_again_even_at_the_same_size_and_time(tmp_path, parses):
    path = tmp_path / "spec.yaml"
    path.write_text("name: a\n")
    assert loader.read_yaml(path) == {"name": "a"}
    stat = path.stat()
    path.write_text("name: b\n")  # the same size
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # and the same time, as within one clock tick
    assert loader.read_yaml(path) == {"name": "b"} and len(parses) == 2
    other = tmp_path / "other.yaml"
    other.write_text("name: a\n")  # the same bytes elsewhere: the same data, no parse
    assert loader.read_yaml(other) == {"name": "a"} and len(parses) == 2


def test_a_missing_file_is_still_refused_by_name(tmp_path):
    with pytest.raises(SpecError, match="no such profile"):
        loader.read_yaml(tmp_path / "gone.yaml", "profile")
