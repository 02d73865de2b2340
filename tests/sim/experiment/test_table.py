"""The one CSV writer (sim/experiment/table.py): its documented format, a frame written as its columns are, a
run's dropped requests written without pandas, and the summary table's means exact whatever the rows' order."""
import csv
import gzip
import io
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import sim.experiment.sweep as sweep
from engine.core.records import DROPPED_COLUMNS
from sim.experiment.config import load_experiment
from sim.experiment.metrics import latency_columns, request_latencies, summarize
from sim.experiment.output import columns_csv_gz_bytes, csv_gz_bytes
from sim.experiment.run import RunResult, simulate_trace, trace_for
from sim.experiment.sweep import RunKey, execute
from sim.experiment.table import group_means, infer_column, present_mean, rows_to_columns, write_csv_text

CONFIG = Path(__file__).resolve().parents[3] / "configs" / "quickstart.yaml"


def our_csv(columns) -> str:
    out = io.StringIO()
    write_csv_text(columns, out)
    return out.getvalue()


floats = st.floats(allow_nan=True, allow_infinity=True, width=64)


@settings(max_examples=200, deadline=None)
@given(st.lists(floats, max_size=8))
def test_a_float_is_its_repr_and_reads_back_the_same_and_nan_is_empty(column):
    lines = our_csv({"x": np.array(column, dtype=np.float64), "i": np.arange(len(column))}).split("\n")
    assert lines[0] == "x,i" and lines[-1] == "" and len(lines) == len(column) + 2
    for i, (value, line) in enumerate(zip(column, lines[1:])):
        field, index = line.split(",")
        assert index == str(i)
        if math.isnan(value):
            assert field == ""
        else:
            assert field == repr(value) and float(field) == value


def test_each_type_has_its_field_and_only_what_must_be_is_quoted():
    rows = [{"rate": 1, "n": None, "s": "x,y", "ok": True, "k": 3},
            {"rate": 2.5, "n": None, "s": 'say "hi"', "ok": False, "k": -4},
            {"rate": 1e-05, "n": None, "s": "a\nb", "ok": True, "k": 0}]
    names = ["rate", "n", "s", "ok", "k"]
    assert infer_column([1, 2.5]).dtype == np.float64
    assert our_csv(rows_to_columns(rows, names)) == ('rate,n,s,ok,k\n1.0,,"x,y",True,3\n2.5,,"say ""hi""",False,-4\n'
                                                      '1e-05,,"a\nb",True,0\n')


def test_a_frame_is_written_as_its_columns_with_pandas_missing_values_empty():
    frame = pd.DataFrame({"x": [0.1, math.nan], "k": pd.array([1, None], dtype="Int64"),
                          "s": pd.Series(["a", None], dtype=object), "b": [True, False]})
    text = gzip.decompress(csv_gz_bytes(frame)).decode()
    assert text == "x,k,s,b\n0.1,1,a,True\n,,,False\n"
    assert list(csv.reader(io.StringIO(text)))[1:] == [["0.1", "1", "a", "True"], ["", "", "", "False"]]


def test_a_runs_dropped_requests_are_written_without_pandas(monkeypatch):
    """dropped.csv.gz comes from the recorded values as columns: a run that dropped requests loads no pandas."""
    exp = load_experiment(CONFIG, ["systems=[vllm]", "rates=[1.0]"])
    dropped = [(3, 0, 1.5, None, 2.0, 600, 10, 1, 0, "ignored"), (8, 0, 2.25, 2.5, 3.0, 40, 9, 2, 1, "aborted")]
    result = RunResult(summary={"system": "vLLM"}, request_arrays={"request_id": np.arange(2)},
                       iteration_arrays={}, dropped_values=dropped)
    monkeypatch.setattr(sweep, "run_one", lambda *args: result)
    monkeypatch.setitem(sys.modules, "pandas", None)  # importing it now fails
    files = execute(exp, RunKey(exp.systems[0], 1.0, 0), "digest", "none").files
    text = gzip.decompress(files["dropped.csv.gz"]).decode()
    assert text.splitlines() == [",".join(DROPPED_COLUMNS), "3,0,1.5,,2.0,600,10,1,0,ignored",
                                 "8,0,2.25,2.5,3.0,40,9,2,1,aborted"]


