"""The LLMServingSim bundle reader (calibrate/tables/llmservingsim_bundle.py): a small hand-written bundle read exactly,
and every malformed one refused in one line naming the file, the row and the column (or the key)."""
from pathlib import Path

import pytest

from calibrate.tables.llmservingsim_bundle import is_bundle, read_bundle
from engine.errors import SpecError

META = """\
profiler_version: 1.0.0
vllm_version: 0.19.0
cuda_version: '13.0'
gpu: NVIDIA RTX PRO 6000 Blackwell Server Edition
hardware: RTXPRO6000
profiled_at: '2026-04-24T12:44:27+00:00'
architecture: llama
model: meta-llama/Llama-3.1-8B
variant: bf16
tp_degrees: [1, 2]
engine_effective:
  block_size: 16
  hf_overrides: {num_hidden_layers: 1, intermediate_size: 7168, num_attention_heads: 16, num_key_value_heads: 4,
                 vocab_size: 64128}
measurement_iterations: 3
"""
DENSE = "layer,tokens,time_us\nqkv_proj,1,36.5\nqkv_proj,64,40.25\nlayernorm,1,2.5\n"
PER_SEQUENCE = "layer,sequences,time_us\nlm_head,1,714.0\nsampler,1,24.75\n"
ATTENTION = "prefill_chunk,kv_prefill,n_decode,kv_decode,time_us\n0,0,1,16,8.5\n16,0,0,0,7.75\n16,512,4,128,20.0\n"
MOE = "tokens,activated_experts,time_us\n1,8,50.25\n"


def write_bundle(folder: Path, meta: str = META, files: dict[str, str] | None = None, tps=(1, 2)) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "meta.yaml").write_text(meta)
    tables = {"dense.csv": DENSE, "per_sequence.csv": PER_SEQUENCE, "attention.csv": ATTENTION, **(files or {})}
    for tp in tps:
        (folder / f"tp{tp}").mkdir(exist_ok=True)
        for name, text in tables.items():
            if text is not None:
                (folder / f"tp{tp}" / name).write_text(text)
    return folder


def test_a_hand_written_bundle_reads_exactly(tmp_path):
    folder = write_bundle(tmp_path / "bf16", files={"moe.csv": MOE}, tps=(1, 2))
    assert is_bundle(folder) and not is_bundle(folder / "tp1")
    bundle = read_bundle(folder)
    assert (bundle.gpu, bundle.model, bundle.architecture, bundle.variant) == (
        "NVIDIA RTX PRO 6000 Blackwell Server Edition", "meta-llama/Llama-3.1-8B", "llama", "bf16")
    assert (bundle.block_size, bundle.heads, bundle.kv_heads, bundle.last_tp) == (16, 16, 4, 2)
    assert bundle.provenance == {"vllm_version": "0.19.0", "cuda_version": "13.0",
                                 "profiled_at": "2026-04-24T12:44:27+00:00", "measurement_iterations": "3"}
    assert sorted(bundle.tps) == [1, 2]
    tp1 = bundle.tps[1]
    assert tp1.dense.values.tolist() == [["qkv_proj", 1, pytest.approx(36.5e-6)],
                                         ["qkv_proj", 64, pytest.approx(40.25e-6)],
                                         ["layernorm", 1, pytest.approx(2.5e-6)]]
    assert tp1.per_sequence.values.tolist() == [["lm_head", 1, pytest.approx(714e-6)],
                                                ["sampler", 1, pytest.approx(24.75e-6)]]
    assert tp1.attention.values.tolist() == [[0, 0, 1, 16, pytest.approx(8.5e-6)],
                                             [16, 0, 0, 0, pytest.approx(7.75e-6)],
                                             [16, 512, 4, 128, pytest.approx(20e-6)]]
    assert tp1.moe.values.tolist() == [[1, 8, pytest.approx(50.25e-6)]]


