"""The compiled build (mypyc) and pure Python write the very same records, on every system and workload.

Each way runs in its own process, the pure one with SERVESIM_PURE_PYTHON=1 (engine/core/compiled.py):
benchmarks/record_digests.py's scenarios (ShareGPT, Alpaca, a fleet also in two processes, the least-outstanding
router, n = 6, beams, a shared prefix, Orca, FasterTransformer, swapping, recomputing, the chatbot, a replayed
trace), step by step and fast-forwarded, a fifth as long as its default; and a whole `servesim run`, whose
summary.csv and per-run files must match byte for byte. Skipped where this checkout has no compiled build; CI
builds one.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from engine.core.compiled import COMPILED, PURE_ENV, is_compiled
from tests.helpers.configs import tiny

REPO = Path(__file__).resolve().parents[3]

pytestmark = pytest.mark.skipif(not is_compiled(), reason="no compiled build in this checkout to compare with "
                                "(pip install -e . with a C compiler builds one; CI does)")


def _run(command: list[str], pure: bool, cwd: Path = REPO) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != PURE_ENV}
    env["PYTHONPATH"] = str(REPO)
    if pure:
        env[PURE_ENV] = "1"
    result = subprocess.run([sys.executable, *command], cwd=cwd, env=env, capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, f"{command} ({'pure' if pure else 'compiled'}):\n{result.stdout}\n{result.stderr}"
    return result


def test_every_scenario_records_the_same_both_ways():
    command = [str(REPO / "benchmarks" / "record_digests.py"), "--scale", "0.2"]
    compiled, pure = (_run(command, pure).stdout.splitlines() for pure in (False, True))
    scenarios = {line.split()[0] for line in compiled}
    assert {"sharegpt", "alpaca", "fleet", "beam", "prefix", "chatbot", "replay", "swap"} <= scenarios
    assert any(line.split()[:2] == ["fleet", "jobs2"] for line in compiled)  # the fleet in 2 processes
    assert compiled == pure


def test_a_whole_run_writes_the_same_files_both_ways(tmp_path):
    config = tmp_path / "tiny.yaml"
    config.write_text(tiny(systems="[vllm, orca-max, fastertransformer]"))
    outputs, said = {}, {}
    for pure in (False, True):
        out = tmp_path / ("pure" if pure else "compiled")
        result = _run(["-m", "servesim", "run", str(config), "--out", str(out), "--no-plots"], pure, cwd=tmp_path)
        said[pure] = [line for line in result.stdout.splitlines() if "control plane:" in line]
        outputs[pure] = {p.relative_to(out): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}
    assert said[False] == [f"servesim: control plane: {COMPILED}"]
    assert said[True] == [f"servesim: control plane: pure Python ({PURE_ENV}=1)"]
    assert Path("summary.csv") in outputs[False]
    assert any(p.name.startswith("requests.csv") for p in outputs[False])
    assert outputs[False].keys() == outputs[True].keys()
    differ = [str(p) for p in outputs[False] if outputs[False][p] != outputs[True][p]]
    assert not differ, differ