def test_a_group_mean_is_exactly_rounded_whatever_the_order():
    rows = [{"system": "vLLM", "x": x} for x in (1e16, 1.0, -1e16, math.nan)]
    assert group_means(rows_to_columns(rows, ["system", "x"]), ["system"], ["x"]) == [{"system": "vLLM",
                                                                                     "x": 1 / 3}]
    assert math.isnan(present_mean([math.nan])) and math.isnan(present_mean([math.inf, -math.inf]))
    assert present_mean([1e308, 1e308]) == math.inf and present_mean([math.inf, 1.0]) == math.inf


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["vLLM", "Orca (Max)"]), st.sampled_from([0.5, 1.0, 2.0]),
                          st.one_of(st.floats(-1e6, 1e6), st.just(math.nan)), st.integers(0, 50)),
                min_size=1, max_size=12), st.randoms())
def test_group_means_are_the_groups_exact_means_in_first_seen_order(rows, shuffle):
    rows = [dict(system=s, rate=r, x=x, k=k) for s, r, x, k in rows]
    means = group_means(rows_to_columns(rows, ["system", "rate", "x", "k"]), ["system", "rate"], ["x", "k"])
    assert [(m["system"], m["rate"]) for m in means] == list(dict.fromkeys((r["system"], r["rate"]) for r in rows))
    for mean in means:
        group = [r for r in rows if (r["system"], r["rate"]) == (mean["system"], mean["rate"])]
        shuffle.shuffle(group)
        for name in ("x", "k"):
            present = [r[name] for r in group if not math.isnan(r[name])]
            expected = math.fsum(present) / len(present) if present else math.nan
            assert mean[name] == expected or (math.isnan(mean[name]) and math.isnan(expected)), name


@pytest.fixture(scope="module")
def saturated_records():
    """A short vLLM run past its capacity: unfinished requests (empty finish fields), preemptions."""
    exp = load_experiment(CONFIG, ["systems=[vllm]", "rates=[12.0]", "workload.duration_s=90",
                                   "max_time_factor=1.0"])
    system = exp.systems[0]
    rng = np.random.default_rng(0)
    records, horizon_s = simulate_trace(exp, system, trace_for(exp, 12.0, 0, rng), rng=rng)
    return exp, system, records, horizon_s


def test_a_runs_records_are_written_and_summarized_as_its_frames(saturated_records):
    exp, system, records, horizon_s = saturated_records
    requests, iterations = records.request_arrays(), records.iteration_arrays()
    assert np.isnan(requests["finish_s"]).any()  # the case with empty fields
    assert columns_csv_gz_bytes(requests) == csv_gz_bytes(records.requests_frame())
    kwargs = dict(pool_slots=exp.kv_pool(system).num_slots, horizon_s=horizon_s)
    for warmup_s in (0.0, exp.warmup_s, 1e9):  # all measured, some, none (NaN metrics)
        ours = summarize(requests, iterations, warmup_s=warmup_s, **kwargs)
        theirs = summarize(records.requests_frame(), records.iterations_frame(), warmup_s=warmup_s, **kwargs)
        assert pd.Series(ours).equals(pd.Series(theirs)), warmup_s
        assert [type(v) for v in ours.values()] == [type(v) for v in theirs.values()]


def test_a_frames_latencies_are_the_one_formulas(saturated_records):
    _, _, records, horizon_s = saturated_records
    frame = latency_columns(records.requests_frame(), horizon_s)
    for name, column in request_latencies(records.request_arrays(), horizon_s).items():
        np.testing.assert_array_equal(frame[name].to_numpy(), column)
    assert frame["tpot_s"].isna().any() and (frame["tpot_s"].dropna() > 0).all()
