"""From per-request and per-iteration records to the numbers a reader compares.

Normalized latency is the paper's y-axis: mean over requests of (finish - arrival) /
output tokens, in s/token, excluding arrivals in the warm-up. A request with n samples
counts n times (the authors kept one record per sequence). Requests still unfinished
when the simulation stops at its horizon count with finish = horizon, so a saturated
run reports a lower bound and says so (`saturated`, `num_unfinished`).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

SUMMARY_METRICS = (
    "num_requests", "num_measured", "num_unfinished", "saturated", "normalized_latency",
    "normalized_latency_p50", "normalized_latency_p90", "latency_mean_s", "ttft_mean_s", "ttft_p50_s", "ttft_p90_s",
    "ttft_p99_s", "tpot_mean_s", "tpot_p50_s", "tpot_p90_s", "tpot_p99_s", "throughput_rps", "throughput_tokens_per_s",
    "mean_batched_requests", "kv_token_share", "kv_reserved_share", "kv_internal_frag_share",
    "kv_external_frag_share", "kv_idle_share", "memory_saving", "preemptions", "swapped_blocks", "num_iterations",
    "makespan_s", "prefix_hit_rate",
)


def _pct(values: np.ndarray, q: float) -> float:
    return float(np.percentile(values, q)) if len(values) else float("nan")


def _mean(values: np.ndarray) -> float:
    return float(values.mean()) if len(values) else float("nan")


def latency_columns(requests: pd.DataFrame, horizon_s: float) -> pd.DataFrame:
    """Per-request latency, TTFT, TPOT and normalized latency (unfinished ones at the horizon)."""
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


def kv_shares(iterations: pd.DataFrame, pool_slots: int) -> dict[str, float]:
    """Time-weighted shares of one replica's KV pool while it serves, summing to 1 (paper Fig. 2)."""
    weights = iterations["duration_s"].to_numpy()
    total = weights.sum() * pool_slots
    parts = {"kv_token_share": "kv_token", "kv_reserved_share": "kv_reserved",
             "kv_internal_frag_share": "kv_internal", "kv_external_frag_share": "kv_external",
             "kv_idle_share": "kv_idle"}
    if total <= 0:
        return {k: float("nan") for k in parts}
    return {k: float((iterations[c].to_numpy() * weights).sum() / total) for k, c in parts.items()}


def memory_saving(iterations: pd.DataFrame) -> float:
    """The paper's Fig. 15: blocks saved by sharing / blocks the same sequences would hold without it.

    Both are integrated over time (each iteration weighted by its duration) and then divided: the
    ratio of the time-weighted means, not the mean of each iteration's ratio, which nearly empty
    iterations (one request, a one-block prompt shared by two samples: 50%) would sway as much as
    full ones. 0 where nothing is shared (Orca, FasterTransformer, vLLM at n = 1 with no prefix).
    """
    weights = iterations["duration_s"].to_numpy(dtype=float)
    unshared = float((iterations["unshared_blocks"].to_numpy(dtype=float) * weights).sum())
    if unshared <= 0:
        return 0.0
    return float((iterations["saved_blocks"].to_numpy(dtype=float) * weights).sum() / unshared)


def prefix_hit_rate(requests: pd.DataFrame) -> float:
    """Prompt tokens found in the prefix cache over prompt tokens, over the requests that were served (a
    first token); nan without prefix caching (no cached_tokens column) or before any was served."""
    if "cached_tokens" not in requests:
        return float("nan")
    served = requests[requests["first_token_s"].notna()]
    prompt = float(served["prompt_len"].sum())
    return float(served["cached_tokens"].sum()) / prompt if prompt > 0 else float("nan")


def summarize(requests: pd.DataFrame, iterations: pd.DataFrame, *, pool_slots: int, warmup_s: float,
              horizon_s: float) -> dict:
    req = latency_columns(requests, horizon_s)
    measured = req[req["arrival_s"] >= warmup_s]
    weights = measured["n"].to_numpy(dtype=np.int64)  # a run with no request has untyped (object) columns
    norm = np.repeat(measured["normalized_latency"].to_numpy(), weights)
    tpot = measured["tpot_s"].dropna().to_numpy()  # only requests with a decode to time
    finished = req[req["finish_s"].notna()]
    makespan = float(finished["finish_s"].max()) if len(finished) else 0.0
    after_warmup = iterations[iterations["start_s"] >= warmup_s]
    num_unfinished = int(req["finish_s"].isna().sum())
    generated = float((finished["output_len"] * finished["n"]).sum())
    summary = {
        "num_requests": len(req),
        "num_measured": len(measured),
        "num_unfinished": num_unfinished,
        "saturated": num_unfinished > 0,
        "normalized_latency": _mean(norm),
        "normalized_latency_p50": _pct(norm, 50),
        "normalized_latency_p90": _pct(norm, 90),
        "latency_mean_s": _mean(measured["latency_s"].to_numpy()),
        "ttft_mean_s": _mean(measured["ttft_s"].to_numpy()),
        "tpot_mean_s": _mean(tpot),
        "throughput_rps": len(finished) / makespan if makespan > 0 else float("nan"),
        "throughput_tokens_per_s": generated / makespan if makespan > 0 else float("nan"),
        "mean_batched_requests": _mean(after_warmup["num_running_groups"].to_numpy()),
        "preemptions": int(req["num_preemptions"].sum()),
        "swapped_blocks": int(iterations["num_swap_blocks"].sum()),
        "num_iterations": len(iterations),
        "makespan_s": makespan,
    }
    for q in (50, 90, 99):
        summary[f"ttft_p{q}_s"] = _pct(measured["ttft_s"].to_numpy(), q)
        summary[f"tpot_p{q}_s"] = _pct(tpot, q)
    measured_iterations = after_warmup if len(after_warmup) else iterations
    summary.update(kv_shares(measured_iterations, pool_slots))
    summary["memory_saving"] = memory_saving(measured_iterations)
    summary["prefix_hit_rate"] = prefix_hit_rate(requests)
    return {k: summary[k] for k in SUMMARY_METRICS}
