"""A split run's KV-move columns count only what happened before the horizon, as the latencies count a request
unfinished there."""
from __future__ import annotations

import math

import numpy as np
import pytest

from sim.experiment.config import load_experiment
from sim.experiment.run import horizon_of, run_one, trace_for
from sim.experiment.split_run import transfer_metrics
from tests.helpers.configs import tiny

NAN = math.nan


def custom_link(bytes_per_s: str, latency_s: str = "1.0e-5") -> str:
    return ("{prefill: {replicas: 1}, decode: {replicas: 1}, "
            f"kv_link: {{kind: custom, bytes_per_s: {bytes_per_s}, latency_s: {latency_s}}}}}")


def test_the_kv_columns_count_a_copy_the_horizon_cut_off_up_to_the_horizon():
    horizon = 10.0
    transfers = [  # request_id, prefill, decode, prefilled_s, start_s, end_s, num_tokens, kind
        (0, 0, 1, 1.0, 2.0, 3.0, 8, "copied"),
        (1, 0, 1, 1.0, 8.0, NAN, 8, "unfinished"),  # on the link at the horizon: 2 s copying, 7 s waiting
        (2, 0, 1, 2.0, NAN, NAN, 8, "unfinished"),  # queued for the link: 8 s waiting, no time copying
        (3, 0, -1, 4.0, NAN, NAN, 8, "waiting"),  # no decode replica had room: 6 s waiting
        (4, 0, -1, 10.5, NAN, NAN, 8, "waiting"),  # prefilled after the horizon: no wait inside the run
        (5, 0, 1, 1.0, 5.0, 5.0, 8, "recomputed"),
        (6, 0, 1, 0.5, 0.5, 9.0, 8, "copied"),  # arrived in the warm-up: not measured
    ]
    arrivals = np.array([1.0] * 6 + [0.0])
    metrics = transfer_metrics(transfers, 0.5, arrivals, horizon)
    assert metrics == {"kv_copy_mean_s": pytest.approx(1.5), "kv_wait_mean_s": pytest.approx((1 + 7 + 8 + 6) / 4),
                       "recomputed_share": 0.25}


def test_a_slow_links_waits_and_copies_end_at_the_horizon(write_config):
    # 10 MB/s carries a 100-token prompt of OPT-13B in 8 s: the link falls behind its arrivals for good
    exp = load_experiment(write_config(tiny(split=custom_link("1.0e7"), systems="[vllm]", warmup_s="2",
                                            workload="{dataset: sharegpt-standin, duration_s: 60}")))
    horizon = horizon_of(exp, trace_for(exp, 1.0, 0))
    summary = run_one(exp, exp.systems[0], 1.0, 0).summary
    assert summary["num_unfinished"] > 0
    for column in ("kv_copy_mean_s", "kv_wait_mean_s", "ttft_mean_s", "latency_mean_s"):
        assert 0 < summary[column] <= horizon, column
