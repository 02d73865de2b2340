"""summary.csv counts the requests dropped unserved: num_ignored and num_aborted, always present, 0 where none."""
from __future__ import annotations

from dataclasses import astuple
from pathlib import Path

from engine.core.records import DroppedRecord
from sim.core.simulate import simulate
from sim.experiment.config import load_experiment
from sim.experiment.metrics import SUMMARY_METRICS, dropped_counts, summarize
from sim.workload.trace import Trace
from tests.helpers.simulation import MODEL, ROOFLINE, random_trace

ROOT = Path(__file__).resolve().parents[3]


def test_a_separate_run_counts_its_too_long_requests_as_ignored():
    base = random_trace(2, count=40)
    output = base.output_len.copy()
    output[[3, 17]] = MODEL.max_seq_len  # with their prompts, over the model's max_seq_len
    trace = Trace(base.arrival_s, base.prompt_len, output, base.n, source="test")
    system = next(s for s in load_experiment(ROOT / "configs/examples/vllm_policies.yaml").systems
                  if s.prefill_policy == "separate")
    records = simulate(trace, MODEL, system, ROOFLINE, 400, 400)
    summary = summarize(records.request_arrays(), records.iteration_arrays(), pool_slots=400 * 16, warmup_s=0.0,
                        horizon_s=1e9, dropped=records.dropped_values)
    assert (summary["num_ignored"], summary["num_aborted"], summary["num_requests"]) == (2, 0, 38)
    assert list(summary) == list(SUMMARY_METRICS)
    assert SUMMARY_METRICS.index("num_ignored") == SUMMARY_METRICS.index("prefix_hit_rate") + 1


def test_nothing_dropped_counts_zero_and_each_status_counts_apart():
    assert dropped_counts([]) == {"num_ignored": 0, "num_aborted": 0}
    values = [astuple(DroppedRecord(i, 0, 0.0, None, 1.0, 10, 5, 1, 0, status))
              for i, status in enumerate(["aborted", "ignored", "aborted"])]
    assert dropped_counts(values) == {"num_ignored": 1, "num_aborted": 2}
