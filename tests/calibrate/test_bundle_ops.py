"""An LLMServingSim bundle's modules as servesim's operations (calibrate/tables/bundle_ops.py): each layer lands on
the op its docstring names, with the time the op takes and the work of the op on one GPU of its tp degree."""
import pytest
from synthetic_bundle import meta_text, write_bundle

from calibrate.tables.bundle_models import bundle_model
from calibrate.tables.bundle_ops import bundle_op_table
from calibrate.tables.llmservingsim_bundle import read_bundle
from calibrate.work.layer_ops import LayerShape, gemm_work
from engine.errors import SpecError
from engine.specs.loader import load_model_spec

DENSE = """layer,tokens,time_us
qkv_proj,4,40
o_proj,4,30
gate_up_proj,4,150
down_proj,4,80
act_fn,4,3
rotary_emb,4,2.5
embedding,4,3.5
layernorm,4,2.25
final_layernorm,4,2.75
"""
PER_SEQUENCE = "layer,sequences,time_us\nlm_head,8,700\nsampler,8,26\n"


def ops_of(tmp_path, model="meta-llama/Llama-3.1-8B", dense=DENSE, tps=(1, 2)):
    files = {tp: {"dense.csv": dense, "per_sequence.csv": PER_SEQUENCE} for tp in tps}
    bundle = read_bundle(write_bundle(tmp_path / "bf16", meta_text(model, tps), files))
    table = bundle_op_table(bundle, bundle_model(bundle))
    return table, table.ops.set_index(["tp", "op"])


def test_each_layer_is_the_op_it_times_with_its_time_and_work(tmp_path):
    table, ops = ops_of(tmp_path)
    spec = load_model_spec("llama-3.1-8b")
    shape = LayerShape.of(spec)
    assert table.label == "meta-llama_Llama-3.1-8B" and table.shape == shape
    expected = {"attn_pre_proj": 40, "attn_post_proj": 30, "mlp_up_proj": 150, "mlp_down_proj": 80, "mlp_act": 3,
                "attn_rope": 2.5, "emb": 3.5, "input_layernorm": 2.25, "post_attention_layernorm": 2.25,
                "final_layernorm": 2.75, "lm_head": 700}
    for tp in (1, 2):
        times = ops.loc[tp]["time_s"]
        assert sorted(times.index) == sorted(expected)  # the sampler is not priced; no `add` (vLLM fuses it)
        for op, us in expected.items():
            assert times[op] == pytest.approx(us * 1e-6)
        for op, dims in shape.gemm_dims(tp).items():  # the matmuls' work split over tp, as the profiler emulates it
            flops, weight = gemm_work(dims, 4)
            assert (ops.loc[(tp, op), "flops"], ops.loc[(tp, op), "weight_bytes"]) == (flops, weight)
        head = ops.loc[(tp, "lm_head")]  # one row per sequence, the vocabulary split over tp
        assert head["tokens"] == 8 and head["weight_bytes"] == spec.hidden_size * (spec.vocab_size // tp) * 2
        assert head["flops"] == 2 * 8 * spec.hidden_size * (spec.vocab_size // tp)
    moved = {tp: ops.loc[tp]["moved_bytes"] for tp in (1, 2)}
    assert moved[2]["attn_rope"] == moved[1]["attn_rope"] / 2 and moved[2]["mlp_act"] == moved[1]["mlp_act"] / 2
    # the norms do not split: their copied tp 1 rows are the same work at tp 2
    assert moved[2]["input_layernorm"] == moved[1]["input_layernorm"] == 4 * 2 * 4096 * 2


def test_the_qk_norm_is_both_its_kernels_and_its_copy_at_tp_2_is_tp_1s_work(tmp_path):
    table, ops = ops_of(tmp_path, "Qwen/Qwen3-32B", DENSE + "qk_norm,4,2\n")
    assert table.shape.qk_norm and table.shape.head_width == 128
    for tp in (1, 2):
        norm = ops.loc[(tp, "qk_norm")]
        assert norm["time_s"] == pytest.approx(4e-6)  # the row is the mean of q_norm's and k_norm's calls
        assert norm["moved_bytes"] == 4 * 2 * (64 + 8) * 128 * 2  # q and k read and written, tp 1's heads


def test_a_bundle_whose_heads_are_not_its_models_is_refused_naming_the_key(tmp_path):
    meta = meta_text("meta-llama/Llama-3.1-8B", (1, 2)).replace("num_key_value_heads: 4", "num_key_value_heads: 8")
    files = {tp: {"dense.csv": DENSE, "per_sequence.csv": PER_SEQUENCE} for tp in (1, 2)}
    bundle = read_bundle(write_bundle(tmp_path / "bf16", meta, files))
    with pytest.raises(SpecError) as err:
        bundle_model(bundle)
    assert "meta.yaml" in str(err.value) and "hf_overrides.num_key_value_heads" in str(err.value)
    assert "8 at tp 2" in str(err.value) and "4 per GPU were expected" in str(err.value)


def test_an_unknown_model_names_the_known_ones(tmp_path):
    meta = meta_text("meta-llama/Llama-3.1-8B", (1,)).replace("model: meta-llama/Llama-3.1-8B", "model: org/other")
    bundle = read_bundle(write_bundle(tmp_path / "bf16", meta, {1: {"dense.csv": DENSE,
                                                                    "per_sequence.csv": PER_SEQUENCE}}))
    with pytest.raises(SpecError, match="'org/other' has no servesim model spec here; known: .*Qwen/Qwen3-32B"):
        bundle_model(bundle)