def test_a_row_measured_twice_is_averaged_and_optional_tables_may_be_absent(tmp_path):
    dense = DENSE + "qkv_proj,1,37.5\n"
    meta = META.replace("tp_degrees: [1, 2]", "tp_degrees: [1]")
    bundle = read_bundle(write_bundle(tmp_path / "bf16", meta, {"dense.csv": dense, "attention.csv": None}, tps=(1,)))
    tp1 = bundle.tps[1]
    assert tp1.attention is None and tp1.moe is None
    assert tp1.dense.set_index(["layer", "tokens"])["time_s"][("qkv_proj", 1)] == pytest.approx(37e-6)


@pytest.mark.parametrize("file, text, where, words", [
    ("dense.csv", "layer,tokens\nqkv_proj,1\n", "column time_us", "missing"),
    ("dense.csv", DENSE + "qkv_proj,2,-1\n", "row 4 (line 5), column time_us", "not a number > 0"),
    ("dense.csv", DENSE + "qkv_proj,1.5,3\n", "row 4 (line 5), column tokens", "whole number"),
    ("dense.csv", DENSE + "qkv_proj,0,3\n", "row 4 (line 5), column tokens", ">= 1"),
    ("dense.csv", DENSE + "softmax,1,3\n", "row 4 (line 5), column layer", "valid: ['embedding'"),
    ("per_sequence.csv", PER_SEQUENCE + "logits,1,3\n", "row 3 (line 4), column layer", "['lm_head', 'sampler']"),
    ("attention.csv", ATTENTION + "0,0,0,0,3\n", "row 4 (line 5), column n_decode", "neither a prefill"),
    ("attention.csv", ATTENTION + "0,0,4,0,3\n", "row 4 (line 5), column kv_decode", "at least one token"),
    ("attention.csv", ATTENTION + "0,0,x,16,3\n", "row 4 (line 5), column n_decode", "whole number"),
    ("moe.csv", "tokens,activated_experts,time_us\n1,8,0\n", "row 1 (line 2), column time_us", "> 0"),
    ("dense.csv", "layer,tokens,time_us\n", "", "no rows"),
])
def test_a_malformed_table_is_one_line_naming_the_file_row_and_column(tmp_path, file, text, where, words):
    folder = write_bundle(tmp_path / "bf16", files={file: text})
    with pytest.raises(SpecError) as err:
        read_bundle(folder)
    message = str(err.value)
    assert str(folder / "tp1" / file) in message and where in message and words in message
    assert "\n" not in message


@pytest.mark.parametrize("edit, key, words", [
    (lambda m: m.replace("variant: bf16", "variant: bf16-kvfp8"), "variant", "16 bits"),
    (lambda m: m.replace("tp_degrees: [1, 2]", "tp_degrees: []"), "tp_degrees", "must list"),
    (lambda m: m.replace("tp_degrees: [1, 2]", "tp_degrees: [1, 4]"), "", "tp_degrees lists 4"),
    (lambda m: m.replace("gpu: NVIDIA RTX PRO 6000 Blackwell Server Edition\n", ""), "gpu", "non-empty text"),
    (lambda m: m.replace("num_key_value_heads: 4", "num_key_value_heads: four"),
     "engine_effective.hf_overrides.num_key_value_heads", ""),
    (lambda m: m.replace("  block_size: 16\n", ""), "engine_effective.block_size", ""),
])
def test_a_malformed_meta_is_one_line_naming_the_key(tmp_path, edit, key, words):
    folder = write_bundle(tmp_path / "bf16", meta=edit(META))
    with pytest.raises(SpecError) as err:
        read_bundle(folder)
    assert key in str(err.value) and words in str(err.value) and "\n" not in str(err.value)


def test_a_folder_without_meta_is_not_a_bundle_and_says_which_folder_to_give(tmp_path):
    folder = write_bundle(tmp_path / "bf16")
    with pytest.raises(SpecError, match="no meta.yaml in it .*variant folder"):
        read_bundle(folder / "tp1")
    (folder / "tp1" / "dense.csv").unlink()
    with pytest.raises(SpecError, match="dense.csv.*not found"):
        read_bundle(folder)
