"""The surfaces beside a config, at random, as test_config_fuzz.py does for configs: capacity's search and
arguments, trace rows, calibrate CSVs and command-line flags. Every input either gives the right answer or a one-line
user error (a SpecError, exit 2); never a traceback, a wrap-around or a search without end.

Bounded for CI: derandomized, a few dozen examples each, and the commands stop (a sentinel raised in place
of their work) once their arguments pass the door, so no example simulates for long.
"""
from __future__ import annotations

import math
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from engine.errors import SpecError, Unservable
from servesim.cli import main
from sim.capacity.parallel import Job, run_searches
from sim.capacity.search import MAX_PROBES, MIN_REL_TOL, rate_search
from sim.executors.workers import Workers
from sim.experiment.config import MAX_REQUESTS, load_experiment
from sim.experiment.metrics import SIGNED_METRICS, SUMMARY_METRICS
from sim.experiment.run import run_one
from tests.helpers.doors import FakeProbe, Reached, fake_holds, reached
from tests.helpers.hostile import TINY

FUZZ = settings(deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def _one_line_user_error(err: BaseException) -> bool:
    return isinstance(err, (SpecError, Unservable)) and "\n" not in str(err) and str(err) != ""


# --- the capacity search: ends, and right ----------------------------------------------------------
def _drive(search, answer) -> tuple[float, list[tuple[float, bool | None]]]:
    probes = []
    try:
        point = next(search)
        while True:
            assert len(probes) < MAX_PROBES, "the search did not end within MAX_PROBES"
            probes.append((point[0], answer(point[0])))
            point = search.send(probes[-1][1])
    except StopIteration as end:
        return end.value, probes


positive_rates = st.floats(min_value=1e-6, max_value=1e6)


@settings(FUZZ, max_examples=300)
@given(start=positive_rates, knee=positive_rates, info_floor=st.one_of(st.just(0.0), positive_rates),
       tolerance=st.one_of(st.just(MIN_REL_TOL), st.floats(min_value=MIN_REL_TOL, max_value=0.99)),
       ceiling=st.one_of(st.just(math.inf), positive_rates))
def test_the_rate_search_ends_with_a_rate_that_held_within_tolerance(start, knee, info_floor, tolerance, ceiling):
    """A deployment holding up to `knee` req/s, where below `info_floor` no request is measured."""
    def answer(rate: float) -> bool | None:
        return None if rate < info_floor else rate <= knee

    result, probes = _drive(rate_search(start, tolerance, 1, ceiling), answer)
    assert len(probes) <= MAX_PROBES and all(rate <= ceiling for rate, _ in probes)
    assert result == 0.0 or (result, True) in probes  # the answer is a rate seen to hold
    over = [rate for rate, held in probes if held is False and rate > result]
    if 0 < result < ceiling and over:
        high = min(over)
        assert (high - result) / high <= tolerance or np.nextafter(result, high) >= high / (1 + 4e-16) \
            or (result + high) / 2 in (result, high)
    if info_floor <= start <= knee / 2 and knee < ceiling:
        assert result > 0  # nothing measured at first sends the search up, not down to "no rate holds"
    if info_floor == 0 and start / 256 <= knee < ceiling:
        assert 0 < result <= knee and (knee - result) / knee <= tolerance * 1.0000001


class Wide(Workers):
    """In this process, but `width` wide: the search probes ahead as on that many workers."""

    def __init__(self, width: int) -> None:
        self.width = width


@pytest.mark.parametrize("width", [1, 3])
def test_no_information_answers_take_the_same_path_on_any_number_of_workers(width):
    def fake(rate: float, replicas: int) -> FakeProbe:
        held = None if rate < 0.05 else rate <= 3.3
        return FakeProbe(rate, replicas, math.nan, held)

    def search(w: int):
        job = Job(lambda: rate_search(0.01, 0.01, 1), lambda point: point, fake_holds)
        seen: list[FakeProbe] = []
        run_searches([job], fake, Wide(w), lambda i, p: seen.append(p))
        return job.result, [(p.rate, p.holds) for p in seen]

    assert search(width) == search(1)
    result, path = search(width)
    assert path[0] == (0.01, None) and 3.3 * 0.99 <= result <= 3.3


# --- capacity's arguments ------------------------------------------------------------------------------
NUMBERS = ["nan", "inf", "-inf", "-1", "0", "1e-300", "1e-20", "1e-16", "8.9e-16", "1e-9", "0.05", "0.5", "1", "2",
           "1e9", "1e308", "3.3"]


def _number(text: str) -> float:
    return float(text)


@pytest.fixture
def tiny(tmp_path, monkeypatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tiny.yaml").write_text(textwrap.dedent(TINY))
    return tmp_path


@settings(FUZZ, max_examples=40)
@given(tolerance=st.sampled_from(["0.05", "0.2", "1e-15"] * 4 + NUMBERS),
       rate=st.sampled_from([None, "2", "100"] * 4 + NUMBERS), limit=st.sampled_from(["0.1", "5"] * 4 + NUMBERS),
       seed=st.sampled_from(["0", "7", "0", "-1"]))
def test_capacity_arguments_are_refused_in_one_line_or_searched(tiny, capsys, monkeypatch, tolerance, rate, limit,
                                                               seed):
    import sim.capacity.plan

    monkeypatch.setattr(sim.capacity.plan, "run_jobs", reached)
    capsys.readouterr()  # the examples share the fixture: only this one's output
    # --opt=VALUE, as a shell user passes -inf (argparse would read `--rate -inf` as an option named -inf)
    argv = ["capacity", "tiny.yaml", f"--target=normalized_latency={limit}", f"--tolerance={tolerance}",
            f"--seed={seed}", "--out", "out", "--jobs", "1"] + ([f"--rate={rate}"] if rate is not None else [])
    valid = (MIN_REL_TOL <= _number(tolerance) < 1 and 0 < _number(limit) < math.inf and seed != "-1"
             and (rate is None or 0 < _number(rate) <= MAX_REQUESTS / 20))
    try:
        status = main(argv)
    except Reached:
        assert valid, argv
        event("searched")
        return
    err = capsys.readouterr().err
    assert not valid and status == 2 and err.count("\n") == 1 and err.startswith("servesim: error: "), (argv, err)


# --- trace rows ------------------------------------------------------------------------------------------
CELLS = ["0", "1", "10", "2047", "2048", "1e3", "12.0", "1.5", "-1", "-0", "nan", "inf", "-inf", "", "abc",
         str(2**53 - 1), str(2**53), str(2**63 - 1), str(2**63), str(2**64), "5e18", "1e20", "1e308"]
TIMES = ["0", "0.5", "1", "2", "1e-9", "-1", "nan", "inf", "1e308", "abc"]
GOOD_CELLS, GOOD_TIMES = ["1", "10", "300", "2000"], ["0", "0.5", "1", "3"]  # most rows are sane: to reach the run
REPLAY = TINY.replace("{dataset: sharegpt-standin, arrival: poisson, duration_s: 20}", "{trace: t.csv}") \
    .replace("warmup_s: 2", "warmup_s: 0")


@settings(FUZZ, max_examples=80)
@given(rows=st.lists(st.tuples(st.sampled_from(GOOD_TIMES * 6 + TIMES), st.sampled_from(GOOD_CELLS * 8 + CELLS),
                               st.sampled_from(GOOD_CELLS * 8 + CELLS),
                               st.sampled_from(["1", "2"] * 4 + ["300", str(2**63), "0", "nan"])),
                     min_size=1, max_size=4),
       with_n=st.booleans(), in_order=st.booleans())
def test_a_trace_row_is_served_by_the_documented_rule_or_refused_naming_it(tiny, rows, with_n, in_order):
    if in_order:  # most logs are in arrival order: past that check, to the counts
        rows.sort(key=lambda row: float(row[0]) if row[0] in GOOD_TIMES else -1.0)
    header = "arrived_at,num_prefill_tokens,num_decode_tokens" + (",n" if with_n else "")
    body = "\n".join(",".join(row if with_n else row[:3]) for row in rows)
    Path("t.csv").write_text(f"{header}\n{body}\n")
    Path("replay.yaml").write_text(textwrap.dedent(REPLAY))
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # a wrap-around warns before it misleads
        try:
            exp = load_experiment("replay.yaml")
            summary = run_one(exp, exp.systems[0], 1.0, 0).summary
        except Exception as err:  # noqa: BLE001 -- the assertion is the point: which errors escape
            assert _one_line_user_error(err), f"{rows} -> {type(err).__name__}: {err}"
            assert "t.csv" in str(err) or "replay.yaml" in str(err), str(err)
            event(f"refused: {str(err).split(': ', 2)[-1][:40]}")
            return
    event("served")
    served = [r for r in rows if float(r[1]) > 0 and float(r[2]) > 0 and float(r[1]) + float(r[2]) < 2048]
    assert summary["num_requests"] == len(served)
    for metric in SUMMARY_METRICS:
        value = float(summary[metric])
        signed = metric in SIGNED_METRICS
        assert math.isnan(value) or (math.isfinite(value) and (value >= 0 or signed)), f"{rows} -> {metric} = {value}"


# --- calibrate CSVs ----------------------------------------------------------------------------------------
CSV_CELLS = ["nan", "inf", "-1", "0", "1e308", "1e-300", "abc", "", "3.5", str(2**63), "float16", "opt-13b"]


@pytest.fixture(scope="module")
def raw_profile():
    from calibrate.profiling.grid import GRIDS
    from tests.helpers.synthetic_profile import synthetic_raw

    return synthetic_raw(0.02, grid=GRIDS["tiny"])


@settings(FUZZ, max_examples=40)
@given(cells=st.lists(st.tuples(st.integers(0, 15), st.integers(0, 40), st.sampled_from(CSV_CELLS)), max_size=2),
       drop=st.one_of(st.none(), st.none(), st.none(), st.integers(0, 40)),
       keep=st.one_of(st.integers(12, 16), st.integers(0, 16)),
       folds=st.one_of(st.integers(2, 12), st.integers(-1, 20)))
def test_a_calibrate_csv_is_fitted_or_refused_in_one_line(tmp_path, raw_profile, cells, drop, keep, folds):
    from calibrate.cli import check_folds, read_raw
    from calibrate.fitting.fit import check_raw, fit_profile
    from engine.specs.checks import number, option

    raw = raw_profile.astype(object).head(keep)
    for row, column, value in cells:
        if row < len(raw):
            raw.iat[row, column % raw.shape[1]] = value
    if drop is not None:
        raw = raw.drop(columns=raw.columns[drop % raw.shape[1]])
    path = tmp_path / "raw.csv"
    raw.to_csv(path, index=False)
    try:
        option(number, folds, "--folds", low=2, whole=True)
        frame = check_raw(read_raw(str(path)), str(path))
        check_folds(folds, frame, str(path))
        fitted = fit_profile(frame, str(path), "fuzz", folds=folds).profile
    except Exception as err:  # noqa: BLE001
        assert _one_line_user_error(err), f"{cells} {drop} {keep} {folds} -> {type(err).__name__}: {err}"
        event("refused")
        return
    event("fitted")
    assert all(math.isfinite(c) and c >= 0 for c in fitted.coefficients.values())
    assert all(math.isfinite(c) and c >= 0 for c in fitted.token_costs_s)
    assert math.isfinite(fitted.heldout_mape) and fitted.heldout_rows >= folds


# --- command-line flags --------------------------------------------------------------------------------
SAMPLE_FLAGS = {  # flag: values, each one a string as a shell passes it
    "--rate": ["1", "0", "-1", "nan", "inf", "1e9", "1e-300"],
    "--duration-s": ["60", "0", "-5", "nan", "1e6"],
    "--max-seq-len": ["2048", "3", "2", "0", "-5", "9223372036854775807"],
    "--n": ["1", "2", "0", "-3", "300"],
    "--beam-width": ["1", "4", "0", "-2"],
    "--prefix-tokens": ["0", "8", "-1", "2045", "100000"],
    "--seed": ["0", "5", "-1"],
    "--cv": ["1", "0", "nan", "100"],
    "--arrival": ["poisson", "gamma", "constant"],
}


@settings(FUZZ, max_examples=60)
@given(st.fixed_dictionaries({}, optional={flag: st.sampled_from(values) for flag, values in SAMPLE_FLAGS.items()}))
def test_trace_sample_flags_are_refused_in_one_line_or_sane(tiny, capsys, monkeypatch, flags):
    import sim.workload.cli

    def reached(cfg, rate, max_seq_len, rng):
        assert 0 < rate < math.inf and 3 <= max_seq_len and rate * cfg.duration_s <= MAX_REQUESTS
        assert cfg.prefix_tokens <= max_seq_len - 3 and (cfg.arrival == "gamma" or cfg.cv == 1.0)
        raise Reached

    monkeypatch.setattr(sim.workload.cli, "build_trace", reached)
    flags = {"--rate": "1", **flags}
    capsys.readouterr()
    argv = ["trace", "sample", "--out", "t.csv", "--dataset", "alpaca-standin",
            *(f"{flag}={value}" for flag, value in flags.items())]
    try:
        status = main(argv)
    except Reached:
        event("sampled")
        return
    err = capsys.readouterr().err
    assert status == 2 and err.count("\n") == 1 and err.startswith("servesim: error: "), (argv, err)
    assert not Path("t.csv").exists()


@settings(FUZZ, max_examples=30)
@given(ylim=st.sampled_from(["1", "0.5", "0", "-1", "nan", "inf", "1e-300", "1e308"]),
       jobs=st.sampled_from(["1", "2", "0", "-1"]))
def test_run_flags_are_refused_before_any_run_or_pass(tiny, capsys, monkeypatch, ylim, jobs):
    import sim.experiment.sweep

    monkeypatch.setattr(sim.experiment.sweep, "sweep_rows", reached)
    capsys.readouterr()
    valid = 0 < float(ylim) < math.inf and int(jobs) >= 0
    try:
        status = main(["run", "tiny.yaml", f"--ylim={ylim}", f"--jobs={jobs}", "--out", "out"])
    except Reached:
        assert valid
        event("ran")
        return
    err = capsys.readouterr().err
    assert not valid and status == 2 and err.count("\n") == 1, err
    assert not Path("out").exists()
