"""The comparison's arithmetic on hand-made values: statistics (linear-interpolated percentiles over the finite
values), the signed error, the table a person reads; the simulated token times the records allow (exact for a
request never preempted, its TPOT exact either way); and the per-second series."""
from __future__ import annotations

import math

import numpy as np
import pytest

from fidelity.runs.comparison import signed_error_pct, statistic, summary_rows, summary_text
from fidelity.runs.series import simulated_series
from fidelity.runs.token_gaps import gaps, token_times

REAL = np.array([1.0, 2.0, 3.0, 4.0, np.nan])  # NaN: a request without the metric
SIM = np.array([2.0, 2.0, 3.0, 8.0])


def test_statistics_and_errors_on_a_hand_made_pair():
    assert statistic(REAL, "mean") == 2.5 and statistic(SIM, "mean") == 3.75
    assert statistic(REAL, "p50") == 2.5 and statistic(SIM, "p50") == 2.5
    assert statistic(REAL, "p90") == pytest.approx(3.7)  # 3 + 0.7 x (4 - 3): order statistic 2.7 of 0..3
    assert statistic(SIM, "p90") == pytest.approx(6.5)  # 3 + 0.7 x (8 - 3)
    assert statistic(REAL, "p99") == pytest.approx(3.97)
    assert signed_error_pct(2.5, 3.75) == 50.0 and signed_error_pct(4.0, 3.0) == -25.0
    assert math.isnan(signed_error_pct(0.0, 1.0)) and math.isnan(signed_error_pct(math.nan, 1.0))
    assert math.isnan(statistic(np.array([np.nan]), "mean"))


def test_the_summary_has_every_metric_and_statistic_and_no_error_where_a_side_lacks_one():
    rows = summary_rows({"ttft": REAL, "tpot": REAL, "e2e": REAL}, {"ttft": SIM, "tpot": SIM, "e2e": SIM,
                                                                    "itl": SIM})
    assert [(r.metric, r.statistic) for r in rows][:6] == [("ttft", "mean"), ("ttft", "p50"), ("ttft", "p90"),
                                                           ("ttft", "p95"), ("ttft", "p99"), ("tpot", "mean")]
    assert len(rows) == 20
    itl = [r for r in rows if r.metric == "itl"]
    assert all(math.isnan(r.real_s) and math.isnan(r.error_pct) and r.sim_s > 0 for r in itl)
    text = summary_text(rows)
    assert "TTFT   mean        2500.0       3750.0   +50.0%" in text  # milliseconds where a person reads them
    assert "ITL    mean           n/a       3750.0" in text


def _records(requests: list[tuple], ends: list[float]) -> tuple[dict, dict]:
    """Requests (first token, finish, output_len, preemptions) on replica 0, whose iterations end at `ends`."""
    first, finish, output, preempted = (np.array(c, dtype=float) for c in zip(*requests))
    req = {"request_id": np.arange(len(requests)), "first_token_s": first, "finish_s": finish,
           "output_len": output.astype(np.int64), "num_preemptions": preempted.astype(np.int64),
           "replica": np.zeros(len(requests), np.int64)}
    starts = np.array([0.0] + ends[:-1])
    it = {"start_s": starts, "duration_s": np.array(ends) - starts, "replica": np.zeros(len(ends), np.int64)}
    return req, it


def test_token_times_are_exact_for_a_request_never_preempted_and_keep_a_preempted_ones_sum():
    ends = [0.5, 1.0, 1.7, 2.0, 3.0, 3.5, 4.0]
    req, it = _records([(1.0, 3.0, 4, 0),      # decodes in the three iterations after its first token
                        (0.5, 4.0, 3, 1),      # preempted once: its last token in the last iteration, one wait
                        (1.7, 1.7, 1, 0),      # one token
                        (1.0, math.nan, 5, 0)], ends)  # cut off by the horizon: first token only
    times = token_times(req, it)
    assert times[0].tolist() == [1.0, 1.7, 2.0, 3.0]
    assert times[1].tolist() == [0.5, 3.5, 4.0]  # the wait up to its return at 3.5, then one present iteration
    assert sum(gaps(times)[1]) == 4.0 - 0.5
    assert times[2].tolist() == [1.7] and times[3].tolist() == [1.0]


def test_the_simulated_series_counts_as_vllms_logger():
    ends = [0.5, 1.0, 1.7, 2.0, 3.0, 3.5, 4.0]
    req, it = _records([(1.0, 3.0, 4, 0), (0.5, 4.0, 3, 1)], ends)
    req["prompt_len"] = np.array([100, 10])
    it.update(num_running_groups=np.array([1, 2, 2, 2, 1, 1, 1]), num_waiting=np.array([1, 0, 0, 0, 1, 0, 0]),
              kv_token=np.full(7, 8), kv_reserved=np.zeros(7, np.int64), kv_internal=np.full(7, 2))
    series = simulated_series(req, it, token_times(req, it), pool_slots=40)
    assert series["t"].tolist() == [1.0, 2.0, 3.0, 4.0, 5.0]
    assert series["prompt_tokens_per_s"].tolist() == [10.0, 100.0, 0.0, 0.0, 0.0]  # at each first token
    assert series["generation_tokens_per_s"].tolist() == [1.0, 2.0, 1.0, 2.0, 1.0]
    assert series["finished_per_s"].tolist() == [0.0, 0.0, 0.0, 1.0, 1.0]
    # at each second's last iteration: 0.5 in [0, 1), 1.7 in [1, 2)
    assert series["running"].tolist()[:2] == [1.0, 2.0] and series["waiting"].tolist()[:2] == [1.0, 0.0]
    assert series["kv_usage_pct"].tolist()[0] == 25.0  # (8 + 2) / 40
