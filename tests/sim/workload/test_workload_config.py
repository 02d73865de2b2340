"""The workload: section, validated, and the Trace it builds."""
from pathlib import Path

import numpy as np
import pytest

from engine.errors import SpecError
from sim.workload.config import WorkloadConfig, build_trace
from sim.workload.lengths import load_lengths
from sim.workload.paths import SHAREGPT_CSV
from sim.workload.recorded import read_recorded_trace
from sim.workload.trace import write_trace_csv

TRACE = "arrived_at,num_prefill_tokens,num_decode_tokens\n0,100,10\n1,200,20\n2,1900,200\n3,300,30\n4,400,40\n"


def parse(raw, base_dir=None):
    return WorkloadConfig.from_dict(raw, "exp.yaml", base_dir)


def test_defaults_are_the_papers_setup():
    cfg = parse(None)
    assert (cfg.dataset, cfg.arrival, cfg.duration_s, cfg.n, cfg.trace) == ("sharegpt", "poisson", 3600.0, None, None)


@pytest.mark.parametrize("raw, key, words", [
    ({"datset": "sharegpt"}, "workload.datset", ["unknown key", "dataset"]),
    ({"arrival": "uniform"}, "workload.arrival", ["gamma", "poisson"]),
    ({"duration_s": 0}, "workload.duration_s", ["positive"]),
    ({"duration_s": "1h"}, "workload.duration_s", ["positive"]),
    ({"cv": -1}, "workload.cv", ["[0.001, 10]"]),
    ({"cv": 1000}, "workload.cv", ["[0.001, 10]"]),
    ({"duration_s": 1e6}, "workload.duration_s", ["up to 86400"]),
    ({"duration_s": float("nan")}, "workload.duration_s", ["positive"]),
    ({"n": 0}, "workload.n", ["positive integer"]),
    ({"n": True}, "workload.n", ["positive integer"]),
    ({"n": 1.5}, "workload.n", ["positive integer"]),
    ({"dataset": "alpaca"}, "workload.dataset", ["alpaca-standin", "alpaca_data.json"]),
    ({"dataset": 3}, "workload.dataset", ["sharegpt-standin"]),
    ({"time_scale": 2}, "workload.time_scale", ["workload.trace"]),
    ({"window_s": [0, 10]}, "workload.window_s", ["workload.trace"]),
    ({"trace": "missing.csv"}, "workload.trace", ["not found"]),
])
def test_bad_values_name_the_key(raw, key, words):
    with pytest.raises(SpecError) as caught:
        parse(raw)
    assert caught.value.source == "exp.yaml" and caught.value.key == key
    for word in words:
        assert word in caught.value.message


def test_not_a_mapping():
    with pytest.raises(SpecError, match="mapping"):
        parse(["sharegpt"])


@pytest.mark.parametrize("window", [[10, 5], [1], [-1, 4], "0-10"])
def test_bad_windows(tmp_path, window):
    (tmp_path / "t.csv").write_text(TRACE)
    with pytest.raises(SpecError, match="start < end"):
        parse({"trace": "t.csv", "window_s": window}, tmp_path)


def test_relative_paths_resolve_beside_the_config_from_any_cwd(tmp_path, monkeypatch):
    (tmp_path / "lengths.csv").write_text("prompt_len,output_len\n5,7\n")
    monkeypatch.chdir(tmp_path.parent)
    assert parse({"dataset": "lengths.csv"}, tmp_path).dataset == str(tmp_path / "lengths.csv")


def test_relative_paths_fall_back_to_the_current_directory(tmp_path, monkeypatch):
    (tmp_path / "traces").mkdir()
    (tmp_path / "traces" / "mine.csv").write_text("prompt_len,output_len\n5,7\n")
    (tmp_path / "configs").mkdir()
    monkeypatch.chdir(tmp_path)
    cfg = parse({"dataset": "traces/mine.csv"}, tmp_path / "configs")
    assert cfg.dataset == str(tmp_path / "traces" / "mine.csv")


