"""Processes, reruns and outputs, as a user meets them from the command line.

An error raised in a worker reads as with --jobs 1; every error is one stderr line and an exit
status (2 user error, 130 interrupted), a traceback only with --debug; workers die with their
parent; a run with nothing to measure warns instead of crashing; a resume never reuses a run whose
inputs changed and gives the same bytes as a fresh run.
"""
from __future__ import annotations

import gzip
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from contextlib import contextmanager
from pathlib import Path

import pandas as pd
import pytest

from engine.errors import SpecError
from servesim.cli import main
from sim.capacity.search import Target, max_rate, replicas_for
from sim.experiment.config import load_experiment
from sim.experiment.run import SUMMARY_COLUMNS, run_one
from sim.experiment.sweep import sweep, sweep_rows
from tests.helpers.configs import TINY
from tests.helpers.processes import all_exit, children, reap

REPO = Path(__file__).resolve().parents[3]
JOBS = pytest.mark.parametrize("jobs", ["1", "2"])


def jobs_but_slow(slow: str):
    """--jobs 1 (this process) and 2 (a pool), the one named in the slow tier: a test of seconds keeps the other."""
    return pytest.mark.parametrize("jobs", [pytest.param(j, marks=pytest.mark.slow) if j == slow else j
                                            for j in ("1", "2")])


# long enough (a few seconds) that a signal lands while runs are still pending
SLOW = TINY.replace("duration_s: 30", "duration_s: 120").replace("rates: [1, 2]", "rates: [1, 2, 3]")


def servesim(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "servesim", *args], cwd=REPO, env=_env(), capture_output=True,
                          text=True, timeout=timeout)


def _env() -> dict:
    return {**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}


def one_error_line(result: subprocess.CompletedProcess, status: int = 2) -> str:
    assert result.returncode == status, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


@pytest.fixture
def tiny(tmp_path) -> Path:
    path = tmp_path / "tiny.yaml"
    path.write_text(textwrap.dedent(TINY))
    return path


# --- byte-identical outputs ---------------------------------------------------------------------
@jobs_but_slow("1")
def test_a_resumed_sweep_writes_the_same_bytes_as_a_fresh_one(tiny, tmp_path, jobs, capsys):
    fresh, resumed = tmp_path / "fresh", tmp_path / "resumed"
    assert main(["run", str(tiny), "--out", str(fresh), "--jobs", jobs]) == 0
    shutil.copytree(fresh, resumed)
    shutil.rmtree(resumed / "runs" / "orca-oracle_rate2_seed0")  # as if killed before the last run
    (resumed / "summary.csv").unlink()
    assert main(["run", str(tiny), "--out", str(resumed), "--jobs", jobs]) == 0
    assert "resuming: 3 of 4" in capsys.readouterr().out
    for name in ("summary.csv", "summary.txt", "runs/orca-oracle_rate2_seed0/requests.csv.gz",
                 "runs/orca-oracle_rate2_seed0/iterations.parquet"):
        assert (fresh / name).read_bytes() == (resumed / name).read_bytes(), name
    assert list(pd.read_csv(resumed / "summary.csv").columns) == list(SUMMARY_COLUMNS)


@JOBS
def test_the_rows_are_handed_over_once_every_run_is_summarized(tiny, tmp_path, jobs):
    # `servesim run` starts its figures on them: in this process before the last run's files are written
    out, handed = tmp_path / "out", []

    def summarized(rows):
        handed.append((rows, (out / "runs" / "orca-oracle_rate2_seed0" / "summary.json").exists()))
        if not resumed:  # another process's run is summarized here once it is saved
            assert handed[-1][1] == (jobs != "1")

    exp = load_experiment(tiny)
    for resumed in (0, 3, 4):  # fresh; the first run simulated again; every run resumed
        if resumed == 3:
            shutil.rmtree(out / "runs" / "vllm_rate1_seed0")
        handed.clear()
        rows = sweep_rows(exp, out, jobs=int(jobs), summarized=summarized, progress=lambda line: None)
        assert len(rows) == 4 and len(handed) == 1 and all(a is b for a, b in zip(handed[0][0], rows, strict=True))
    assert handed[0][1]  # resumed: its files were there already


