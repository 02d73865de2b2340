"""Host models: the reader of Vidur's cpu_overheads.csv, the fit and its held-out error, the shipped models."""
from __future__ import annotations

import math

import numpy as np
import pytest
import yaml

from calibrate.fitting.host_model_fit import (
    TERM_FEATURES,
    fit_host_model,
    fit_terms,
    heldout_errors,
    heldout_predictions,
    largest_batches,
    model_folds,
)
from calibrate.fitting.profile_file import load_profile
from calibrate.parts.host import HOST_TERMS, host_time
from calibrate.parts.host_model import (
    HostModel,
    available_host_models,
    charged_host,
    host_model_path,
    load_host_model,
    save_host_model,
)
from calibrate.tables.host_table import CSV_MODELS, TERM_COLUMNS, read_host_table
from calibrate.work.host_features import ModelSize
from engine.errors import SpecError
from engine.specs.loader import available_models, load_model_spec
from tests.calibrate.synthetic_host import TRUE_TERMS, rows, write_table

SHIPPED = ("servesim-cpu-engine", "vllm-0.19", "vllm-a100-2024-01", "vllm-a100-2024-05", "vllm-v1-2026")


# --- the reader ---------------------------------------------------------------------------------------------
def test_both_spellings_read_the_same(tmp_path):
    may = read_host_table(write_table(tmp_path / "may.csv"))
    january = read_host_table(write_table(tmp_path / "jan.csv", upper=True, comm="RAY_COMM_TIME_MEDIAN"))
    assert may.columns["worker_comm"] == "ray_comm_time_mean"
    assert january.columns["worker_comm"] == "ray_comm_time_median"
    assert january.columns["schedule"] == "schedule_median"
    for term in TERM_COLUMNS:
        np.testing.assert_array_equal(may.seconds[term], january.seconds[term])
    assert may.models == january.models and len(may) == len(rows())
    assert may.lines[0] == 2  # the header is line 1
    expected = rows()[0][3]["sampler"]
    assert may.seconds["sampler"][0] == pytest.approx(expected, rel=1e-15)


def test_the_mean_of_worker_comm_is_read_where_the_file_has_both(tmp_path):
    path = write_table(tmp_path / "t.csv", comm="ray_comm_time_median", extra={"ray_comm_time_mean": "9.0"})
    table = read_host_table(path)
    assert table.columns["worker_comm"] == "ray_comm_time_mean"
    np.testing.assert_allclose(table.seconds["worker_comm"], 9e-3, rtol=1e-15)


def _edit(path, line: int, column: str, value: str):
    lines = path.read_text().splitlines()
    header = lines[0].split(",")
    fields = lines[line - 1].split(",")
    fields[[h.lower() for h in header].index(column)] = value
    lines[line - 1] = ",".join(fields)
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("column, value, message", [
    ("sampler_e2e_median", "fast", "'fast' is not a number"),
    ("schedule_median", "-0.2", "negative"),
    ("process_model_outputs_median", "nan", "not a finite number"),
    ("ray_comm_time_mean", "", "'' is not a number"),
    ("model_name", "acme/unknown-7b", "size this reader does not know"),
    ("batch_size", "8.5", "positive whole number, got '8.5'"),
    ("batch_size", "0", "positive whole number"),
    ("tensor_parallel_degree", "two", "positive whole number, got 'two'"),
])
def test_a_bad_value_is_refused_naming_file_line_and_column(tmp_path, column, value, message):
    path = _edit(write_table(tmp_path / "bad.csv"), 5, column, value)
    with pytest.raises(SpecError, match=message) as err:
        read_host_table(path)
    assert err.value.source == str(path) and err.value.key == f"line 5, column {column}"
    assert "\n" not in str(err.value)


def test_a_missing_column_is_refused_naming_it(tmp_path):
    path = write_table(tmp_path / "t.csv")
    text = path.read_text().replace("prepare_inputs_e2e_median", "prepare_inputs_e2e_p50")
    path.write_text(text)
    with pytest.raises(SpecError) as err:
        read_host_table(path)
    assert err.value.key == "column prepare_inputs_e2e_median" and "missing" in err.value.message
    path.write_text(text.replace("prepare_inputs_e2e_p50", "prepare_inputs_e2e_median").replace(
        "ray_comm_time_mean", "comm"))
    with pytest.raises(SpecError, match="ray_comm_time_mean or ray_comm_time_median"):
        read_host_table(path)


