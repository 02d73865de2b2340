"""`servesim calibrate import --format llmservingsim`: bundles timed by a known linear part and attention fit come
back as that linear part and fit, with nil held-out errors, in a profile that prices through the transfer cost
model; the door refuses what a bundle does not carry."""
import pytest
from synthetic_bundle import TRUE_ATTENTION, TRUE_FIT, TRUE_MIXED, synthetic_bundle

from calibrate.cost_models.profile_model import transferred_roofline
from calibrate.fitting.profile_file import load_profile
from calibrate.judging.bundle_import import import_bundles
from calibrate.judging.bundle_report import bundle_report
from calibrate.parts.attention_fit import AttentionFit
from calibrate.parts.linear_model import LinearFit
from engine.errors import SpecError
from engine.specs.loader import load_model_spec
from servesim.cli import main
from tests.calibrate.synthetic_ops import assert_same_fit

# the Server Edition's peaks without its SM count: decode attention is the bytes-and-latency row the bundle was made by
SHEET = """name: no-waves
peak_flops: 483.648e+12
hbm_bytes_per_s: 1.597e+12
memory_gib: 94.97
nvlink_bytes_per_s: 64.0e+9
pcie_bytes_per_s: 64.0e+9
"""


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    folder = tmp_path_factory.mktemp("bundles")
    sheet = folder / "no-waves.yaml"
    sheet.write_text(SHEET)
    paths = [synthetic_bundle(folder / "llama" / "bf16", "meta-llama/Llama-3.1-8B", hardware=str(sheet)),
             synthetic_bundle(folder / "qwen" / "bf16", "Qwen/Qwen3-32B", hardware=str(sheet))]
    return paths, sheet, import_bundles(paths, "llama-3.1-8b", str(sheet), "test", {"source": "synthetic"})


def test_the_fit_recovers_the_linear_part_and_attention_the_bundles_were_made_from(imported):
    _, _, result = imported
    assert_same_fit(result.fit, TRUE_FIT)  # the LM head's rows among the matmuls, the QK-norm from Qwen3's rows
    got = result.attention
    for name in ("decode_latency_s", "decode_bandwidth_efficiency", "prefill_latency_s", "prefill_compute_efficiency",
                 "prefill_kv_bandwidth_efficiency", "prefill_output_bandwidth_efficiency"):
        assert getattr(got, name) == pytest.approx(getattr(TRUE_ATTENTION, name), rel=1e-6), name
    assert got.waves is None  # the sheet gives no SM count


def test_every_held_out_error_of_exact_bundles_is_nil_and_the_roofline_is_not(imported):
    _, _, result = imported
    assert set(result.heldout) == {"by_model", "by_tp", "by_octave"}
    for way in ("by_tp", "by_octave"):
        assert result.heldout[way].summary()["per_iteration"]["mape"] < 1e-6
    # Qwen3 held out, no other bundle ran its QK-norm: the fit on the rest cannot price it (charges nothing)
    per_op = result.heldout["by_model"].summary()["per_op"]
    assert per_op.pop("qk_norm") == pytest.approx(1.0) and max(per_op.values()) < 1e-6
    assert result.roofline.summary()["per_iteration"]["mape"] > 0.05
    heldout = result.attention.heldout
    for kind in ("decode", "prefill"):
        assert heldout[kind]["heldout_region"]["mean"] < 1e-6 and heldout[kind]["kfold"]["mean"] < 1e-6
    assert len(heldout["by_table"]) == 4 and max(max(e.values()) for e in heldout["by_table"].values()) < 1e-6
    # the mixed rows were made as the decode and prefill parts added, which is how the sum judges them; the sheet
    # gives no SM count, so no mixed term is fitted (its launch's waves cannot be counted)
    mixed = heldout["mixed"]
    assert mixed["sum"]["in_sample"]["mean"] < 1e-6 and mixed["sum"]["in_sample"]["rows"] == 4 * 240
    assert mixed["roofline"]["in_sample"]["mean"] > 0.05
    assert result.attention.mixed is None and "heldout_region" not in mixed


