"""From per-request and per-iteration records to the numbers a reader compares.

Normalized latency is the paper's y-axis: mean over requests of (finish - arrival) /
output tokens, in s/token, excluding arrivals in the warm-up. A request with n samples
counts n times (the authors kept one record per sequence). Requests still unfinished
when the simulation stops at its horizon count with finish = horizon, so a saturated
run reports a lower bound and says so (`saturated`, `num_unfinished`).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from engine.core.records import DROPPED_COLUMNS
from sim.experiment.table import Columns, Selected, num_rows

if TYPE_CHECKING:
    import pandas as pd

SUMMARY_METRICS = (
    "num_requests", "num_measured", "num_unfinished", "saturated", "normalized_latency",
    "normalized_latency_p50", "normalized_latency_p90", "latency_mean_s", "ttft_mean_s", "ttft_p50_s", "ttft_p90_s",
    "ttft_p99_s", "tpot_mean_s", "tpot_p50_s", "tpot_p90_s", "tpot_p99_s", "throughput_rps", "throughput_tokens_per_s",
    "mean_batched_requests", "kv_token_share", "kv_reserved_share", "kv_internal_frag_share",
    "kv_external_frag_share", "kv_idle_share", "memory_saving", "preemptions", "swapped_blocks", "num_iterations",
    "makespan_s", "prefix_hit_rate", "num_ignored", "num_aborted",
)
_STATUS = DROPPED_COLUMNS.index("status")


def _pct(values: np.ndarray, q: float) -> float:
    return float(np.percentile(values, q)) if len(values) else float("nan")


def _mean(values: np.ndarray) -> float:
    return float(values.mean()) if len(values) else float("nan")


def latency_columns(requests: pd.DataFrame, horizon_s: float) -> pd.DataFrame:
    """Per-request latency, TTFT, TPOT and normalized latency (unfinished ones at the horizon), as a frame."""
    finish = requests["finish_s"].fillna(horizon_s)
    first = requests["first_token_s"].fillna(horizon_s)
    out = requests.assign(
        latency_s=finish - requests["arrival_s"],
        ttft_s=first - requests["arrival_s"],
        tpot_s=_tpot(requests, finish),
    )
    out["normalized_latency"] = out["latency_s"] / out["output_len"]
    return out


def _tpot(requests: pd.DataFrame, finish: pd.Series) -> pd.Series:
    """Seconds per output token after the first; NaN where there is none to time: one output token,
    or no first token yet (overload). Never 0.0, which would read as an infinitely fast decode."""
    first = requests["first_token_s"]
    decoded = (requests["output_len"] > 1) & first.notna() & (finish >= first)
    return ((finish - first) / (requests["output_len"] - 1)).where(decoded)


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
    """latency_columns' four columns as arrays, with the float arithmetic pandas does there."""
    arrival = np.asarray(requests["arrival_s"], dtype=np.float64)
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


def summarize(requests: Columns | pd.DataFrame, iterations: Columns | pd.DataFrame, *, pool_slots: int,
              warmup_s: float, horizon_s: float, dropped: Sequence[tuple] = ()) -> dict:
    """The summary metrics of one run, from its request and iteration columns (or frames) and the values of
    its dropped requests (DroppedRecord's, as recorded: none by default)."""
    requests, iterations = _as_columns(requests), _as_columns(iterations)
    latencies = request_latencies(requests, horizon_s)
    finish = np.asarray(requests["finish_s"], dtype=np.float64)
    is_measured = np.asarray(requests["arrival_s"], dtype=np.float64) >= warmup_s
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
    summary = {
        "num_requests": len(finish),
        "num_measured": int(is_measured.sum()),
        "num_unfinished": num_unfinished,
        "saturated": num_unfinished > 0,
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
    return {k: summary[k] for k in SUMMARY_METRICS}