@pytest.mark.parametrize("text, key, message", [
    ("", "", "empty"),
    ("model_name,batch_size,tensor_parallel_degree\n", "column schedule_median", "missing"),
    ("Model_Name,model_name\n", "column model_name", "appears twice"),
])
def test_an_empty_or_odd_header_is_refused(tmp_path, text, key, message):
    path = tmp_path / "t.csv"
    path.write_text(text)
    with pytest.raises(SpecError, match=message) as err:
        read_host_table(path)
    assert err.value.key == key


def test_a_short_row_and_a_headers_only_file_are_refused(tmp_path):
    path = write_table(tmp_path / "t.csv")
    lines = path.read_text().splitlines()
    path.write_text("\n".join(lines[:3] + [lines[3].rsplit(",", 1)[0]]) + "\n")
    with pytest.raises(SpecError, match="fields; the header names") as err:
        read_host_table(path)
    assert err.value.key == "line 4"
    path.write_text(lines[0] + "\n")
    with pytest.raises(SpecError, match="no rows"):
        read_host_table(path)


def test_a_folder_a_missing_file_and_binary_bytes_are_refused(tmp_path):
    with pytest.raises(SpecError, match="folder"):
        read_host_table(tmp_path)
    with pytest.raises(SpecError, match="not found"):
        read_host_table(tmp_path / "none.csv")
    (tmp_path / "b.csv").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(SpecError, match="UTF-8"):
        read_host_table(tmp_path / "b.csv")


# --- the fit --------------------------------------------------------------------------------------------------
def test_the_fit_recovers_known_coefficients(tmp_path):
    table = read_host_table(write_table(tmp_path / "t.csv"))
    fitted = fit_terms(table)
    for term, features in TERM_FEATURES.items():
        for feature in features:
            assert fitted[term][feature] == pytest.approx(TRUE_TERMS[term].get(feature, 0.0), rel=1e-6, abs=1e-12)
    errors = heldout_errors(table)
    assert errors["leave_one_model_out"]["mean_abs_error"] < 1e-9
    assert errors["largest_batches"]["mean_abs_error"] < 1e-9


def test_a_size_the_rows_do_not_vary_is_not_fitted(tmp_path):
    """One vocabulary in the rows: the vocabulary's features stay 0, and the plain ones carry the cost."""
    llamas = [m for m in CSV_MODELS if CSV_MODELS[m].vocab_size == 32000]
    table = read_host_table(write_table(tmp_path / "t.csv", rows(models=llamas)))
    sampler = fit_terms(table)["sampler"]
    assert sampler["per_iteration_per_kvocab_s"] == 0 and sampler["per_sequence_per_kvocab_s"] == 0
    assert sampler["per_iteration_s"] == pytest.approx(350e-6 + 3e-6 * 32, rel=1e-6)


def _poisoned(tmp_path, held):
    """The synthetic rows, the held-out ones' times x100."""
    poisoned = [(m, b, tp, {t: s * 100 for t, s in secs.items()}) if held(m, b) else (m, b, tp, secs)
                for m, b, tp, secs in rows()]
    return read_host_table(write_table(tmp_path / "poisoned.csv", poisoned))


def test_the_largest_batches_fit_never_sees_them(tmp_path):
    clean = read_host_table(write_table(tmp_path / "t.csv"))
    poisoned = _poisoned(tmp_path, lambda m, b: b == max(b for _, b, _, _ in rows()))
    held = largest_batches(poisoned)
    assert held.sum() == len(CSV_MODELS) * 3
    assert fit_terms(poisoned.select(~held)) == fit_terms(clean.select(~held))
    np.testing.assert_array_equal(heldout_predictions(poisoned)["largest_batches"][held],
                                  heldout_predictions(clean)["largest_batches"][held])
    assert heldout_errors(poisoned)["largest_batches"]["mean_abs_error"] == pytest.approx(0.99)


