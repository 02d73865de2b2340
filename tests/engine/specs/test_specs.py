"""Model and system specs as data, and the errors a user can cause writing them."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from engine.core.spec import ModelSpec
from engine.core.system import PAPER_SYSTEMS, SystemSpec
from engine.errors import SpecError
from engine.specs.loader import (
    MODELS_DIR,
    available_models,
    load_model_spec,
    system_from_dict,
)

OPT_13B = dict(name="opt-13b", family="opt", num_layers=40, hidden_size=5120, num_heads=40, num_kv_heads=40,
               ffn_dim=20480, vocab_size=50272, max_seq_len=2048, norm="layernorm", activation="relu",
               position="learned")


def write_model(tmp_path, **changes) -> Path:
    raw = {k: v for k, v in {**OPT_13B, **changes}.items() if v is not None}
    path = tmp_path / "my-model.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


# --- model specs ---------------------------------------------------------------

def test_shipped_models_load_and_validate():
    names = available_models()
    assert {"opt-13b", "opt-66b", "opt-175b", "llama-13b"} <= set(names)
    for name in names:
        spec = load_model_spec(name)
        assert spec.name == name
        assert spec.hidden_size % spec.num_heads == 0


def test_shipped_models_are_package_data_of_engine_specs():
    import engine.specs
    assert MODELS_DIR == Path(engine.specs.__file__).resolve().parent / "models"
    assert load_model_spec("opt-13b") == load_model_spec(MODELS_DIR / "opt-13b.yaml")


@pytest.mark.parametrize("name,per_token", [
    ("opt-13b", 800 * 1024), ("opt-66b", 2.25 * 2**20), ("opt-175b", 4.5 * 2**20), ("llama-13b", 800 * 1024)])
def test_kv_bytes_per_token(name, per_token):
    # 2 (K and V) x layers x kv_heads x head_dim x 2 bytes; OPT-13B: 800 KB (Kwon et al. section 3)
    assert load_model_spec(name).kv_bytes_per_token(2) == per_token


def test_opt13b_shape_and_size():
    spec = load_model_spec("opt-13b")
    assert spec.kv_bytes_per_token() == 819200 == 2 * 5120 * 40 * 2
    assert spec.head_dim == 128 and spec.kv_dim == 5120 and not spec.is_gated_mlp
    assert 12.8e9 < spec.num_params() < 12.9e9  # published: 12.85B
    assert spec.weight_bytes(2) == 2 * spec.num_params()


def test_model_spec_from_a_path_and_family_defaults(tmp_path):
    path = write_model(tmp_path, norm=None, activation=None, position=None, num_kv_heads=None)
    spec = load_model_spec(path)
    assert spec == ModelSpec(**OPT_13B)  # norm, activation, position and kv heads from the family


def test_unknown_model_name_lists_the_available_ones():
    with pytest.raises(SpecError) as err:
        load_model_spec("opt-14b")
    message = str(err.value)
    assert "opt-14b" in message and "opt-13b" in message and "llama-13b" in message


@pytest.mark.parametrize("changes,key,words", [
    (dict(num_layerz=40), "num_layerz", "unknown key"),
    (dict(hidden_size=None), "hidden_size", "missing"),
    (dict(num_layers=0), "num_layers", "positive integer"),
    (dict(vocab_size=-5), "vocab_size", "positive integer"),
    (dict(ffn_dim=20480.0), "ffn_dim", "positive integer"),
    (dict(max_seq_len="2048"), "max_seq_len", "positive integer"),
    (dict(num_heads=True), "num_heads", "positive integer"),
    (dict(num_heads=48), "num_heads", "does not divide"),
    (dict(num_kv_heads=16), "num_kv_heads", "does not divide"),
])
def test_bad_model_yaml_names_the_file_and_key(tmp_path, changes, key, words):
    path = write_model(tmp_path, **changes)
    with pytest.raises(SpecError) as err:
        load_model_spec(path)
    message = str(err.value)
    assert str(path) in message and key in message and words in message
    assert err.value.key == key


def test_unknown_key_message_lists_the_valid_ones(tmp_path):
    with pytest.raises(SpecError, match="valid keys are .*'num_layers'"):
        load_model_spec(write_model(tmp_path, num_layerz=40))


def test_model_yaml_that_is_not_a_mapping(tmp_path):
    path = tmp_path / "list.yaml"
    path.write_text("- 1\n- 2\n")
    with pytest.raises(SpecError, match="mapping"):
        load_model_spec(path)


def test_unknown_family_is_named_with_the_valid_ones(tmp_path):
    # a typo in `family` should say so, not complain about a missing `activation`
    with pytest.raises(SpecError) as err:
        load_model_spec(write_model(tmp_path, family="gpt", norm=None, activation=None, position=None))
    assert err.value.key == "family" and "opt" in str(err.value) and "llama" in str(err.value)


# --- system specs ---------------------------------------------------------------

def test_paper_presets():
    assert set(PAPER_SYSTEMS) == {"fastertransformer", "orca-max", "orca-pow2", "orca-oracle", "vllm"}
    for spec in PAPER_SYSTEMS.values():
        spec.validate("presets", "systems")
        assert spec.block_size == 16 and spec.max_num_seqs == 256
    vllm = PAPER_SYSTEMS["vllm"]
    assert vllm.max_num_batched_tokens == 2560 and vllm.watermark == 0.01 and vllm.preemption == "auto"
    assert [PAPER_SYSTEMS[f"orca-{r}"].reservation for r in ("oracle", "pow2", "max")] == ["oracle", "pow2", "max"]


def test_system_from_preset_name_and_overrides():
    assert system_from_dict("vllm", "exp.yaml", "systems[0]") == PAPER_SYSTEMS["vllm"]
    spec = system_from_dict({"preset": "vllm", "block_size": 32, "name": "vLLM-32"}, "exp.yaml", "systems[1]")
    assert spec.block_size == 32 and spec.name == "vLLM-32" and spec.kind == "vllm"
    full = system_from_dict({"name": "mine", "kind": "orca", "reservation": "pow2"}, "exp.yaml", "systems[2]")
    assert full == SystemSpec("mine", "orca", reservation="pow2")


@pytest.mark.parametrize("raw,key,words", [
    ({"preset": "orca-min"}, "systems[3].preset", "orca-max"),
    ({"name": "x", "kind": "tgi"}, "systems[3].kind", "vllm"),
    ({"preset": "vllm", "block_size": 12}, "systems[3].block_size", "power of two"),
    ({"preset": "vllm", "block_size": 0}, "systems[3].block_size", "power of two"),
    ({"preset": "vllm", "block_size": "16"}, "systems[3].block_size", "power of two"),
    ({"preset": "orca-max", "reservation": "mean"}, "systems[3].reservation", "oracle"),
    ({"preset": "vllm", "preemption": "kill"}, "systems[3].preemption", "recompute"),
    ({"preset": "vllm", "max_num_seqs": 0}, "systems[3].max_num_seqs", "positive"),
    ({"preset": "vllm", "watermark": 1.5}, "systems[3].watermark", "[0, 1)"),
    ({"preset": "vllm", "max_num_batched_tokens": -1}, "systems[3].max_num_batched_tokens", "positive"),
    ({"preset": "vllm", "blocksize": 16}, "systems[3].blocksize", "unknown key"),
    ({"kind": "vllm"}, "systems[3].name", "missing"),
    (["vllm"], "systems[3]", "preset name or a mapping"),
])
def test_bad_system_names_the_file_and_key(raw, key, words):
    with pytest.raises(SpecError) as err:
        system_from_dict(raw, "exp.yaml", "systems[3]")
    message = str(err.value)
    assert message.startswith("exp.yaml: ") and key in message and words in message


@pytest.mark.parametrize("field,value", [
    ("max_num_batched_tokens", "2560"), ("watermark", "0.01"), ("max_batch_size", "7"), ("max_num_seqs", 2.5),
])
def test_wrongly_typed_system_values_are_spec_errors_not_type_errors(field, value):
    # a quoted number in YAML must stop with the file and key, not a bare TypeError
    with pytest.raises(SpecError) as err:
        system_from_dict({"preset": "vllm", field: value}, "exp.yaml", "systems[0]")
    assert f"systems[0].{field}" in str(err.value)
