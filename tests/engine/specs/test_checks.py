"""The shared checks every loader reads numbers and YAML files through: one wording, one line, at load time."""
from __future__ import annotations

import math

import pytest

from engine.errors import SpecError
from engine.specs.checks import choice, known_keys, non_negative, number, positive, positive_int, share
from engine.specs.loader import parse_yaml, read_yaml


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, True, "1", None, [1]])
def test_a_number_is_real_and_finite(value):
    with pytest.raises(SpecError, match="must be a non-negative number"):
        non_negative(value, "exp.yaml", "warmup_s")


@pytest.mark.parametrize("check, value, words", [
    (positive, 0, "a positive number, got 0"),
    (positive_int, 2.0, "a positive integer, got 2.0"),
    (share, 5, "a number in (0, 1], got 5"),
    (share, 0, "a number in (0, 1], got 0"),
])
def test_out_of_range_says_what_is_valid(check, value, words):
    with pytest.raises(SpecError) as err:
        check(value, "exp.yaml", "key")
    assert str(err.value) == f"exp.yaml: key: must be {words}"


def test_bounds_in_words():
    with pytest.raises(SpecError, match=r"must be a number >= 1, got 0.1"):
        number(0.1, "exp.yaml", "max_time_factor", low=1)
    with pytest.raises(SpecError, match=r"must be a positive number up to 86400, got 100000.0"):
        number(1e5, "exp.yaml", "workload.duration_s", low=0, low_open=True, high=86400.0)
    assert share(1, "exp.yaml", "cost_model.compute_efficiency") == 1.0
    assert positive_int(3, "exp.yaml", "tensor_parallel") == 3


def test_a_list_where_a_name_belongs_is_refused_not_a_type_error():
    with pytest.raises(SpecError, match=r"\['vllm'\] is not one of \['a', 'b'\]"):
        choice(["vllm"], "exp.yaml", "router", ["a", "b"])


def test_an_unknown_key_is_named_under_its_section_with_the_valid_ones_in_order():
    known_keys({"tokens": 1}, ["tokens", "count"], "exp.yaml", "workload.system_prompt")  # known: no error
    with pytest.raises(SpecError) as err:
        known_keys({"tokens": 1, "pick": 2, "zz": 3}, ["tokens", "count"], "exp.yaml", "workload.system_prompt")
    assert str(err.value) == "exp.yaml: workload.system_prompt.pick: unknown key; valid keys are ['tokens', 'count']"
    with pytest.raises(SpecError) as err:
        known_keys({1: 0}, ("a",), "spec.yaml", note="for kind nvlink")
    assert str(err.value) == "spec.yaml: 1: unknown key; valid keys are ['a'] (for kind nvlink)"


def test_1e3_is_a_number():
    # YAML 1.1 reads 1e3 (no dot, no exponent sign) as text; users mean 1000
    assert parse_yaml("a: 1e3\nb: 2E+2\nc: -1.5e-3\nd: '1e3'\ne: 1e3x", "x") == \
        {"a": 1000.0, "b": 200.0, "c": -0.0015, "d": "1e3", "e": "1e3x"}


def test_bad_yaml_is_one_line():
    with pytest.raises(SpecError) as err:
        parse_yaml("rates: [1, 2", "exp.yaml", "rates")
    assert "\n" not in str(err.value) and "line 1" in str(err.value)


@pytest.mark.parametrize("content, words", [
    (bytes(range(256)), "not a text file: byte 0x80 at offset 128 is not UTF-8"),
    ("name: café\n".encode("latin-1"), "not a text file: byte 0xe9"),
    (b"name: [x\n", "not valid YAML"),
    (b"a: 1\x00\n", "not valid YAML"),
])
def test_unreadable_files_are_one_line_errors(tmp_path, content, words):
    path = tmp_path / "bad.yaml"
    path.write_bytes(content)
    with pytest.raises(SpecError) as err:
        read_yaml(path, "config")
    assert str(err.value).startswith(str(path)) and words in str(err.value) and "\n" not in str(err.value)


def test_a_folder_or_a_missing_file(tmp_path):
    with pytest.raises(SpecError, match="is a folder; give the path of a config"):
        read_yaml(tmp_path, "config")
    with pytest.raises(SpecError, match="no such profile file"):
        read_yaml(tmp_path / "missing.yaml", "profile file")


def test_spec_loaders_refuse_a_list_where_a_name_belongs(tmp_path):
    from engine.specs.loader import model_spec_from_dict, system_from_dict

    with pytest.raises(SpecError, match="family: \\['opt'\\] is not one of"):
        model_spec_from_dict({"family": ["opt"]}, "m.yaml")
    with pytest.raises(SpecError, match="systems\\[0\\].preset: \\['vllm'\\] is not one of"):
        system_from_dict({"preset": ["vllm"]}, "exp.yaml", "systems[0]")
    with pytest.raises(SpecError, match="systems\\[0\\].name: must be a non-empty label, got 7"):
        system_from_dict({"preset": "vllm", "name": 7}, "exp.yaml", "systems[0]")
