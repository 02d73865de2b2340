"""Every user error stops with a message naming the file, the key path and what is valid."""
import pytest

from engine.errors import SpecError
from servesim.cli import main
from sim.experiment.config import load_experiment


def _expect(write_config, text, key, *fragments):
    path = write_config(text)
    with pytest.raises(SpecError) as err:
        load_experiment(path)
    message = str(err.value)
    assert str(path) in message and key in message, message
    for fragment in fragments:
        assert fragment in message, message
    return message


def test_unknown_top_level_key(write_config, small):
    _expect(write_config, small + "ratez: [1]\n", "ratez", "valid keys", "rates")


def test_misspelt_system_key(write_config, small):
    text = small.replace("systems: [fastertransformer, orca-max, orca-pow2, orca-oracle, vllm]",
                                    "systems:\n  - {preset: vllm, blok_size: 16}")
    _expect(write_config, text, "systems[0].blok_size", "block_size")


def test_unknown_preset(write_config, small):
    text = small.replace("orca-max,", "orca-maximum,")
    _expect(write_config, text, "systems[1].preset", "orca-max")


def test_wrong_type(write_config, small):
    _expect(write_config, small.replace("kv_cache_gib: 12", "kv_cache_gib: twelve"), "kv_cache_gib", "number")


def test_non_positive_rate(write_config, small):
    _expect(write_config, small.replace("rates: [0.5]", "rates: [0.5, -1]"), "rates[1]", "positive")


def test_unknown_model_lists_available(write_config, small):
    _expect(write_config, small.replace("model: opt-13b", "model: opt-14b"), "model", "opt-13b")


def test_weights_do_not_fit(write_config, small):
    text = small.replace("model: opt-13b", "model: opt-66b").replace("kv_cache_gib: 12\n", "")
    _expect(write_config, text, "model", "tensor_parallel", "GiB")


def test_kv_pool_too_small_for_one_request(write_config, small):
    _expect(write_config, small.replace("kv_cache_gib: 12", "kv_cache_gib: 1"), "kv_cache_gib", "2048")


def test_bad_workload_key(write_config, small):
    _expect(write_config, small.replace("arrival: poisson", "arival: poisson"), "workload.arival")


def test_cli_reports_error_and_writes_nothing(write_config, small, tmp_path, capsys):
    path = write_config(small.replace("rates: [0.5]", "rates: [0]"))
    out = tmp_path / "out"
    assert main(["run", str(path), "--out", str(out)]) == 2
    assert "rates" in capsys.readouterr().err
    assert not out.exists()


def test_override_applies(write_config, small):
    exp = load_experiment(write_config(), ["rates=[1, 2]", "workload.duration_s=60"])
    assert exp.rates == (1.0, 2.0)