def test_gzip_outputs_carry_no_name_or_time(tiny, tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    for out in (a, b):
        assert main(["run", str(tiny), "--out", str(out), "--jobs", "1", "--set", "systems=[vllm]",
                     "--iterations", "csv"]) == 0
    for name in ("requests.csv.gz", "iterations.csv.gz"):
        data = (a / "runs" / "vllm_rate1_seed0" / name).read_bytes()
        assert data == (b / "runs" / "vllm_rate1_seed0" / name).read_bytes()
        assert data[3] == 0 and data[4:8] == bytes(4)  # no FNAME flag, mtime 0
        assert gzip.decompress(data).decode().startswith(("request_id,", "replica,"))


def test_a_run_summary_has_the_summary_columns_in_order(tiny):
    exp = load_experiment(tiny)
    summary = run_one(exp, exp.systems[0], 1.0, 0).summary
    assert list(summary) == [*SUMMARY_COLUMNS, "cost_model_source"], "the cost model's whole description last"


# --- nothing to measure, nothing that holds -------------------------------------------------
@jobs_but_slow("2")
def test_a_run_with_nothing_measured_warns_and_writes_nan(tiny, tmp_path, jobs):
    out = tmp_path / "out"
    # 0.001 req/s draws no request at all; 0.5 req/s draws 15 in 30 s, none after the 27-s warm-up
    result = servesim("run", str(tiny), "--out", str(out), "--jobs", jobs, "--set", "rates=[0.001, 0.5]",
                      "--set", "warmup_s=27", "--set", "systems=[vllm]")
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    warnings = result.stderr.splitlines()
    assert len(warnings) == 2 and all(w.startswith("servesim: warning: vLLM at ") for w in warnings)
    assert "no request arrived after the 27-s warm-up (0 in the trace)" in warnings[0]
    summary = pd.read_csv(out / "summary.csv")
    assert list(summary["num_measured"]) == [0, 0] and summary["num_requests"][1] > 0
    assert summary["normalized_latency"].isna().all() and summary["ttft_p90_s"].isna().all()


def test_max_rate_refuses_a_tolerance_that_never_ends(tiny):
    exp = load_experiment(tiny)
    for tolerance in (0.0, -0.1, float("nan")):
        with pytest.raises(ValueError, match="rel_tol"):
            max_rate(exp, exp.systems[0], Target("normalized_latency", 1.0), rel_tol=tolerance)


@pytest.mark.parametrize("tolerance", ["0", "-0.05", "nan"])
def test_capacity_tolerance_must_be_positive(tiny, tmp_path, tolerance):
    out = tmp_path / "cap"
    result = servesim("capacity", str(tiny), "--target", "normalized_latency=0.1", f"--tolerance={tolerance}",
                      "--out", str(out), timeout=30)
    assert one_error_line(result).startswith("servesim: error: --tolerance: must be a positive number, got ")
    assert not out.exists()


def test_capacity_says_when_no_rate_meets_the_target(tiny, tmp_path):
    out = tmp_path / "cap"
    result = servesim("capacity", str(tiny), "--target", "normalized_latency=0.001", "--rate", "50",
                      "--set", "systems=[vllm]", "--out", str(out))
    assert result.returncode == 0, result.stderr
    # the walk down stops where no request is measured any more: lower rates would say even less
    assert "vLLM               no rate probed meets the target, down to 0.0625 req/s (normalized_latency " \
        in result.stdout
    assert "give lower rates to search below" in result.stdout
    table = pd.read_csv(out / "capacity.csv")
    assert table["max_rate_per_replica_rps"][0] == 0 and table["replicas_needed"].isna().all()
    assert set(pd.read_csv(out / "capacity_probes.csv")["replicas"]) == {1}  # no replica search


def test_replica_search_ends_without_a_count_when_none_holds(tiny):
    exp = load_experiment(tiny, ["systems=[vllm]"])
    needed, probes = replicas_for(exp, exp.systems[0], Target("normalized_latency", 0.001), rate=4,
                                  per_replica_rate=1, max_replicas=3)
    assert needed is None and [p.replicas for p in probes] == [3]  # no RuntimeError


# --- resume: fingerprints and leftovers -------------------------------------------------------
def _profiled_experiment(folder: Path) -> Path:
    """A config whose every input is a file in `folder`: model, hardware, profile and lengths."""
    shutil.copy(REPO / "engine/specs/models/opt-125m.yaml", folder / "model.yaml")
    shutil.copy(REPO / "configs/validation/cpu-host.yaml", folder / "hardware.yaml")
    shutil.copy(REPO / "calibrate/profiles/cpu-opt-125m.yaml", folder / "profile.yaml")
    shutil.copy(REPO / "configs/validation/cpu-opt-125m-lengths.csv", folder / "lengths.csv")
    (folder / "trace.csv").write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n" + "".join(
        f"{i * 0.5},{20 + i},{10 + i}\n" for i in range(20)))
    config = folder / "exp.yaml"
    config.write_text(textwrap.dedent("""
        name: files
        model: model.yaml
        hardware: hardware.yaml
        dtype_bytes: 4
        kv_cache_gib: 0.5
        cost_model: profile.yaml
        workload:
          dataset: lengths.csv
          duration_s: 10
        systems: [vllm]
        rates: [2]
        warmup_s: 1
        """))
    return config


