"""The shipped specs of the dense models users deploy: each one's size against its published parameter count,
its KV bytes against its published shape, and every older spec's numbers where they were."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from engine.errors import SpecError
from engine.specs.loader import MODELS_DIR, available_models, load_model_spec

# Exact counts, not the card's rounded "7B": the Hugging Face safetensors metadata (parameters by dtype) or the
# index's total_size / 2 bytes of each repository; the figure is what that repository publishes, not what our
# formula gives.
PUBLISHED_PARAMS = {
    "llama-2-7b": 6_738_415_616,  # meta-llama/Llama-2-7b-hf safetensors (total_size 13,476,831,232 B in bf16)
    "llama-2-13b": 13_015_864_320,  # meta-llama/Llama-2-13b-hf safetensors
    "llama-2-70b": 68_976_648_192,  # meta-llama/Llama-2-70b-hf safetensors
    "llama-3-8b": 8_030_261_248,  # meta-llama/Meta-Llama-3-8B safetensors
    "llama-3-70b": 70_553_706_496,  # meta-llama/Meta-Llama-3-70B safetensors
    "llama-3.1-8b": 8_030_261_248,  # meta-llama/Llama-3.1-8B safetensors: Llama-3-8B's weights' shapes
    "llama-3.1-70b": 70_553_706_496,  # meta-llama/Llama-3.1-70B safetensors
    "mistral-7b": 7_241_732_096,  # mistralai/Mistral-7B-v0.1 safetensors
    "codellama-34b": 33_743_970_304,  # codellama/CodeLlama-34b-hf; Together's model list gives the same count
    "qwen2.5-7b": 7_615_616_512,  # Qwen/Qwen2.5-7B safetensors (the card: 7.61B, 6.53B non-embedding)
    "qwen2.5-72b": 72_706_203_648,  # Qwen/Qwen2.5-72B safetensors (the card: 72.7B)
    "phi-2": 2_779_683_840,  # microsoft/phi-2 safetensors (F16 2,779,683,840)
    # internlm/internlm-20b publishes no exact count found in a public source: its card's "20B" is the figure
    "internlm-20b": 20_000_000_000,
    "mixtral-8x7b": 46_702_792_704,  # mistralai/Mixtral-8x7B-v0.1 safetensors (the card: 46.7B)
    "qwen3-32b": 32_762_123_264,  # Qwen/Qwen3-32B safetensors (BF16 32,762,123,264; the card: 32.8B)
    "qwen3-30b-a3b": 30_532_122_624,  # Qwen/Qwen3-30B-A3B-Instruct-2507 safetensors (the card: 30.5B, 3.3B active)
}

# (layers, KV heads, head dim) as each config.json gives them: num_hidden_layers, num_key_value_heads, and
# head_dim where the config gives one (Qwen3), else hidden_size / num_attention_heads
PUBLISHED_KV_SHAPE = {
    "llama-2-7b": (32, 32, 128), "llama-2-13b": (40, 40, 128), "llama-2-70b": (80, 8, 128),
    "llama-3-8b": (32, 8, 128), "llama-3-70b": (80, 8, 128), "llama-3.1-8b": (32, 8, 128),
    "llama-3.1-70b": (80, 8, 128), "mistral-7b": (32, 8, 128), "codellama-34b": (48, 8, 128),
    "qwen2.5-7b": (28, 4, 128), "qwen2.5-72b": (80, 8, 128), "internlm-20b": (60, 40, 128),
    "phi-2": (32, 32, 80), "mixtral-8x7b": (32, 8, 128), "qwen3-32b": (64, 8, 128), "qwen3-30b-a3b": (48, 4, 128),
}

# The specs shipped before these, as they counted then: a new field's default must move none of them
EARLIER_SPECS = {
    "llama-7b": (6_738_415_616, 524_288), "llama-13b": (13_015_864_320, 819_200), "llama-tiny": (139_584, 256),
    "opt-125m": (125_239_296, 36_864), "opt-1.3b": (1_315_758_080, 196_608), "opt-6.7b": (6_658_473_984, 524_288),
    "opt-13b": (12_853_473_280, 819_200), "opt-66b": (65_719_701_504, 2_359_296),
    "opt-175b": (174_604_468_224, 4_718_592), "opt-tiny": (116_352, 512),
}

# The tiny decoders of the other families, for the engine's tests: (parameters, KV bytes per token in fp16),
# counted by hand from each layout (2 layers, width 64, 4 heads of 16, 2 KV heads, MLP 128, vocabulary 512)
EMBED, HEAD, ATTENTION, SWIGLU = 512 * 64, 512 * 64, 64 * (64 + 2 * 32) + 64 * 64, 3 * 64 * 128
TINY_SPECS = {
    # llama-tiny's 139,584 and the q, k and v biases: 64 + 2 x 32 a layer
    "qwen2-tiny": (EMBED + HEAD + 2 * (ATTENTION + SWIGLU + 2 * 64 + 128) + 64, 256),
    # one LayerNorm (weight and bias) a layer, biases on q, k, v, dense, fc1, fc2, a head bias, a final LayerNorm
    "phi-tiny": (EMBED + HEAD + 512 + 2 * (ATTENTION + 2 * 64 * 128 + (64 + 64 + 64 + 128 + 64) + 2 * 64) + 128,
                 256),
    # 4 experts and a 64 x 4 router a layer in place of llama-tiny's one MLP
    "mixtral-tiny": (EMBED + HEAD + 2 * (ATTENTION + 4 * SWIGLU + 64 * 4 + 2 * 64) + 64, 256),
    # heads 32 wide: q 4 x 32 = 128 of 64 (wq 64 x 128, wk and wv 64 x 64, wo 128 x 64), two RMSNorms of 64 and the
    # QK-norm's two of 32; KV 2 x 2 layers x 2 heads x 32 x 2 bytes
    "qwen3-tiny": (EMBED + HEAD + 2 * (64 * (128 + 2 * 64) + 128 * 64 + SWIGLU + 2 * 64 + 2 * 32) + 64, 512),
    # its experts 32 wide: 4 of 3 x 64 x 32, and a 64 x 4 router
    "qwen3-moe-tiny": (EMBED + HEAD + 2 * (64 * (128 + 2 * 64) + 128 * 64 + 4 * 3 * 64 * 32 + 64 * 4 + 2 * 64
                                             + 2 * 32) + 64, 512),
}


@pytest.mark.parametrize("name", sorted(PUBLISHED_PARAMS))
def test_parameter_count_within_one_percent_of_the_published_one(name):
    published = PUBLISHED_PARAMS[name]
    assert abs(load_model_spec(name).num_params() - published) <= 0.01 * published


@pytest.mark.parametrize("name", ["llama-2-7b", "llama-3-8b", "mistral-7b", "qwen2.5-7b", "phi-2",
                                  "qwen2.5-72b", "codellama-34b", "mixtral-8x7b", "qwen3-32b", "qwen3-30b-a3b"])
def test_parameter_count_is_the_published_one_exactly(name):
    # every weight of these is counted (biases, norms, the untied head): not just near, equal
    assert load_model_spec(name).num_params() == PUBLISHED_PARAMS[name]


@pytest.mark.parametrize("name", sorted(PUBLISHED_KV_SHAPE))
def test_kv_bytes_per_token_follow_the_published_shape(name):
    layers, kv_heads, head_dim = PUBLISHED_KV_SHAPE[name]
    spec = load_model_spec(name)
    assert (spec.num_layers, spec.num_kv_heads, spec.head_dim) == (layers, kv_heads, head_dim)
    assert spec.kv_bytes_per_token(2) == layers * 2 * kv_heads * head_dim * 2


@pytest.mark.parametrize("name", sorted(EARLIER_SPECS))
def test_earlier_specs_count_as_before(name):
    spec = load_model_spec(name)
    assert (spec.num_params(), spec.kv_bytes_per_token()) == EARLIER_SPECS[name]
    assert not spec.qkv_bias and spec.sliding_window is None
    assert (spec.rope_theta, spec.partial_rotary_factor) == (10000.0, 1.0)
    assert (spec.num_experts, spec.experts_per_token) == (1, 1) and not spec.is_moe
    assert spec.active_params() == spec.num_params()
    assert spec.layer_active_linear_params() == spec.layer_linear_params()


@pytest.mark.parametrize("name", sorted(TINY_SPECS))
def test_tiny_specs_count_their_layout(name):
    spec = load_model_spec(name)
    assert (spec.num_params(), spec.kv_bytes_per_token()) == TINY_SPECS[name]


def test_rotary_keys_are_each_models_public_config():
    # rope_theta and phi-2's partial_rotary_factor as each config.json gives them (the YAMLs cite the copies)
    theta = {"llama-2-7b": 1e4, "mistral-7b": 1e4, "llama-3-8b": 5e5, "llama-3.1-70b": 5e5, "qwen2.5-7b": 1e6,
             "qwen2.5-72b": 1e6, "codellama-34b": 1e6, "mixtral-8x7b": 1e6, "phi-2": 1e4, "opt-13b": 1e4,
             "qwen3-32b": 1e6, "qwen3-30b-a3b": 1e7}
    assert {name: load_model_spec(name).rope_theta for name in theta} == theta
    phi = load_model_spec("phi-2")
    assert (phi.partial_rotary_factor, phi.rotary_dim, load_model_spec("llama-3-8b").rotary_dim) == (0.4, 32, 128)


def test_mixtral_counts_its_experts_and_its_router():
    mixtral = load_model_spec("mixtral-8x7b")
    dense = replace(mixtral, num_experts=1, experts_per_token=1)  # Mistral-7B's shape: one MLP per layer
    expert = 3 * 4096 * 14336
    assert mixtral.num_params() - dense.num_params() == 32 * (7 * expert + 4096 * 8)
    # Mistral AI's announcement gives 12.9B parameters used per token; attention, 2 experts and the router
    assert mixtral.active_params() == 12_879_925_248
    assert mixtral.active_params() - dense.num_params() == 32 * (expert + 4096 * 8)
    assert mixtral.layer_active_linear_params() == mixtral.layer_attention_params() + 2 * expert + 4096 * 8


def test_qkv_bias_is_what_separates_qwen_from_a_llama_of_its_shape():
    qwen = load_model_spec("qwen2.5-7b")
    # q: hidden; k and v: kv_dim each, per layer
    assert qwen.num_params() - replace(qwen, qkv_bias=False).num_params() == 28 * (3584 + 2 * 512)


def test_mistral_records_its_window():
    assert load_model_spec("mistral-7b").sliding_window == 4096
    assert load_model_spec("llama-3-8b").sliding_window is None


def test_names_are_the_ones_users_type():
    for name in PUBLISHED_PARAMS:
        assert (MODELS_DIR / f"{name}.yaml").exists()
        assert load_model_spec(name).name == name


@pytest.mark.parametrize("key,value,words", [
    ("qkv_bias", "yes", "true or false"),
    ("qkv_bias", 1, "true or false"),
    ("sliding_window", 0, "positive integer"),
    ("sliding_window", 40.5, "positive integer"),
    ("sliding_windw", 4096, "unknown key"),
    ("num_experts", 0, "positive integer"),
    ("experts_per_token", 9, "more than num_experts 8"),
    ("rope_theta", 0, "positive number"),
    ("rope_theta", "1e6x", "positive number"),
    ("partial_rotary_factor", 1.5, "number in (0, 1]"),
    ("partial_rotary_factor", 0.3, "whole even number"),
])
def test_bad_new_keys_are_refused_naming_them(tmp_path, key, value, words):
    raw = yaml.safe_load((MODELS_DIR / "mixtral-8x7b.yaml").read_text())
    raw[key] = value
    path = tmp_path / "my-model.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(SpecError) as err:
        load_model_spec(path)
    assert f"{path}: {key}:" in str(err.value) and words in str(err.value)


def test_the_models_page_lists_every_shipped_model():
    page = (Path(__file__).resolve().parents[3] / "docs" / "models.md").read_text()
    missing = [name for name in available_models() if f"`{name}`" not in page]
    assert not missing, f"docs/models.md does not list {missing}"