def test_relative_paths_do_not_guess_a_repo_root(tmp_path, monkeypatch):
    # from another folder, a path that exists only in the source tree is not found, and the error
    # names where it looked: beside the config, then the current directory
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SpecError) as caught:
        parse({"trace": "traces/example_bursty.csv"}, tmp_path / "configs")
    message = str(caught.value)
    assert "not found" in message and str(tmp_path / "configs" / "traces") in message
    assert message.count("example_bursty.csv") == 3  # the value, and the two places tried


def test_shipped_sharegpt_lengths_are_package_data():
    import sim.workload
    assert SHAREGPT_CSV.is_file()
    assert SHAREGPT_CSV.parent == Path(sim.workload.__file__).resolve().parent / "data"
    lengths = load_lengths("sharegpt")
    assert len(lengths) == 15270 and lengths.source == "sharegpt (sim/workload/data/sharegpt_opt.csv)"


@pytest.mark.parametrize("arrival", ["poisson", "exponential", "gamma", "constant"])
def test_generated_trace_is_seeded(tmp_path, arrival):
    shape = {"cv": 2.0} if arrival == "gamma" else {}  # cv only applies to gamma arrivals
    cfg = parse({"dataset": "sharegpt-standin", "arrival": arrival, **shape, "duration_s": 200, "n": 2})
    first = build_trace(cfg, 3.0, 2048, np.random.default_rng(5))
    again = build_trace(cfg, 3.0, 2048, np.random.default_rng(5))
    written = [write_trace_csv(t, tmp_path / f"{i}.csv").read_bytes() for i, t in enumerate((first, again))]
    assert written[0] == written[1]
    assert first.is_stand_in and first.n.tolist() == [2] * len(first)
    assert np.all(first.prompt_len + first.output_len < 2048) and first.duration_s == 200
    assert len(first) / 200 == pytest.approx(3.0, rel=0.2)


def test_generated_trace_from_a_users_lengths_file(tmp_path):
    (tmp_path / "l.csv").write_text("prompt_len,output_len\n5,7\n3000,10\n9,11\n")
    trace = build_trace(parse({"dataset": "l.csv", "duration_s": 50}, tmp_path), 2.0, 2048, np.random.default_rng(0))
    assert set(trace.prompt_len.tolist()) == {5, 9} and not trace.is_stand_in
    assert "l.csv" in trace.source and "poisson" in trace.source


def test_generated_trace_needs_a_rate():
    with pytest.raises(SpecError, match="rate"):
        build_trace(parse({"dataset": "alpaca-standin"}), None, 2048, np.random.default_rng(0))


def test_replay_with_time_scale_window_and_fit(tmp_path):
    (tmp_path / "t.csv").write_text(TRACE)
    cfg = parse({"trace": "t.csv", "window_s": [1, 5], "time_scale": 2, "n": 3}, tmp_path)
    trace = build_trace(cfg, None, 2048, np.random.default_rng(0))
    assert trace.arrival_s.tolist() == [0.0, 1.0, 1.5]       # 1, 3, 4 rebased to 0, 2, 3 then halved; 2 too long
    assert trace.prompt_len.tolist() == [200, 300, 400] and trace.n.tolist() == [3, 3, 3]


def test_replay_scaled_to_a_requested_rate(tmp_path):
    (tmp_path / "t.csv").write_text(TRACE)
    trace = build_trace(parse({"trace": "t.csv"}, tmp_path), 10.0, 4096, np.random.default_rng(0))
    assert trace.mean_rate == pytest.approx(10.0)
    assert read_recorded_trace(tmp_path / "t.csv").mean_rate == pytest.approx(5 / 4)


def test_replay_with_nothing_left(tmp_path):
    (tmp_path / "t.csv").write_text(TRACE)
    with pytest.raises(SpecError, match=r"no request of t.csv arrives in \[100, 200\)"):
        build_trace(parse({"trace": "t.csv", "window_s": [100, 200]}, tmp_path), None, 2048, np.random.default_rng(0))