def test_the_profile_loads_and_prices_through_the_transfer(imported, tmp_path):
    paths, sheet, result = imported
    path = tmp_path / "gpu.yaml"
    result.profile.save(path)
    profile = load_profile(path)
    assert profile.host_model == "vllm-0.19" and profile.all_reduce is None
    assert profile.provenance["bundles"] == [str(p) for p in paths] and profile.provenance["source"] == "synthetic"
    assert_same_fit(LinearFit.from_dict(profile.linear), TRUE_FIT)
    assert AttentionFit.from_dict(profile.attention).decode_latency_s == pytest.approx(TRUE_ATTENTION.decode_latency_s)
    from calibrate.hardware.hardware import load_hardware

    cost = transferred_roofline(path, str(sheet), load_model_spec("qwen3-32b"), load_hardware(sheet), 2, 2, 16)
    assert "attention measured in gpu.yaml" in cost.source
    text = bundle_report(result)
    assert "held out by model" in text and "not priced: sampler" in text and "mixed rows" in text


@pytest.mark.slow
def test_the_cli_reads_bundles_and_refuses_what_they_do_not_carry(imported, tmp_path, capsys):
    paths, sheet, _ = imported
    out = tmp_path / "cli.yaml"
    bundle = synthetic_bundle(tmp_path / "llama" / "bf16", tps=(1,))  # on the Server Edition, named by its meta.yaml
    assert main(["calibrate", "import", str(bundle), "--model", "llama-3.1-8b", "--out", str(out)]) == 0
    profile = load_profile(out)
    assert profile.linear["models"] == ["meta-llama_Llama-3.1-8B"] and profile.attention["measured_on"] == (
        "rtx-pro-6000-server")
    # the Server Edition's sheet gives its SMs and L2: the mixed rows' term comes back, held out too
    mixed = AttentionFit.from_dict(profile.attention).mixed
    assert (mixed.blocks_per_sm, mixed.floor_shares) == (TRUE_MIXED.blocks_per_sm, TRUE_MIXED.floor_shares)
    for name in ("latency_s", "wave_latency_s", "empty_block_s", "bandwidth_efficiency", "miss_bandwidth_efficiency"):
        assert getattr(mixed, name) == pytest.approx(getattr(TRUE_MIXED, name), rel=1e-6), name
    judged = profile.attention["heldout"]["mixed"]
    assert judged["heldout_region"]["mean"] < 1e-6 and judged["sum"]["heldout_region"]["mean"] > 0.05
    assert "held out by octave" in capsys.readouterr().out  # one model at one tp degree: its octaves held out
    assert main(["calibrate", "import", str(paths[0]), "--model", "llama-3.1-8b", "--attention", "a.csv",
                 "--out", str(tmp_path / "x.yaml")]) == 2
    assert "--attention: not read with LLMServingSim bundles" in capsys.readouterr().err
    assert main(["calibrate", "import", str(paths[0]), str(paths[0] / "tp1" / "dense.csv"), "--model", "llama-3.1-8b",
                 "--out", str(tmp_path / "x.yaml")]) == 2
    assert "mix LLMServingSim bundle folders and per-operation tables" in capsys.readouterr().err


def test_bundles_of_two_gpus_or_of_another_gpu_than_named_are_refused(imported, tmp_path):
    paths, sheet, _ = imported
    other = synthetic_bundle(tmp_path / "b" / "bf16", "Qwen/Qwen3-30B-A3B-Instruct-2507", tps=(1,), hardware="rtx-4090")
    with pytest.raises(SpecError, match="gpu: 'NVIDIA GeForce RTX 4090', where .* was measured on 'NVIDIA RTX PRO"):
        import_bundles([paths[0], other], "llama-3.1-8b", str(sheet), "test")
    with pytest.raises(SpecError, match="is not rtx-pro-6000's device"):
        import_bundles([paths[0]], "llama-3.1-8b", "rtx-pro-6000", "test")
