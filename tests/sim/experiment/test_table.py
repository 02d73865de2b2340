"""A run's tables are written without pandas (sim/experiment/table.py): the bytes must be the ones pandas'
to_csv writes, the summary table's means pandas' group means, and the metrics those of the frames."""
import io
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.experiment.config import load_experiment
from sim.experiment.metrics import summarize
from sim.experiment.output import columns_csv_gz_bytes, csv_gz_bytes, iterations_bytes
from sim.experiment.run import simulate_trace, trace_for
from sim.experiment.sweep import summary_columns, summary_frame
from sim.experiment.table import group_means, infer_column, rows_to_columns, write_csv_text

CONFIG = Path(__file__).resolve().parents[3] / "configs" / "quickstart.yaml"


def pandas_csv(frame: pd.DataFrame) -> str:
    out = io.StringIO()
    frame.to_csv(out, index=False)
    return out.getvalue()


def our_csv(columns) -> str:
    out = io.StringIO()
    write_csv_text(columns, out)
    return out.getvalue()


def as_frame(rows: list[dict], names: list[str]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=names)


floats = st.floats(allow_nan=True, allow_infinity=True, width=64)
values = st.one_of(floats, st.integers(-2**62, 2**62), st.booleans(), st.none(),
                   st.text(alphabet='ab ,"\n1.', max_size=5))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(values, min_size=3, max_size=3), min_size=0, max_size=6),
       st.sampled_from(["float", "int", "bool", "mixed"]))
def test_rows_are_written_as_pandas_writes_them(raw, kind):
    """Columns of each kind pandas infers (bool, int64, float64 with NaN, object), quoting included."""
    names = ["a", "b", "c"]
    if kind == "float":
        raw = [[v if isinstance(v, float) or v is None else 0.5 for v in row] for row in raw]
    elif kind == "int":
        raw = [[v if isinstance(v, int) and not isinstance(v, bool) else 7 for v in row] for row in raw]
    elif kind == "bool":
        raw = [[v if isinstance(v, bool) else True for v in row] for row in raw]
    rows = [dict(zip(names, row)) for row in raw]
    assert our_csv(rows_to_columns(rows, names)) == pandas_csv(as_frame(rows, names))


@settings(max_examples=200, deadline=None)
@given(st.lists(floats, max_size=8))
def test_floats_keep_the_shortest_text_and_nan_is_empty(column):
    frame = pd.DataFrame({"x": np.array(column, dtype=np.float64)})
    assert our_csv({"x": np.array(column, dtype=np.float64)}) == pandas_csv(frame)


def test_ints_and_floats_mixed_are_floats_and_none_alone_is_empty():
    rows = [{"rate": 1, "n": None, "s": "x,y"}, {"rate": 2.5, "n": None, "s": 'say "hi"'}]
    names = ["rate", "n", "s"]
    assert infer_column([1, 2.5]).dtype == np.float64
    text = our_csv(rows_to_columns(rows, names))
    assert text == pandas_csv(as_frame(rows, names))
    assert text.splitlines()[1] == '1.0,,"x,y"'


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["vLLM", "Orca (Max)"]), st.sampled_from([0.5, 1.0, 2.0]),
                          st.one_of(st.floats(-1e6, 1e6), st.just(math.nan)), st.integers(0, 50)),
                min_size=1, max_size=12))
def test_group_means_are_pandas_means_to_the_bit(rows):
    rows = [dict(system=s, rate=r, x=x, k=k) for s, r, x, k in rows]
    ours = group_means(rows_to_columns(rows, ["system", "rate", "x", "k"]), ["system", "rate"], ["x", "k"])
    theirs = as_frame(rows, ["system", "rate", "x", "k"]).groupby(["system", "rate"], sort=False)[
        ["x", "k"]].mean().reset_index()
    assert len(ours) == len(theirs)
    for mine, (_, row) in zip(ours, theirs.iterrows()):
        assert (mine["system"], mine["rate"]) == (row["system"], row["rate"])
        for name in ("x", "k"):
            assert mine[name] == row[name] or (math.isnan(mine[name]) and math.isnan(row[name])), name


@pytest.fixture(scope="module")
def saturated_records():
    """A short vLLM run past its capacity: unfinished requests (empty finish fields), preemptions."""
    exp = load_experiment(CONFIG, ["systems=[vllm]", "rates=[12.0]", "workload.duration_s=90",
                                                      "max_time_factor=1.0"])
    system = exp.systems[0]
    rng = np.random.default_rng(0)
    records, horizon_s = simulate_trace(exp, system, trace_for(exp, 12.0, 0, rng), rng=rng)
    return exp, system, records, horizon_s


def test_a_runs_records_are_written_and_summarized_as_from_the_frames(saturated_records):
    exp, system, records, horizon_s = saturated_records
    requests, iterations = records.request_arrays(), records.iteration_arrays()
    assert np.isnan(requests["finish_s"]).any()  # the case with empty fields
    assert columns_csv_gz_bytes(requests) == csv_gz_bytes(records.requests_frame())
    assert iterations_bytes(iterations, "csv") == csv_gz_bytes(records.iterations_frame())
    kwargs = dict(pool_slots=exp.kv_pool(system).num_slots, horizon_s=horizon_s)
    for warmup_s in (0.0, exp.warmup_s, 1e9):  # all measured, some, none (NaN metrics)
        ours = summarize(requests, iterations, warmup_s=warmup_s, **kwargs)
        theirs = summarize(records.requests_frame(), records.iterations_frame(), warmup_s=warmup_s, **kwargs)
        assert pd.Series(ours).equals(pd.Series(theirs)), warmup_s
        assert [type(v) for v in ours.values()] == [type(v) for v in theirs.values()]


def test_the_summary_rows_are_written_as_the_frame(saturated_records):
    exp, system, records, horizon_s = saturated_records
    metrics = summarize(records.request_arrays(), records.iteration_arrays(), pool_slots=exp.kv_pool(system).num_slots,
                        warmup_s=exp.warmup_s, horizon_s=horizon_s)
    rows = [{"experiment": exp.name, "system": name, "model": "m", "hardware": "h", "tensor_parallel": 1,
             "replicas": 1, "workload": "w, x", "cost_model": "c", "rate": rate, "seed": seed, **metrics,
             "config_digest": "d"} for name in ("vLLM", "Orca (Max)") for rate in (1, 2.5) for seed in (0, 1)]
    assert our_csv(summary_columns(rows)) == pandas_csv(summary_frame(rows))
