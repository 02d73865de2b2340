"""From per-request and per-iteration records to the numbers a reader compares.

Normalized latency is the paper's y-axis: mean over requests of (finish - arrival) /
output tokens, in s/token, excluding arrivals in the warm-up. A request with n samples
counts n times (the authors kept one record per sequence). Requests still unfinished
when the simulation stops at its horizon count with finish = horizon, so a saturated
run reports a lower bound and says so (`saturated`, `num_unfinished`).

A run is saturated when the server falls behind its arrivals, which the horizon alone does not
show: at twice the arrival rate it serves, a server still drains its queue within a horizon of
twice the trace, and a saturated server keeps a low TPOT while its queue grows without bound. So
saturation is measured (`backlog`, `is_saturated`): the backlog, requests arrived and not yet
finished, seen at each measured arrival once it has filled, is fitted with a line against time; its slope over the
arrival rate is 1 - served rate / arrival rate (`backlog_growth`). A stable server's backlog only
fluctuates about its line; an overloaded one's grows out of its fluctuation.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from engine.core.records import DROPPED_COLUMNS
from sim.experiment.table import Columns, Selected, num_rows

if TYPE_CHECKING:
    import pandas as pd

SUMMARY_METRICS = (
    "num_requests", "num_measured", "num_unfinished", "saturated", "backlog_growth", "normalized_latency",
    "normalized_latency_p50", "normalized_latency_p90", "latency_mean_s", "ttft_mean_s", "ttft_p50_s", "ttft_p90_s",
    "ttft_p99_s", "tpot_mean_s", "tpot_p50_s", "tpot_p90_s", "tpot_p99_s", "throughput_rps", "throughput_tokens_per_s",
    "mean_batched_requests", "kv_token_share", "kv_reserved_share", "kv_internal_frag_share",
    "kv_external_frag_share", "kv_idle_share", "memory_saving", "preemptions", "swapped_blocks", "num_iterations",
    "makespan_s", "prefix_hit_rate", "num_ignored", "num_aborted", "load_imbalance",
)
# The rate a system sustains is read where its normalized latency crosses this (sim/reproduce/readings.py): the
# paper reads capacity where a curve "suddenly explodes" and prints no threshold; its y axes run to 1 s/token, and a
# third-party reading of its figures found the 1.7-2.7x at 0.5 s/token.
KNEE_S_PER_TOKEN = 0.5
SIGNED_METRICS = ("backlog_growth",)  # a backlog may shrink: the only metric below zero
_STATUS = DROPPED_COLUMNS.index("status")
# A backlog growing by more than this share of the arrival rate is a server falling behind (a stable one's
# stays within +-0.01 over 15 minutes of the quickstart)...
SATURATED_GROWTH = 0.05
# ... by at least this many requests over the measured arrivals (a request or two more at the end of a short
# run is no trend) ...
MIN_GROWTH_REQUESTS = 5
# ... and by more than this many times the backlog's spread about its line: a stable backlog wanders (a burst
# raises it for a while), and over a minute of arrivals its line may slope by more than 5% while staying within
# about 3 spreads; over 15 minutes a stable one's stays within 1.1 and an overloaded one's grows by 10 or more
# (benchmarks/measurements/saturation.md)
TREND_OVER_SPREAD = 3.0


def _pct(values: np.ndarray, q: float) -> float:
    return float(np.percentile(values, q)) if len(values) else float("nan")


def _mean(values: np.ndarray) -> float:
    return float(values.mean()) if len(values) else float("nan")


def sent_times(requests: Columns | pd.DataFrame):
    """When each request reached the server, which its latencies count from: sent_s where a client's gate held
    requests back (vLLM's clock starts when its semaphore lets a request go), else its arrival_s."""
    return requests["sent_s"] if "sent_s" in requests else requests["arrival_s"]


def latency_columns(requests: pd.DataFrame, horizon_s: float) -> pd.DataFrame:
    """The frame with request_latencies' four columns added."""
    return requests.assign(**request_latencies(_as_columns(requests), horizon_s))


def kv_shares(iterations: Columns | pd.DataFrame, pool_slots: int) -> dict[str, float]:
    """Time-weighted shares of one replica's KV pool while it serves, summing to 1 (paper Fig. 2)."""
    weights = np.asarray(iterations["duration_s"])
    total = weights.sum() * pool_slots
    parts = {"kv_token_share": "kv_token", "kv_reserved_share": "kv_reserved",
             "kv_internal_frag_share": "kv_internal", "kv_external_frag_share": "kv_external",
             "kv_idle_share": "kv_idle"}
    if total <= 0:
        return {k: float("nan") for k in parts}
    return {k: float((np.asarray(iterations[c]) * weights).sum() / total) for k, c in parts.items()}


def memory_saving(iterations: Columns | pd.DataFrame) -> float:
    """The paper's Fig. 15: blocks saved by sharing / blocks the same sequences would hold without it.

    Both are integrated over time (each iteration weighted by its duration) and then divided: the
    ratio of the time-weighted means, not the mean of each iteration's ratio, which nearly empty
    iterations (one request, a one-block prompt shared by two samples: 50%) would sway as much as
    full ones. 0 where nothing is shared (Orca, FasterTransformer, vLLM at n = 1 with no prefix).
    """
    weights = np.asarray(iterations["duration_s"], dtype=float)
    unshared = float((np.asarray(iterations["unshared_blocks"], dtype=float) * weights).sum())
    if unshared <= 0:
        return 0.0
    return float((np.asarray(iterations["saved_blocks"], dtype=float) * weights).sum() / unshared)


def prefix_hit_rate(requests: Columns) -> float:
    """Prompt tokens found in the prefix cache over prompt tokens, over the requests that were served (a
    first token); nan without prefix caching (no cached_tokens column) or before any was served."""
    if "cached_tokens" not in requests:
        return float("nan")
    served = ~np.isnan(np.asarray(requests["first_token_s"], dtype=np.float64))
    prompt = float(np.asarray(requests["prompt_len"], dtype=np.int64)[served].sum())
    cached = float(np.asarray(requests["cached_tokens"], dtype=np.int64)[served].sum())
    return cached / prompt if prompt > 0 else float("nan")


def load_imbalance(requests: Columns, replicas: int | None = None) -> float:
    """The busiest replica's work over the mean replica's: each replica's work is the tokens of the requests the
    router sent it (prompt + n x output, served or not, warm-up included: the routing is what it judges), over
    all `replicas` of the fleet, those sent nothing included (None: the highest index in the requests + 1).
    1.0 is perfectly balanced, and so is one replica; n replicas with all the work on one read n; nan without
    any work, or without the prompts' lengths to weigh it by. A table without a replica column (an engine's own,
    replayed) is one replica's."""
    if "prompt_len" not in requests or not num_rows(requests):
        return float("nan")
    prompt = np.asarray(requests["prompt_len"], dtype=np.float64)
    index = (np.asarray(requests["replica"], dtype=np.int64) if "replica" in requests
             else np.zeros(len(prompt), dtype=np.int64))
    count = int(index.max()) + 1 if replicas is None else replicas
    work = prompt + np.asarray(requests["n"], dtype=np.float64) * np.asarray(requests["output_len"], dtype=np.float64)
    per_replica = np.bincount(index, weights=work, minlength=count)
    mean = float(per_replica.sum()) / count
    return float(per_replica.max()) / mean if mean > 0 else float("nan")


def dropped_counts(dropped: Sequence[tuple]) -> dict[str, int]:
    """num_ignored and num_aborted: requests dropped unserved (engine.core.records.DroppedRecord's values)."""
    statuses = [values[_STATUS] for values in dropped]
    return {"num_ignored": statuses.count("ignored"), "num_aborted": statuses.count("aborted")}


def _as_columns(table: Columns | pd.DataFrame) -> Columns:
    """A frame's columns as arrays (views where pandas holds them typed); columns as they are."""
    if hasattr(table, "to_numpy"):
        return {str(name): table[name].to_numpy() for name in table.columns}
    return table


def request_latencies(requests: Columns, horizon_s: float) -> dict[str, np.ndarray]:
    """Per request: latency_s and ttft_s from when it was sent (sent_times) to its finish and first token (the
    horizon where it has none yet), normalized_latency (latency over output tokens), and tpot_s: seconds per output
    token after the first, NaN where there is none to time (one output token, or no first token yet), never 0.0,
    which would read as an infinitely fast decode."""
    arrival = np.asarray(sent_times(requests), dtype=np.float64)
    first = np.asarray(requests["first_token_s"], dtype=np.float64)
    finish = np.asarray(requests["finish_s"], dtype=np.float64)
    output_len = np.asarray(requests["output_len"])
    finish_at = np.where(np.isnan(finish), horizon_s, finish)
    first_at = np.where(np.isnan(first), horizon_s, first)
    decoded = (output_len > 1) & ~np.isnan(first) & (finish_at >= first)
    with np.errstate(divide="ignore", invalid="ignore"):  # masked below: one output token, or none yet
        tpot = np.where(decoded, (finish_at - first) / (output_len - 1), np.nan)
        latency = finish_at - arrival
        return {"latency_s": latency, "ttft_s": first_at - arrival, "tpot_s": tpot,
                "normalized_latency": latency / output_len}


@dataclass(frozen=True)
class Backlog:
    """The backlog (requests arrived, not finished) over the measured arrivals, fitted with a line: its slope
    over their arrival rate (the share of arrivals the server fell behind by: 1 - served / arrival rate), the
    requests it grew by over their span, and its spread about the line (the backlog's own fluctuation); the
    arrivals it was fitted over, from start_s on (after the warm-up and the filling)."""
    growth: float
    grown_by: float
    spread: float
    arrivals: int
    start_s: float

    @property
    def is_growing(self) -> bool:
        """A trend, not noise: material (SATURATED_GROWTH, MIN_GROWTH_REQUESTS) and standing out of the
        backlog's own fluctuation (TREND_OVER_SPREAD)."""
        return (self.growth > SATURATED_GROWTH and self.grown_by >= MIN_GROWTH_REQUESTS
                and self.grown_by > TREND_OVER_SPREAD * self.spread)


def backlog(arrival_s: np.ndarray, finish_s: np.ndarray, warmup_s: float, first_token_s: np.ndarray | None = None
            ) -> Backlog:
    """The backlog's line over the arrivals after the warm-up and after it has filled; growth NaN with fewer
    than three, or all at one instant. Unfinished requests (NaN finish) stay in it.

    From an empty start the backlog fills for as long as requests take to serve, whatever the load: a trend a
    warm-up shorter than that would leave in the fit. So the fit starts no sooner than the 90th percentile of
    the time requests took from first token to finish (given first_token_s) after the first arrival: their
    service, without the queueing that an overload adds to it."""
    arrival = np.sort(arrival_s)
    finish = np.sort(np.where(np.isnan(finish_s), np.inf, finish_s))
    start = warmup_s
    if first_token_s is not None and len(arrival):
        served = finish_s - first_token_s
        served = served[~np.isnan(served)]
        if len(served):
            start = max(start, float(arrival[0]) + float(np.percentile(served, 90)))
    first = int(np.searchsorted(arrival, start, side="left"))
    times = arrival[first:]
    if len(times) < 3 or times[-1] <= times[0]:
        return Backlog(float("nan"), 0.0, 0.0, len(times), float(start))
    count = np.arange(first + 1, len(arrival) + 1) - np.searchsorted(finish, times, side="right")
    span = float(times[-1] - times[0])
    centred = times - times.mean()
    slope = float((centred * (count - count.mean())).sum() / (centred * centred).sum())
    spread = float((count - count.mean() - slope * centred).std())
    return Backlog(slope / ((len(times) - 1) / span), slope * span, spread, len(times), float(start))


def is_saturated(growth: Backlog, arrival_s: np.ndarray, is_finished: np.ndarray, horizon_s: float) -> bool:
    """The server fell behind: its backlog grew (Backlog.is_growing), or a request is still unfinished at the
    horizon after waiting half of it or more (at the default horizon, twice the trace, any unfinished
    request; a horizon cut at the trace's end, max_time_factor 1, leaves the last arrivals unfinished
    without any saturation)."""
    return growth.is_growing or bool((arrival_s[~is_finished] <= horizon_s / 2).any())


def summarize(requests: Columns | pd.DataFrame, iterations: Columns | pd.DataFrame, *, pool_slots: int,
              warmup_s: float, horizon_s: float, dropped: Sequence[tuple] = (), replicas: int | None = None) -> dict:
    """The summary metrics of one run, from its request and iteration columns (or frames) and the values of
    its dropped requests (DroppedRecord's, as recorded: none by default); replicas: the fleet's size, for
    load_imbalance (None: as many as the requests name)."""
    requests, iterations = _as_columns(requests), _as_columns(iterations)
    latencies = request_latencies(requests, horizon_s)
    finish = np.asarray(requests["finish_s"], dtype=np.float64)
    arrival = np.asarray(sent_times(requests), dtype=np.float64)  # a gated run's server is measured as it is sent to
    is_measured = arrival >= warmup_s
    weights = np.asarray(requests["n"], dtype=np.int64)
    norm = np.repeat(latencies["normalized_latency"][is_measured], weights[is_measured])
    tpot = latencies["tpot_s"][is_measured]
    tpot = tpot[~np.isnan(tpot)]  # only requests with a decode to time
    is_finished = ~np.isnan(finish)
    makespan = float(finish[is_finished].max()) if is_finished.any() else 0.0
    measured_iterations = Selected(iterations, np.asarray(iterations["start_s"]) >= warmup_s)
    num_unfinished = int((~is_finished).sum())
    num_finished = int(is_finished.sum())
    output_len = np.asarray(requests["output_len"], dtype=np.int64)
    generated = float((output_len[is_finished] * weights[is_finished]).sum())
    latency, ttft = latencies["latency_s"][is_measured], latencies["ttft_s"][is_measured]
    growth = backlog(arrival, finish, warmup_s, np.asarray(requests["first_token_s"], dtype=np.float64))
    summary = {
        "num_requests": len(finish),
        "num_measured": int(is_measured.sum()),
        "num_unfinished": num_unfinished,
        "saturated": is_saturated(growth, arrival, is_finished, horizon_s),
        "backlog_growth": growth.growth,
        "normalized_latency": _mean(norm),
        "normalized_latency_p50": _pct(norm, 50),
        "normalized_latency_p90": _pct(norm, 90),
        "latency_mean_s": _mean(latency),
        "ttft_mean_s": _mean(ttft),
        "tpot_mean_s": _mean(tpot),
        "throughput_rps": num_finished / makespan if makespan > 0 else float("nan"),
        "throughput_tokens_per_s": generated / makespan if makespan > 0 else float("nan"),
        "mean_batched_requests": _mean(np.asarray(measured_iterations["num_running_groups"])),
        "preemptions": int(np.asarray(requests["num_preemptions"], dtype=np.int64).sum()),
        "swapped_blocks": int(np.asarray(iterations["num_swap_blocks"]).sum()),
        "num_iterations": num_rows(iterations),
        "makespan_s": makespan,
    }
    for q in (50, 90, 99):
        summary[f"ttft_p{q}_s"] = _pct(ttft, q)
        summary[f"tpot_p{q}_s"] = _pct(tpot, q)
    if not num_rows(measured_iterations):
        measured_iterations = iterations
    summary.update(kv_shares(measured_iterations, pool_slots))
    summary["memory_saving"] = memory_saving(measured_iterations)
    summary["prefix_hit_rate"] = prefix_hit_rate(requests)
    summary.update(dropped_counts(dropped))
    summary["load_imbalance"] = load_imbalance(requests, replicas)
    return {k: summary[k] for k in SUMMARY_METRICS}
