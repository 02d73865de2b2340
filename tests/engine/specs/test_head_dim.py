"""A head width of its own (Qwen3's head_dim): read from the YAML, refused when it cannot be one, implied by
hidden_size / num_heads where it is not given, and honoured in every count that reads the width of q."""
from __future__ import annotations

from dataclasses import replace

import pytest
import yaml

from engine.core.spec import ModelSpec
from engine.errors import SpecError
from engine.specs.loader import MODELS_DIR, available_models, load_model_spec


def test_every_spec_without_the_key_has_the_width_hidden_over_heads():
    for name in available_models():
        raw = yaml.safe_load((MODELS_DIR / f"{name}.yaml").read_text())
        spec = load_model_spec(name)
        if "head_dim" not in raw:
            assert spec.head_dim == spec.hidden_size // spec.num_heads and spec.q_dim == spec.hidden_size, name


def test_a_spec_built_in_code_takes_the_implied_width_too():
    spec = ModelSpec("m", "llama", 2, 64, 4, 2, 128, 512, 256, "rmsnorm", "silu", "rotary")
    assert (spec.head_dim, spec.q_dim, spec.kv_dim) == (16, 64, 32)
    assert replace(spec, head_dim=32).q_dim == 128


def test_qwen3_32b_is_8192_wide_in_q_on_a_5120_wide_model():
    spec = load_model_spec("qwen3-32b")
    assert (spec.hidden_size, spec.num_heads, spec.head_dim, spec.q_dim, spec.kv_dim) == (5120, 64, 128, 8192, 1024)
    # q: 5,120 x 8,192, k and v: 5,120 x 1,024 each, o: 8,192 x 5,120
    assert spec.layer_attention_params() == 5120 * 8192 + 2 * 5120 * 1024 + 8192 * 5120
    # KV bytes read head_dim, not hidden / heads (80): 2 x 64 layers x 8 heads x 128 x 2 bytes
    assert spec.kv_bytes_per_token(2) == 2 * 64 * 8 * 128 * 2


def test_the_width_moves_the_counts_it_should_and_no_other():
    wide, narrow = load_model_spec("qwen3-tiny"), replace(load_model_spec("qwen3-tiny"), head_dim=16)
    assert wide.kv_bytes_per_token() == 2 * narrow.kv_bytes_per_token()
    # wq and wo each 64 x 64 more per 16 of head width, per layer; the QK-norm 2 x 16 more
    assert wide.num_params() - narrow.num_params() == 2 * (2 * 64 * 64 + 2 * 64 * 32 + 2 * 16)
    assert wide.expert_params() == narrow.expert_params()


def test_qwen3_30b_a3b_runs_3_3b_of_its_30_5b():
    spec = load_model_spec("qwen3-30b-a3b")
    expert = 3 * 2048 * 768
    assert spec.active_params() == 3_353_032_704  # the card: 3.3B activated
    assert spec.num_params() - spec.active_params() == 48 * (128 - 8) * expert
    assert spec.gate_params() == 2048 * 128 and spec.is_moe


@pytest.mark.parametrize("value,words", [
    (0, "positive integer"),
    (-128, "positive integer"),
    (12.5, "positive integer"),
    ("128", "positive integer"),
    (True, "positive integer"),
    (127, "must be even"),
])
def test_a_bad_head_dim_is_one_line_naming_the_file_and_the_key(tmp_path, value, words):
    raw = yaml.safe_load((MODELS_DIR / "qwen3-32b.yaml").read_text())
    raw["head_dim"] = value
    path = tmp_path / "my-model.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(SpecError) as err:
        load_model_spec(path)
    assert f"{path}: head_dim:" in str(err.value) and words in str(err.value) and "\n" not in str(err.value)


def test_an_odd_width_is_fine_where_nothing_rotates(tmp_path):
    raw = yaml.safe_load((MODELS_DIR / "opt-tiny.yaml").read_text())
    raw["head_dim"] = 15
    path = tmp_path / "odd.yaml"
    path.write_text(yaml.safe_dump(raw))
    assert load_model_spec(path).q_dim == raw["num_heads"] * 15


def test_a_head_dim_of_its_own_needs_no_division_of_hidden_by_heads(tmp_path):
    raw = yaml.safe_load((MODELS_DIR / "qwen3-tiny.yaml").read_text())
    raw["num_heads"], raw["num_kv_heads"] = 6, 2  # 64 / 6 is no whole number; 6 heads of 32 are q's 192
    path = tmp_path / "six.yaml"
    path.write_text(yaml.safe_dump(raw))
    assert load_model_spec(path).q_dim == 192
    del raw["head_dim"]
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(SpecError, match="num_heads: 6 does not divide hidden_size 64 .or give head_dim."):
        load_model_spec(path)