EDITS = {  # each changes what a run reads, and nothing in the config
    "lengths": ("lengths.csv", lambda text: text + "100,50\n", []),
    "trace": ("trace.csv", lambda text: text.replace("0.5,21,11", "0.5,400,11"), ["--set", "workload.trace=trace.csv"]),
    "profile": ("profile.yaml", lambda text: text + "# recalibrated: even a comment changes the file\n", []),
    "model": ("model.yaml", lambda text: text.replace("vocab_size: 50272", "vocab_size: 50000"), []),
    "hardware": ("hardware.yaml", lambda text: text.replace("pcie_bytes_per_s: 1.0e+10", "pcie_bytes_per_s: 2.0e+10"),
                 []),
}


# one file edited in the default tier, each in the slow tier
@pytest.mark.parametrize("edited", [e if e == "profile" else pytest.param(e, marks=pytest.mark.slow)
                                    for e in sorted(EDITS)])
@JOBS
def test_editing_a_file_the_run_reads_reruns_it(tmp_path, edited, jobs, capsys):
    config = _profiled_experiment(tmp_path)
    name, edit, extra = EDITS[edited]
    args = ["run", str(config), "--out", str(tmp_path / "out"), "--jobs", jobs, *extra]
    assert main(args) == 0
    assert main(args) == 0
    assert "resuming: 1 of 1" in capsys.readouterr().out  # unchanged: reused
    before = (tmp_path / name).read_text()
    (tmp_path / name).write_text(edit(before))
    assert (tmp_path / name).read_text() != before
    assert main(args) == 0
    assert "resuming" not in capsys.readouterr().out  # changed: simulated again


@jobs_but_slow("2")
def test_stale_temporaries_are_removed_and_nothing_else(tiny, tmp_path, jobs):
    out = tmp_path / "out"
    assert main(["run", str(tiny), "--out", str(out), "--jobs", jobs]) == 0
    run_dir = out / "runs" / "vllm_rate1_seed0"
    stale = [run_dir / ".summary.json.k3j_9x2a.tmp", out / ".summary.csv.0a1b2c3d.tmp"]
    kept = [run_dir / "notes.tmp", out / ".keep"]
    for path in stale + kept:
        path.write_text("left by a killed run")
    assert main(["run", str(tiny), "--out", str(out), "--jobs", jobs]) == 0
    assert not any(p.exists() for p in stale) and all(p.exists() for p in kept)


