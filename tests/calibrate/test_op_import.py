"""`servesim calibrate import`: per-operation tables whose linear part is known come back as that linear part."""
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest
import yaml

from calibrate.clock.roofline import RooflineCostModel
from calibrate.cost_models.profile_model import ProfileCostModel, transferred_roofline
from calibrate.fitting.op_fit import fit_linear, octave_weights
from calibrate.fitting.profile_file import load_profile
from calibrate.hardware.hardware import load_hardware
from calibrate.judging.op_import import import_profile
from calibrate.parts.linear_model import LinearFit
from calibrate.tables.op_table import read_op_table
from calibrate.work.layer_ops import LayerShape
from engine.core.batch import Batch
from engine.errors import SpecError
from engine.specs.loader import load_model_spec
from servesim.cli import main
from tests.calibrate.synthetic_ops import (
    HARDWARE,
    MODELS,
    TRUE_FIT,
    assert_same_fit,
    table,
    write_all_reduce,
    write_tables,
)

CPU_PROFILE = Path(__file__).resolve().parents[2] / "calibrate" / "profiles" / "cpu-opt-125m.yaml"


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    folder = tmp_path_factory.mktemp("vidur")
    tables = write_tables(folder)
    all_reduce = write_all_reduce(folder / "all_reduce.csv")
    result = import_profile(tables, all_reduce, "llama-7b", HARDWARE, "test", provenance={"source": "synthetic"})
    return folder, tables, result


def test_the_fit_recovers_the_linear_part_the_tables_were_made_from(imported):
    _, _, result = imported
    assert_same_fit(result.fit, TRUE_FIT)


def test_held_out_errors_of_an_exact_table_are_nil_and_todays_roofline_is_not(imported):
    _, _, result = imported
    for errors in (result.by_model, result.by_tp):
        summary = errors.summary()
        assert summary["per_iteration"]["mape"] < 1e-6 and summary["per_op_all"]["mape"] < 1e-6
    # every model and tp degree was held out once: each row has a held-out prediction
    assert set(result.by_model.layers["model"]) == set(MODELS)
    assert set(result.by_tp.layers["tp"]) == {1, 2}
    roofline = result.roofline.summary()
    assert roofline["per_op"]["add"] == pytest.approx(1.0)  # charges no elementwise kernel
    assert roofline["per_iteration"]["mape"] > 0.05


def test_the_profile_keeps_the_fit_the_table_of_its_model_and_the_provenance(imported, tmp_path):
    _, tables, result = imported
    path = tmp_path / "a100.yaml"
    result.profile.save(path)
    profile = load_profile(path)
    assert_same_fit(LinearFit.from_dict(profile.linear), TRUE_FIT)
    assert profile.model == "llama-7b" and profile.device == "cuda" and profile.provenance["source"] == "synthetic"
    assert profile.provenance["tables"] == [p.name for p in tables]
    assert profile.heldout_mape < 1e-6 and sorted(profile.all_reduce) == [2, 4]
    # the token-cost table: llama-7b's 32 layers of one layer's operations, plus the embedding, at tp 1
    shape = MODELS["meta-llama_Llama-2-7b-hf"]
    ops = read_op_table(tables[0]).ops
    assert read_op_table(tables[0]).shape == shape
    at_64 = ops[(ops["tp"] == 1) & (ops["tokens"] == 64)].set_index("op")["time_s"]
    expected = 32 * (at_64.sum() - at_64["emb"]) + at_64["emb"]
    assert profile.token_costs_s[profile.token_knots.index(64)] == pytest.approx(expected, rel=1e-12)


def test_the_roofline_charges_what_the_fit_predicts_per_layer(imported):
    """The cost model and the fit count one layer's work alike: without an LM head, an iteration's linear
    part is layers x the fit's per-layer prediction, plus the embedding and the head's matmul latency."""
    _, tables, result = imported
    spec = load_model_spec("llama-7b")
    headless = replace(spec, vocab_size=0)
    hw = load_hardware(HARDWARE)
    cost = RooflineCostModel(headless, hw, linear=result.fit)
    ops = read_op_table(tables[0]).ops
    for tokens in (1, 64, 512):
        rows = ops[(ops["tp"] == 1) & (ops["tokens"] == tokens)]
        layer = result.fit.predict_layers(rows, hw)["predicted_s"].iloc[0]
        emb = result.fit.elementwise_time("emb", rows[rows["op"] == "emb"]["moved_bytes"], hw)[0]
        batch = Batch(prefill_seq_ids=[0], prefill_lens=[tokens], prefill_sample_ids=[(0,)])
        attention = tokens * tokens * cost._s_per_prompt_sq
        expected = 32 * layer + emb + result.fit.gemm_latency_s + attention
        # logits rows cost nothing without a head; only the prompt's attention is on top
        assert cost.iteration_time(batch) == pytest.approx(expected, rel=1e-9)


