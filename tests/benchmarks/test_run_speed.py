"""benchmarks/speed/run_speed.py at a tiny scale, against a baseline's code: each whole `servesim run` of the
baseline's export alternates with this checkout's, and baseline / this is printed (never a time asserted)."""
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
def test_a_short_run_is_timed_beside_the_baselines_code_pinned_to_one_core():
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short=9", "HEAD"], capture_output=True, text=True)
    if head.returncode:
        pytest.skip("not a git checkout: no baseline to export")
    if not hasattr(os, "sched_getaffinity"):
        pytest.skip("no processor affinity on this platform")
    core = min(os.sched_getaffinity(0))
    env = {**os.environ, PURE_ENV: "1"}
    result = subprocess.run([sys.executable, str(REPO / "benchmarks" / "speed" / "run_speed.py"), "--traces",
                             "llama-7b", "--formats", "none", "--builds", "pure", "--repeats", "2", "--duration-s",
                             "120", "--baseline", "HEAD", "--core", str(core)], env=env, cwd=REPO,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert f"every run pinned to CPU {core}" in out and f"baseline: HEAD ({head.stdout.strip()})" in out
    runs = re.findall(r"^llama-7b none +pure +(this|baseline) +run \d: ", out, re.M)
    assert runs == ["baseline", "this"] * 2  # alternating, the baseline first
    assert re.search(r"^  --iterations none +pure +this .* baseline / this = [\d.]+x$", out, re.M), out
    for code in ("this", "baseline"):
        assert re.search(rf"^trace=llama-7b iterations=none build=pure code={code} wall_s=[\d.]+ peak_rss_mb=[\d.]+$",
                         out, re.M), out