@JOBS
def test_out_pointing_at_a_file_is_refused_before_simulating(tiny, tmp_path, jobs):
    target = tmp_path / "results.txt"
    target.write_text("keep me")
    for out in (target, target / "sub"):
        result = servesim("run", str(tiny), "--out", str(out), "--jobs", jobs)
        assert one_error_line(result) == f"servesim: error: --out: {target} is a file, not a folder"
        assert result.stdout == ""  # not one run simulated
    assert target.read_text() == "keep me"


# --- errors across processes -----------------------------------------------------------------
@pytest.fixture
def worker_error(tmp_path) -> Path:
    """A config that loads but that every run's worker stops on: a compute efficiency so small
    (valid: in (0, 1]) that every step takes inf seconds, which the simulator's clock refuses.
    (A bad trace, such as arrivals going 0.1, 0.5, 0.3, is refused at load, before any worker.)"""
    path = tmp_path / "worker-error.yaml"
    path.write_text(TINY + "cost_model: {kind: roofline, compute_efficiency: 5.0e-324}\n")
    return path


WORKER_ERROR = ("servesim: error: roofline(a100-40gb, tp=1, compute_eff=5e-324, bw_eff=0.76, overhead_s=0.0, "
                "block_read=3.68 tokens, swap_latency_s=5e-06): step time inf s for a batch of 1 prefills")


@JOBS
def test_an_error_in_a_worker_reads_as_with_one_job(worker_error, tmp_path, jobs):
    out = tmp_path / "out"
    line = one_error_line(servesim("run", str(worker_error), "--out", str(out), "--jobs", jobs))
    assert line.startswith(WORKER_ERROR) and line.endswith("every step must take a finite, non-negative number "
                                                           "of seconds"), line
    assert not out.exists()  # nothing half-written


def test_the_sweep_raises_the_workers_error_itself(worker_error, tmp_path):
    exp = load_experiment(worker_error)
    errors = []
    for jobs in (1, 2):
        with pytest.raises(SpecError) as err:
            sweep(exp, tmp_path / f"out{jobs}", jobs=jobs, progress=lambda line: None)
        errors.append((type(err.value), err.value.source, err.value.key, str(err.value)))
    assert errors[0] == errors[1]


@JOBS
def test_debug_shows_the_traceback(worker_error, tmp_path, jobs):
    result = servesim("run", str(worker_error), "--out", str(tmp_path / "out"), "--jobs", jobs, "--debug")
    assert result.returncode == 2
    assert "Traceback" in result.stderr and "SpecError" in result.stderr
    assert result.stderr.splitlines()[-1].startswith("servesim: error: ")