def test_the_cli_imports_shows_and_the_profile_transfers_but_does_not_load_as_an_iteration_profile(
        imported, tmp_path, capsys):
    folder, tables, _ = imported
    out = tmp_path / "a100-linear.yaml"
    args = ["calibrate", "import", *map(str, tables), "--all-reduce", str(folder / "all_reduce.csv"),
            "--model", "llama-7b", "--measured-on", HARDWARE, "--source", "synthetic", "--licence", "MIT",
            "--out", str(out)]
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "held out by model" in printed and "today's roofline" in printed and "ridge efficiency 0.700" in printed
    assert main(["calibrate", "show", str(out)]) == 0
    shown = capsys.readouterr().out
    assert "linear part" in shown and "all-reduce measured on [2, 4] GPUs" in shown and "licence: MIT" in shown

    opt13b, a100 = load_model_spec("opt-13b"), load_hardware("a100-40gb")
    cost = transferred_roofline(out, None, opt13b, a100, 2, 2, 16)
    assert "measured in a100-linear.yaml" in cost.source and "all-reduce measured on 2 GPUs" in cost.source
    decode = Batch(decode_seq_ids=[0], decode_context_lens=[512])
    assert cost.iteration_time(decode) > opt13b.weight_bytes(2) / 2 / a100.hbm_bytes_per_s
    with pytest.raises(SpecError, match=r"only the linear .*\{kind: transfer"):
        ProfileCostModel.from_profile(out, load_model_spec("llama-7b"))


@pytest.mark.slow
def test_host_work_from_another_profile_is_charged_in_series(imported, tmp_path):
    _, tables, _ = imported
    host = {"per_iteration_s": 2e-4, "per_sequence_s": 3e-6, "per_prefill_token_s": 5e-7,
            "heldout_mean_abs_error_s": 1e-5, "mean_s": 2.5e-4, "rows": 40}
    cpu = tmp_path / "cpu.yaml"
    cpu.write_text(yaml.safe_dump({**yaml.safe_load(CPU_PROFILE.read_text()), "host": host}))
    result = import_profile(tables, None, "llama-7b", HARDWARE, "test", host_profile=str(cpu))
    assert result.profile.host["per_sequence_s"] == 3e-6 and "cpu.yaml" in result.profile.host["source"]
    path = tmp_path / "with-host.yaml"
    result.profile.save(path)
    cost = transferred_roofline(path, None, load_model_spec("llama-7b"), load_hardware(HARDWARE), 1, 2, 16)
    batch = Batch(prefill_seq_ids=[0], prefill_lens=[100], prefill_sample_ids=[(0,)],
                  decode_seq_ids=[1, 2], decode_context_lens=[50, 60])
    with_host = cost.iteration_time(batch)
    cost.charge_host = False  # a validation whose real clock is the forward alone
    assert with_host - cost.iteration_time(batch) == pytest.approx(2e-4 + 3 * 3e-6 + 100 * 5e-7)
    assert "host work in series" in cost.source
    # a profile that did not measure host work (one fitted before host terms) is no source of it
    no_host = tmp_path / "no-host.yaml"
    no_host.write_text(yaml.safe_dump({k: v for k, v in yaml.safe_load(CPU_PROFILE.read_text()).items()
                                       if k != "host"}))
    with pytest.raises(SpecError, match="did not measure the engine's host work"):
        import_profile(tables, None, "llama-7b", HARDWARE, "test", host_profile=str(no_host))


@pytest.mark.parametrize("column", ["time_stats.mlp_up_proj.median", "n_embd", "num_tensor_parallel_workers"])
def test_a_table_missing_a_column_is_refused_in_one_line_naming_file_and_column(tmp_path, column):
    path = tmp_path / "broken.mlp.csv"
    table(MODELS["synthetic_plain-3b"]).drop(columns=[column]).to_csv(path, index=False)
    with pytest.raises(SpecError) as err:
        read_op_table(path)
    message = str(err.value)
    assert str(path) in message and f"column {column}: missing" in message and "\n" not in message
    assert main(["calibrate", "import", str(path), str(path), "--model", "llama-7b",
                 "--out", str(tmp_path / "x.yaml")]) == 2  # the CLI's user-error status, one line


