"""vLLM's benchmark figures on a hand-built client record, each a known answer worked by hand: completed requests
only, TPOT over those of more than one token, ITL pooled over every gap, numpy's population std and linear
percentiles in ms, throughputs per second of the duration, goodput under joint objectives (inclusive, a one-token
request's TPOT 0), vLLM's peak chunks a second and peak concurrency (an end before a start at the same time)."""
from __future__ import annotations

import numpy as np
import pytest

from sim.experiment.vllm_metrics import ClientView, bench_metrics

# (prompt, output, start, ttft, gaps, latency, error): times exact in binary, so the answers are too
REQUESTS = [
    (10, 3, 0.0, 0.125, [0.125, 0.25], 0.5, ""),  # TPOT (0.5 - 0.125) / 2 = 0.1875
    (20, 1, 0.25, 0.25, [], 0.25, ""),  # one token: no TPOT (0 for goodput), no gap
    (30, 0, 0.375, 0.0, [], 0.0, "aborted before it finished"),  # failed: counted as such, nowhere else
    (5, 2, 0.5, 0.25, [0.5], 0.75, ""),  # TPOT 0.5
]


def view(rows=REQUESTS) -> ClientView:
    prompt, output, start, ttft, gaps, latency, errors = zip(*rows)
    return ClientView(np.array(prompt), np.array(output), np.array(start), np.array(ttft),
                      [np.array(g, dtype=float) for g in gaps], np.array(latency), list(errors))


def test_counts_and_throughputs_are_of_the_completed_requests_per_second_of_the_duration():
    figures = bench_metrics(view(), 2.0, None)
    assert (figures["completed"], figures["failed"]) == (3, 1)
    assert (figures["total_input_tokens"], figures["total_output_tokens"]) == (35, 6)
    assert figures["request_throughput"] == 1.5 and figures["output_throughput"] == 3.0
    assert figures["total_token_throughput"] == 20.5 and figures["request_goodput"] is None


@pytest.mark.parametrize("name, mean, median, std, p90, p99", [
    ("ttft", 625 / 3, 250.0, 1000 * np.sqrt(0.03125 / 9), 250.0, 250.0),  # 0.125, 0.25, 0.25
    ("tpot", 343.75, 343.75, 156.25, 468.75, 496.875),  # 0.1875, 0.5: the two requests of more than one token
    ("itl", 875 / 3, 250.0, 1000 * np.sqrt(0.21875 / 9), 450.0, 495.0),  # 0.125, 0.25 and 0.5, pooled
    ("e2el", 500.0, 500.0, 1000 * np.sqrt(0.125 / 3), 700.0, 745.0),  # 0.5, 0.25, 0.75
])
def test_each_latency_is_summarized_in_ms_as_numpy_summarizes_it(name, mean, median, std, p90, p99):
    figures = bench_metrics(view(), 2.0, None)
    assert figures[f"mean_{name}_ms"] == pytest.approx(mean, rel=1e-12)
    assert figures[f"median_{name}_ms"] == pytest.approx(median, rel=1e-12)
    assert figures[f"std_{name}_ms"] == pytest.approx(std, rel=1e-12)
    assert figures[f"p90_{name}_ms"] == pytest.approx(p90, rel=1e-12)
    assert figures[f"p99_{name}_ms"] == pytest.approx(p99, rel=1e-12)
    assert f"p95_{name}_ms" in figures


@pytest.mark.parametrize("slos, good", [
    ({"ttft": 200}, 1),  # 0.125 only
    ({"ttft": 250}, 3),  # inclusive: 0.25 meets 250 ms
    ({"tpot": 300}, 2),  # the one-token request's TPOT is 0
    ({"e2el": 500}, 2),
    ({"ttft": 250, "tpot": 300, "e2el": 300}, 1),  # jointly: only the one-token request meets all three
])
def test_goodput_counts_the_completed_requests_meeting_every_objective(slos, good):
    assert bench_metrics(view(), 2.0, slos)["request_goodput"] == good / 2.0


def test_the_peaks_count_chunks_per_whole_second_and_requests_in_flight_an_end_before_a_start():
    figures = bench_metrics(view(), 2.0, None)
    # chunks at 0.125, 0.25, 0.5 (request 0), 0.5 (request 1), 0.75 and 1.25 (request 3): five in second 0
    assert figures["max_output_tokens_per_s"] == 5.0
    # requests 0 and 1 overlap; request 3 starts at 0.5, the instant both end
    assert figures["max_concurrent_requests"] == 2


def test_a_benchmark_where_every_request_failed_reports_zeros_as_vllm_does():
    figures = bench_metrics(view([REQUESTS[2]]), 2.0, {"ttft": 100})
    assert figures["completed"] == 0 and figures["failed"] == 1 and figures["request_goodput"] == 0.0
    assert figures["mean_itl_ms"] == figures["p99_ttft_ms"] == figures["std_e2el_ms"] == 0.0
    assert figures["max_output_tokens_per_s"] == 0.0 and figures["max_concurrent_requests"] == 0
