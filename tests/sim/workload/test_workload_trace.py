"""Trace values: validation, window, scaling, fitting, and the CSV round trip."""
import ast
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.workload import trace as trace_module
from sim.workload.recorded import read_recorded_trace
from sim.workload.trace import Trace, write_trace_csv


def make_trace(**overrides):
    values = dict(arrival_s=[0.0, 0.5, 1.0, 2.5, 4.0], prompt_len=[10, 20, 2000, 30, 40],
                  output_len=[5, 6, 100, 7, 8], n=None, source="test", duration_s=5.0)
    values.update(overrides)
    return Trace(**values)


def test_columns_have_fixed_dtypes_and_are_read_only():
    trace = make_trace()
    assert trace.arrival_s.dtype == np.float64 and trace.prompt_len.dtype == np.int64
    assert trace.n.tolist() == [1] * 5 and len(trace) == 5
    with pytest.raises(ValueError):
        trace.prompt_len[0] = 3


@pytest.mark.parametrize("overrides", [
    dict(arrival_s=[0.0, 2.0, 1.0, 3.0, 4.0]),     # unsorted
    dict(prompt_len=[10, 0, 1, 1, 1]),              # a request with no prompt
    dict(output_len=[1, 2, 3]),                     # columns of different lengths
    dict(duration_s=3.0),                           # ends before its last arrival
])
def test_invalid_traces_are_refused(overrides):
    with pytest.raises(ValueError):
        make_trace(**overrides)


def test_mean_rate_is_requests_over_duration():
    assert make_trace().mean_rate == pytest.approx(5 / 5.0)
    assert make_trace(duration_s=None).duration_s == 4.0


def test_window_keeps_half_open_interval_and_rebases():
    window = make_trace().window(0.5, 2.5)
    assert window.arrival_s.tolist() == [0.0, 0.5]
    assert window.prompt_len.tolist() == [20, 2000]
    assert window.duration_s == 2.0


def test_scaled_replays_at_factor_times_the_rate():
    trace = make_trace()
    fast = trace.scaled(2.0)
    assert fast.arrival_s.tolist() == [0.0, 0.25, 0.5, 1.25, 2.0]
    assert fast.mean_rate == pytest.approx(2 * trace.mean_rate)
    assert fast.prompt_len.tolist() == trace.prompt_len.tolist()


def test_fit_to_drops_rather_than_truncates():
    fitted = make_trace(prompt_len=[10, 20, 2000, 30, 2040], output_len=[5, 6, 48, 7, 8]).fit_to(2048)
    assert fitted.prompt_len.tolist() == [10, 20, 30]       # sums of exactly 2048 are dropped too
    assert fitted.output_len.tolist() == [5, 6, 7]


def test_stand_in_is_read_from_the_source_label():
    assert make_trace(source="sharegpt-standin (parametric stand-in: ...)").is_stand_in
    assert not make_trace(source="sharegpt (sim/workload/data/sharegpt_opt.csv)").is_stand_in


def test_csv_round_trip_without_n(tmp_path):
    trace = make_trace(arrival_s=[0.0, 0.1, 0.30000000000000004, 1 / 3, 4.0], source="x stand-in")
    path = write_trace_csv(trace, tmp_path / "t.csv")
    assert path.read_text().splitlines()[2] == "arrived_at,num_prefill_tokens,num_decode_tokens"
    back = read_recorded_trace(path)
    assert back.arrival_s.tolist() == trace.arrival_s.tolist()   # bit for bit
    assert back.prompt_len.tolist() == trace.prompt_len.tolist()
    assert back.output_len.tolist() == trace.output_len.tolist()
    assert back.source == trace.source and back.is_stand_in and back.duration_s == trace.duration_s
    assert [p.name for p in tmp_path.iterdir()] == ["t.csv"]       # no temporary file left behind


def test_csv_round_trip_with_n(tmp_path):
    trace = make_trace(n=[1, 2, 4, 1, 6])
    back = read_recorded_trace(write_trace_csv(trace, tmp_path / "t.csv"))
    assert "n" in (tmp_path / "t.csv").read_text().splitlines()[2].split(",")
    assert back.n.tolist() == [1, 2, 4, 1, 6]


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 1e6, allow_nan=False), st.integers(1, 4096), st.integers(1, 4096),
                          st.integers(1, 8)), min_size=1, max_size=30))
def test_csv_round_trip_property(rows):
    rows.sort()
    arrival, prompt, output, n = map(list, zip(*rows))
    trace = Trace(arrival, prompt, output, n, "prop")
    with tempfile.TemporaryDirectory() as folder:
        back = read_recorded_trace(write_trace_csv(trace, Path(folder) / "t.csv"))
    for name in ("arrival_s", "prompt_len", "output_len", "n"):
        assert getattr(back, name).tolist() == getattr(trace, name).tolist()


def test_window_without_an_end_keeps_the_last_request():
    trace = make_trace(duration_s=None)
    assert trace.window(1.0).arrival_s.tolist() == [0.0, 1.5, 3.0]


def test_trace_module_depends_on_no_other_workload_module():
    # recorded.py reads files into Traces; trace.py must not reach back (it once forwarded to it)


    tree = ast.parse(Path(trace_module.__file__).read_text())
    modules = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            modules.append("." * node.level + (node.module or ""))
        elif isinstance(node, ast.Import):
            modules.extend(alias.name for alias in node.names)
    assert not [m for m in modules if m.startswith((".", "sim"))], modules
