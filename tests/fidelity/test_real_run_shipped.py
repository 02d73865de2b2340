"""The four shipped runs are found in the package and read as their publisher read them: each run's vLLM column of
its validation/summary.txt (LLMServingSim's TTFT, TPOT and latency statistics, ms to one decimal) is reproduced
from its requests.jsonl by servesim's reader and comparison."""
from __future__ import annotations

import re

import pytest

from fidelity.runs.comparison import statistic
from fidelity.runs.read import read_run
from fidelity.runs.shipped import shipped_runs

RUNS = [f"vllm-0.19-llmservingsim/{run}" for run in ("RTX4090/Llama-3.1-8B", "RTXPRO6000/Llama-3.1-8B",
                                                     "RTXPRO6000/Qwen3-32B", "RTXPRO6000/Qwen3-30B-A3B-Instruct-2507")]
STATS = {"Mean": "mean", "Median": "p50", "P90": "p90", "P95": "p95", "P99": "p99"}
METRICS = {"TTFT": "ttft_s", "TPOT": "tpot_s", "Latency": "e2e_s"}


def test_the_four_runs_are_shipped():
    assert sorted(shipped_runs()) == sorted(RUNS)


@pytest.mark.parametrize("name", RUNS)
def test_the_publishers_real_figures_are_reproduced(name):
    run = read_run(name)  # a shipped run's name, as the command line takes it
    assert len(run.requests) == 300 and run.workload is not None
    published = (shipped_runs()[name] / "validation" / "summary.txt").read_text()
    compared = 0
    for line in published.splitlines():
        found = re.match(r"(TTFT|TPOT|Latency) (Mean|Median|P90|P95|P99)\s+([0-9.]+)", line)
        if not found:
            continue
        metric, stat, value = found.groups()
        ours = statistic(getattr(run.requests, METRICS[metric]), STATS[stat]) * 1000
        assert f"{ours:.1f}" == value, (name, metric, stat)
        compared += 1
    assert compared == 15  # three metrics, five statistics
