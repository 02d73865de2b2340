"""benchmarks/speed/sim_speed.py at a tiny scale, against a baseline's code: the baseline is exported and timed beside
this checkout's, and both recorded the same (never a time asserted)."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from engine.core.compiled import PURE_ENV

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_a_tiny_fleet_is_timed_beside_the_baselines_code():
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short=9", "HEAD"], capture_output=True, text=True)
    if head.returncode:
        pytest.skip("not a git checkout: no baseline to export")
    env = {**os.environ, PURE_ENV: "1", "PYTHONPATH": str(REPO)}
    script = REPO / "benchmarks" / "speed" / "sim_speed.py"
    result = subprocess.run([sys.executable, str(script), "fleet", "--fleet-duration-s",
                             "0.5", "--repeats", "2", "--jobs", "1", "--baseline", "HEAD"], env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert len(re.findall(r"^baseline round \d: this fleet [\d.]+ s, baseline fleet [\d.]+ s$", out, re.M)) == 2
    for way in ("fast", "step"):
        assert re.search(rf"^fleet +{way} +[\d.]+ +\d+% +[\d.]+ +\d+% +[\d.]+x  True$", out, re.M), out
    line = re.search(r"^baseline name=fleet ref=(\w+) build=pure fast_s=[\d.]+ base_fast_s=[\d.]+ step_s=[\d.]+ "
                     r"base_step_s=[\d.]+ speedup=[\d.]+ same=True$", out, re.M)
    assert line and line.group(1) == head.stdout.strip()


def test_a_compiled_baseline_needs_this_checkouts_build_current():
    env = {**os.environ, PURE_ENV: "1", "PYTHONPATH": str(REPO)}
    script = REPO / "benchmarks" / "speed" / "sim_speed.py"
    result = subprocess.run([sys.executable, str(script), "fleet", "--fleet-duration-s", "0.5", "--no-pure",
                             "--jobs", "1", "--baseline", "HEAD", "--baseline-build", "compiled"], env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode != 0
    assert "--baseline-build compiled: this checkout's control plane is pure Python" in result.stderr, result.stderr
