"""Reruns and outputs, as a user meets them from the command line (issue 11).

A resume gives the same bytes as a fresh run.
"""
from __future__ import annotations

import gzip
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest

from sim.cli import main
from sim.config import load_experiment
from sim.run import SUMMARY_COLUMNS, run_one

REPO = Path(__file__).resolve().parents[2]
JOBS = pytest.mark.parametrize("jobs", ["1", "2"])

TINY = """
name: tiny
model: opt-13b
hardware: a100-40gb
kv_cache_gib: 12
workload:
  dataset: sharegpt-standin
  duration_s: 30
systems: [vllm, orca-oracle]
rates: [1, 2]
warmup_s: 5
"""
# long enough (a few seconds) that a signal lands while runs are still pending
SLOW = TINY.replace("duration_s: 30", "duration_s: 120").replace("rates: [1, 2]", "rates: [1, 2, 3]")


def servesim(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sim.cli", *args], cwd=REPO, env=_env(), capture_output=True,
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
@JOBS
def test_a_resumed_sweep_writes_the_same_bytes_as_a_fresh_one(tiny, tmp_path, jobs, capsys):
    fresh, resumed = tmp_path / "fresh", tmp_path / "resumed"
    assert main(["run", str(tiny), "--out", str(fresh), "--jobs", jobs]) == 0
    shutil.copytree(fresh, resumed)
    shutil.rmtree(resumed / "runs" / "orca-oracle_rate2_seed0")  # as if killed before the last run
    (resumed / "summary.csv").unlink()
    assert main(["run", str(tiny), "--out", str(resumed), "--jobs", jobs]) == 0
    assert "resuming: 3 of 4" in capsys.readouterr().out
    for name in ("summary.csv", "summary.txt", "runs/orca-oracle_rate2_seed0/requests.csv.gz",
                 "runs/orca-oracle_rate2_seed0/iterations.csv.gz"):
        assert (fresh / name).read_bytes() == (resumed / name).read_bytes(), name
    assert list(pd.read_csv(resumed / "summary.csv").columns) == list(SUMMARY_COLUMNS)


def test_gzip_outputs_carry_no_name_or_time(tiny, tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    for out in (a, b):
        assert main(["run", str(tiny), "--out", str(out), "--jobs", "1", "--set", "systems=[vllm]"]) == 0
    for name in ("requests.csv.gz", "iterations.csv.gz"):
        data = (a / "runs" / "vllm_rate1_seed0" / name).read_bytes()
        assert data == (b / "runs" / "vllm_rate1_seed0" / name).read_bytes()
        assert data[3] == 0 and data[4:8] == bytes(4)  # no FNAME flag, mtime 0
        assert gzip.decompress(data).decode().startswith(("request_id,", "replica,"))


def test_a_run_summary_has_the_summary_columns_in_order(tiny):
    exp = load_experiment(tiny)
    assert list(run_one(exp, exp.systems[0], 1.0, 0).summary) == list(SUMMARY_COLUMNS)