def test_a_held_out_model_is_never_seen(tmp_path):
    clean = read_host_table(write_table(tmp_path / "t.csv"))
    poisoned = _poisoned(tmp_path, lambda m, b: m == "Qwen/Qwen-72B")
    held = model_folds(poisoned)["Qwen/Qwen-72B"]
    np.testing.assert_array_equal(heldout_predictions(poisoned)["leave_one_model_out"][held],
                                  heldout_predictions(clean)["leave_one_model_out"][held])
    by_model = heldout_errors(poisoned)["leave_one_model_out"]["by_model"]
    assert by_model["Qwen/Qwen-72B"] == pytest.approx(0.99)


def test_a_fitted_model_saves_and_loads_as_it_was(tmp_path):
    table = read_host_table(write_table(tmp_path / "t.csv"))
    model = fit_host_model(table, "synthetic", "a made-up engine: for the test", "tests", "none")
    save_host_model(model, tmp_path / "m.yaml", "made by the test")
    loaded = load_host_model(tmp_path / "m.yaml")
    assert loaded == model
    assert loaded.what == "a made-up engine"
    assert (tmp_path / "m.yaml").read_text().startswith("# servesim host model: synthetic")


# --- the model: resolution and breakdown ------------------------------------------------------------------------
def test_resolve_and_breakdown_add_up_to_the_charged_host_time(tmp_path):
    table = read_host_table(write_table(tmp_path / "t.csv"))
    model = fit_host_model(table, "synthetic", "x", "tests", "none")
    for name, size in CSV_MODELS.items():
        for tp in (1, 2, 4, 8):
            host = model.resolve(size, tp)
            assert set(host) == set(HOST_TERMS)
            for seqs in (1, 8, 200):
                parts = model.breakdown(size, tp, seqs, num_prefill_tokens=37)
                assert set(parts) == set(TERM_COLUMNS)
                assert math.fsum(parts.values()) == pytest.approx(host_time(host, seqs, 37), rel=1e-12)
                if name == "Qwen/Qwen-72B" and tp in (1, 2) and seqs == 8:
                    truth = math.fsum(_true(term, size, tp, seqs) for term in TRUE_TERMS)
                    assert host_time(host, seqs, 37) == pytest.approx(truth, rel=1e-6)


def _true(term, size, tp, seqs):
    from calibrate.work.host_features import FEATURES, SEQUENCE

    return sum(c * FEATURES[f].scale(size, tp) * (seqs if FEATURES[f].paid == SEQUENCE else 1)
               for f, c in TRUE_TERMS[term].items())


def test_worker_comm_grows_with_workers_as_fitted():
    model = load_host_model("vllm-a100-2024-01")
    size = ModelSize(32000, 4096)
    comm = {tp: model.breakdown(size, tp, 32)["worker_comm"] for tp in (1, 2, 4, 8)}
    assert comm[1] < comm[2] < comm[4] < comm[8]
    assert comm[2] - comm[1] > 1e-3  # going past one worker costs milliseconds in this engine


# --- the shipped models --------------------------------------------------------------------------------------
def test_the_shipped_host_models_are_the_five_named():
    assert tuple(available_host_models()) == SHIPPED


@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_host_model_resolves_for_every_shipped_model(name):
    model = load_host_model(name)
    assert model.source.strip() and model.licence.strip() and model.heldout
    for spec_name in available_models():
        spec = load_model_spec(spec_name)
        for tp in (1, 2, 4, 8):
            host = model.resolve(spec, tp)
            assert set(host) == set(HOST_TERMS)
            assert all(math.isfinite(v) and v >= 0 for v in host.values()), (spec_name, tp, host)
            assert host_time(host, 64, 0) > 0


# Llama-2-7B at tensor_parallel 1, batch 8 and 64: the files' totals (the four medians and worker_comm), in seconds
MEASURED_LLAMA2_7B = {"vllm-a100-2024-01": {8: 2.127e-3, 64: 8.048e-3},
                      "vllm-a100-2024-05": {8: 1.394e-3, 64: 4.084e-3}}


