"""The experiment's top-level keys come from one schema (sim/experiment/keys.py): the parser reads them through it,
their errors say what it declares, and docs/config.md's key table is made from it."""
from __future__ import annotations

import pytest

from engine.errors import SpecError
from engine.specs.checks import valid_range
from sim.experiment import keys
from sim.experiment.config import experiment_from_dict
from sim.experiment.key_table import PAGE, with_key_table
from sim.experiment.keys import EXPERIMENT_KEYS, FLAG, INTEGER, KEYS, Key, read_keys

MINIMAL = {"model": "opt-tiny", "hardware": "a100-40gb", "workload": {"duration_s": 10}, "rates": [1],
           "warmup_s": 0}


def test_the_reference_page_lists_the_schema_s_keys():
    page = PAGE.read_text(encoding="utf-8")
    assert with_key_table(page) == page, "docs/config.md's key table is not the schema's: run " \
                                         "`python -m sim.experiment.key_table`"


@pytest.mark.parametrize("key", [key for key in EXPERIMENT_KEYS if key.plain], ids=lambda key: key.name)
def test_a_plain_key_s_bad_value_is_one_line_naming_it_and_what_is_valid(key):
    with pytest.raises(SpecError) as err:
        read_keys({**MINIMAL, key.name: "many"}, "exp.yaml")
    valid = "true or false" if key.type == FLAG else valid_range(key.low, key.high, key.low_open, False,
                                                                    key.type == INTEGER)
    assert err.value.key == key.name and err.value.message == f"must be {valid}, got 'many'"


def test_defaults_and_ranges_are_the_schema_s():
    given = read_keys(MINIMAL, "exp.yaml")
    assert given["replicas"] == KEYS["replicas"].default == 1 and given["kv_cache_gib"] is None
    with pytest.raises(SpecError, match=r"replicas: must be an integer in \[1, 4096\], got 4097"):
        read_keys({**MINIMAL, "replicas": 4097}, "exp.yaml")
    with pytest.raises(SpecError, match=r"dtype_bytes: 3 is not one of \[1, 2, 4\]"):
        read_keys({**MINIMAL, "dtype_bytes": 3}, "exp.yaml")


def test_a_required_key_missing_says_what_it_holds():
    with pytest.raises(SpecError) as err:
        read_keys({k: v for k, v in MINIMAL.items() if k != "rates"}, "exp.yaml")
    assert str(err.value) == f"exp.yaml: rates: missing required key ({KEYS['rates'].type})"


def test_a_key_added_to_the_schema_is_known_and_read(monkeypatch):
    added = Key("new_flag", FLAG, default=False, doc="a flag a future change reads")
    monkeypatch.setattr(keys, "EXPERIMENT_KEYS", (*EXPERIMENT_KEYS, added))
    monkeypatch.setattr(keys, "KEYS", {**KEYS, "new_flag": added})
    assert read_keys({**MINIMAL, "new_flag": True}, "exp.yaml")["new_flag"] is True
    experiment_from_dict({**MINIMAL, "new_flag": True}, "exp.yaml", PAGE.parent)  # not an unknown key
    with pytest.raises(SpecError, match="new_flag: must be true or false, got 1"):
        read_keys({**MINIMAL, "new_flag": 1}, "exp.yaml")