def test_a_table_without_an_elementwise_kernel_is_read_as_a_model_that_does_not_run_it(tmp_path):
    """phi-2's parallel block has one norm: its table has no post_attention_layernorm column."""
    path = tmp_path / "microsoft_phi-2.mlp.csv"
    table(MODELS["synthetic_plain-3b"]).drop(columns=["time_stats.post_attention_layernorm.median"]).to_csv(path)
    ops = read_op_table(path).ops
    assert "post_attention_layernorm" not in set(ops["op"]) and "input_layernorm" in set(ops["op"])


def test_bad_values_and_duplicate_or_lone_tables_are_refused(tmp_path):
    shape = MODELS["synthetic_plain-3b"]
    bad = table(shape).astype({"time_stats.add.median": object})
    bad.loc[3, "time_stats.add.median"] = "slow"
    path = tmp_path / "bad.mlp.csv"
    bad.to_csv(path, index=False)
    with pytest.raises(SpecError, match=r"row 4, column time_stats.add.median: 'slow' is not a positive number"):
        read_op_table(path)
    mixed = pd.concat([table(shape), table(LayerShape(4096, 32, 32, 11008, True))])
    mixed.to_csv(path, index=False)
    with pytest.raises(SpecError, match="column n_embd: one table measures one model"):
        read_op_table(path)
    one = write_tables(tmp_path, {"synthetic_plain-3b": shape})
    with pytest.raises(SpecError, match="at least two models"):
        import_profile(one, None, "llama-7b", HARDWARE, "test")
    with pytest.raises(SpecError, match="one table per model"):
        import_profile(one + one, None, "llama-7b", HARDWARE, "test")
    other = write_tables(tmp_path, {"synthetic_gqa-20b": MODELS["synthetic_gqa-20b"]})
    with pytest.raises(SpecError, match="no table measures llama-7b's layers"):
        import_profile(one + other, None, "llama-7b", HARDWARE, "test")


def test_every_octave_of_token_counts_weighs_alike():
    weights = octave_weights([1, 2, 3, 4, 5, 6, 7, 8])
    assert list(weights) == [1.0, 0.5, 0.5, 0.25, 0.25, 0.25, 0.25, 1.0]


def test_a_fit_on_one_tp_degree_predicts_another(tmp_path):
    """Work splits across GPUs as calibrate/work/layer_ops.py says: a fit on tp 1 alone prices tp 4 exactly."""
    hw = load_hardware(HARDWARE)
    ops = pd.concat([read_op_table(p).ops for p in write_tables(tmp_path, tps=(1,))])
    fit = fit_linear(ops, hw)
    assert_same_fit(fit, TRUE_FIT)
    shape = MODELS["synthetic_gqa-20b"]
    path = tmp_path / "tp4.mlp.csv"
    table(shape, tps=(4,)).to_csv(path, index=False)
    tp4 = read_op_table(path).ops
    assert fit.predict_ops(tp4, hw) == pytest.approx(tp4["time_s"].to_numpy(), rel=1e-6)
    assert set(tp4["op"]) == set(TRUE_FIT.elementwise) | {"attn_pre_proj", "attn_post_proj", "mlp_up_proj",
                                                           "mlp_down_proj"}


@pytest.mark.parametrize("edit, key", [
    (lambda raw: raw["linear"].update(ridge_efficiency=1.5), "linear.ridge_efficiency"),
    (lambda raw: raw["linear"].update(gemm_latency_s=-1e-6), "linear.gemm_latency_s"),
    (lambda raw: raw["linear"]["elementwise"].update(softmax={"latency_s": 1e-6, "bandwidth_efficiency": 0.5}),
     "linear.elementwise.softmax"),
    (lambda raw: raw["all_reduce"][2].update(time_s=[-1.0] * len(raw["all_reduce"][2]["time_s"])),
     "all_reduce.2.time_s"),
    (lambda raw: raw.update(provenance="vidur"), "provenance"),
])
def test_a_broken_imported_profile_is_refused_naming_the_field(imported, tmp_path, edit, key):
    _, _, result = imported
    path = tmp_path / "a100.yaml"
    result.profile.save(path)
    raw = yaml.safe_load(path.read_text())
    edit(raw)
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(SpecError, match=f"a100.yaml: {key}"):
        load_profile(path)