@pytest.mark.parametrize("name", sorted(MEASURED_LLAMA2_7B))
def test_the_vidur_host_models_keep_their_held_out_errors_and_source(name):
    model = load_host_model(name)
    assert "microsoft/vidur" in model.source and "MIT" in model.licence
    heldout = model.heldout
    assert heldout["leave_one_model_out"]["mean_abs_error"] <= heldout["target_mean_abs_error"]
    assert heldout["largest_batches"]["mean_abs_error"] <= heldout["target_mean_abs_error"]
    llama = ModelSize(32000, 4096)
    for batch, measured in MEASURED_LLAMA2_7B[name].items():
        assert host_time(model.resolve(llama, 1), batch, 0) == pytest.approx(measured, rel=0.1)


def test_the_cpu_engine_host_model_is_the_cpu_profiles_host_part():
    model = load_host_model("servesim-cpu-engine")
    profile = load_profile("calibrate/profiles/cpu-opt-125m.yaml")
    assert model.terms == {"engine": {term: profile.host[term] for term in HOST_TERMS}}
    assert model.heldout["mean_abs_error"] == profile.host["heldout_mape"]
    assert model.resolve(load_model_spec("opt-13b"), 4) == {term: profile.host[term] for term in HOST_TERMS}


def test_charged_host_names_the_model_and_what_it_measured():
    spec = load_model_spec("llama-7b")
    host, named = charged_host(host_model_path("vllm-v1-2026"), spec, 1)
    assert named.startswith("host: vllm-v1-2026 (vLLM V1's engine core") and ":" not in named[6:]
    assert host == load_host_model("vllm-v1-2026").resolve(spec, 1)


# --- bad host model files --------------------------------------------------------------------------------------
def _shipped_raw():
    return yaml.safe_load(host_model_path("vllm-v1-2026").read_text())


@pytest.mark.parametrize("change, key, message", [
    (lambda r: r.update(format="servesim-host-model/9"), "format", "must be"),
    (lambda r: r.pop("licence"), "licence", "missing"),
    (lambda r: r.update(extra=1), "extra", "unknown key"),
    (lambda r: r["terms"]["schedule"].update(per_token_s=1.0), "terms.schedule.per_token_s", "unknown key"),
    (lambda r: r["terms"]["schedule"].update(per_iteration_s=-1.0), "terms.schedule.per_iteration_s",
     "non-negative"),
    (lambda r: r.update(terms={}), "terms", "must map"),
])
def test_a_bad_host_model_file_is_refused_naming_its_key(tmp_path, change, key, message):
    raw = _shipped_raw()
    change(raw)
    path = tmp_path / "h.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(SpecError, match=message) as err:
        load_host_model(path)
    assert err.value.source == str(path) and err.value.key == key


def test_an_unknown_host_model_name_lists_the_shipped():
    with pytest.raises(SpecError, match="unknown host model; shipped: ") as err:
        load_host_model("vllm-a100-2099")
    assert all(name in str(err.value) for name in SHIPPED)


def test_a_host_model_round_trips_through_its_dict():
    model = load_host_model("vllm-a100-2024-05")
    assert HostModel.from_dict(model.to_dict(), "x") == model


# --- the commands ---------------------------------------------------------------------------------------------
def test_calibrate_host_fits_writes_and_shows_a_host_model(tmp_path, capsys):
    from servesim.cli import main

    table = write_table(tmp_path / "t.csv")
    out = tmp_path / "mine.yaml"
    assert main(["calibrate", "host", str(table), "--name", "mine", "--source", "synthetic", "--licence", "none",
                 "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "leave one model out: 0.0% (target <= 10%)" in printed and f"wrote {out}" in printed
    assert load_host_model(out).name == "mine"
    assert "# made by: servesim calibrate host" in out.read_text()
    assert main(["calibrate", "show", str(out)]) == 0
    assert capsys.readouterr().out.startswith("host model mine: the serving engine's host work")
    assert main(["calibrate", "show", "vllm-v1-2026"]) == 0
    assert "prepare_inputs:" in capsys.readouterr().out


def test_calibrate_host_refuses_a_bad_table_in_one_line(tmp_path, capsys):
    from servesim.cli import main

    table = _edit(write_table(tmp_path / "t.csv"), 3, "batch_size", "-8")
    code = main(["calibrate", "host", str(table), "--name", "x", "--source", "s", "--licence", "l",
                 "--out", str(tmp_path / "x.yaml")])
    err = capsys.readouterr().err
    assert code != 0 and "line 3, column batch_size" in err and not (tmp_path / "x.yaml").exists()