def test_a_bug_is_one_line_with_exit_1(tiny, tmp_path, monkeypatch, capsys):
    def broken(*args):
        raise RuntimeError("boom")

    monkeypatch.setattr("sim.experiment.sweep.run_one", broken)
    assert main(["run", str(tiny), "--out", str(tmp_path / "out"), "--jobs", "1"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "internal error: RuntimeError: boom" in err and "--debug" in err


# --- signals and worker processes -----------------------------------------------------------
def _as_from_a_terminal() -> None:
    # a test runner started in the background (CI, nohup, `&`) ignores SIGINT, and a child inherits
    # that: Python then never raises KeyboardInterrupt. A user's terminal does not ignore it.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _start(config: Path, out: Path, jobs: str) -> subprocess.Popen:
    # its own session, so that a signal to the group reaches the workers too, as Ctrl-C does
    return subprocess.Popen([sys.executable, "-m", "servesim", "run", str(config), "--out", str(out), "--jobs", jobs],
                            cwd=REPO, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, preexec_fn=_as_from_a_terminal)


def _wait_for_first_run(proc: subprocess.Popen) -> None:
    for line in proc.stdout:
        if "normalized latency" in line:  # a progress line: one run done, more pending
            return
    raise AssertionError(f"the sweep ended before a run finished: {proc.stderr.read()}")





@pytest.fixture(scope="module")
def slow_reference(tmp_path_factory) -> tuple[Path, bytes]:
    """The slow sweep, uninterrupted: what every interrupted-then-resumed one must write."""
    folder = tmp_path_factory.mktemp("slow")
    config = folder / "slow.yaml"
    config.write_text(textwrap.dedent(SLOW))
    assert main(["run", str(config), "--out", str(folder / "out"), "--jobs", "1"]) == 0
    return config, (folder / "out" / "summary.csv").read_bytes()


def _resume_matches(config: Path, out: Path, reference: bytes, jobs: str) -> None:
    result = servesim("run", str(config), "--out", str(out), "--jobs", jobs)
    assert result.returncode == 0, result.stderr
    assert "resuming: " in result.stdout
    assert not list(out.rglob(".*.tmp"))  # what the kill left half-written is gone
    assert (out / "summary.csv").read_bytes() == reference


@contextmanager
def _interrupted_sweep(config: Path, out: Path, jobs: str):
    """A sweep started, and caught once its first run is done; yields it with its workers' pids.
    Whatever it leaves running is killed at the end, so that a failing test leaves no orphan."""
    proc = _start(config, out, jobs)
    workers: list[int] = []
    try:
        _wait_for_first_run(proc)
        workers = children(proc.pid)
        yield proc, workers
    finally:
        reap(proc, workers)


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")
@jobs_but_slow("1")
def test_ctrl_c_exits_130_in_one_line_and_stops_the_workers(slow_reference, tmp_path, jobs):
    config, reference = slow_reference
    with _interrupted_sweep(config, tmp_path / "out", jobs) as (proc, workers):
        assert len(workers) == (2 if jobs == "2" else 0) + 1  # and the process that will draw the plots
        os.killpg(proc.pid, signal.SIGINT)
        assert proc.wait(timeout=60) == 130
        assert all_exit(workers, within_s=10.0), "workers outlived their parent"
        assert proc.stderr.read() == "servesim: interrupted\n"
    _resume_matches(config, tmp_path / "out", reference, jobs)


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")
@jobs_but_slow("2")
def test_a_burst_of_interrupts_still_ends_in_one_line(slow_reference, tmp_path, jobs):
    # `timeout -s INT` signals the command and then its group, and users press Ctrl-C again while a command
    # cleans up: the signals after the first land in the pools' shutdown and in the interpreter's exit
    config, _ = slow_reference
    with _interrupted_sweep(config, tmp_path / "out", jobs) as (proc, workers):
        deadline = time.monotonic() + 30
        while proc.poll() is None and time.monotonic() < deadline:
            os.killpg(proc.pid, signal.SIGINT)
            time.sleep(0.002)
        assert proc.wait(timeout=60) == 130
        assert all_exit(workers, within_s=10.0), "workers outlived their parent"
        assert proc.stderr.read() == "servesim: interrupted\n"


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")
@jobs_but_slow("1")
def test_sigkill_leaves_no_worker_and_the_rerun_resumes(slow_reference, tmp_path, jobs):
    config, reference = slow_reference
    with _interrupted_sweep(config, tmp_path / "out", jobs) as (proc, workers):
        assert len(workers) == (2 if jobs == "2" else 0) + 1  # and the process that will draw the plots
        proc.kill()
        proc.wait(timeout=60)
        assert all_exit(workers, within_s=10.0), "workers outlived their parent"
    _resume_matches(config, tmp_path / "out", reference, jobs)
