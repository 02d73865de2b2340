"""An unknown key reads the same in every file a user writes: `KEY: unknown key; valid keys are [...]`.

These parsers once worded it their own way (an unknown metric, feature, mechanism, a key beside a table)."""
from __future__ import annotations

import pytest

from calibrate.hardware.hardware import load_hardware
from calibrate.parts.host_model import EngineMechanisms
from calibrate.parts.kv_link import link_from_config
from engine.core.speculative import speculative_from_dict
from engine.errors import SpecError
from sim.experiment.goodput import check_slos

TABLE = {"method": "ngram", "num_speculative_tokens": 3, "acceptance": {"table": "published", "datset": "x"}}


@pytest.mark.parametrize("parse, key, valid", [
    (lambda: check_slos({"itl": 20}, "exp.yaml", "goodput"), "goodput.itl", "['e2el', 'tpot', 'ttft']"),
    (lambda: speculative_from_dict(TABLE, "exp.yaml", "spec"), "spec.acceptance.datset",
     "['table', 'dataset', 'model', 'proposer']"),
    (lambda: EngineMechanisms.from_dict({"overlapp": True}, "host.yaml", {}), "engine.overlapp", "["),
    (lambda: link_from_config({"kind": "nvlink", "bytes_per_s": 1}, load_hardware("h100-sxm"), "exp.yaml"),
     "kv_link.bytes_per_s", "['kind'] (for kind nvlink)"),
])
def test_every_parser_words_an_unknown_key_alike(parse, key, valid):
    with pytest.raises(SpecError) as err:
        parse()
    assert err.value.key == key and err.value.message.startswith(f"unknown key; valid keys are {valid}")
