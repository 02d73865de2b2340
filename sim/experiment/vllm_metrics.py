"""vLLM's benchmark figures, computed as `vllm bench serve` computes them (vllm/benchmarks/serve.py's
calculate_metrics and benchmark, read at vllm-project/vllm commit 009e6d4a), from what its client records of each
request (vllm/benchmarks/lib/endpoint_request_func.py, at 02cfb534).

Over the completed requests (a failed one counts only as failed): TTFT is the time from sending a request to its
first chunk; E2EL ("latency") to its last; TPOT is (E2EL - TTFT) / (output tokens - 1), over the requests of more
than one output token; ITL is every gap between consecutive chunks of a request, pooled over the requests. Each is
reported in ms as its mean, median, standard deviation (numpy's, over the population) and percentiles (numpy's,
interpolated linearly); an empty list reports 0, as vLLM's `np.mean(values or 0)` does. Throughputs are per second
of the benchmark's duration: requests completed, output tokens, and prompt plus output tokens (of the completed
requests). Goodput counts the completed requests that meet every objective (sim/experiment/goodput.py). The peak
output rate counts chunks per whole second after the first send, and the peak concurrency is the most requests
between their send and their last chunk at once, as vLLM counts both.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from sim.experiment.goodput import is_good

# every metric vLLM can report percentiles of for a generating model, and the percentiles reported: vLLM's
# --percentile-metrics ttft,tpot,itl,e2el --metric-percentiles 90,95,99
PERCENTILE_METRICS = ("ttft", "tpot", "itl", "e2el")
PERCENTILES = (90.0, 95.0, 99.0)
MS = 1000.0


@dataclass(frozen=True)
class ClientView:
    """Each request as vLLM's client records it (RequestFuncOutput), in the order it sent them: the prompt's and
    output's tokens (0 output tokens where it failed), when it was sent, its TTFT and chunk gaps and latency in
    seconds (0, none and 0 where it failed), and its error ("" where it succeeded)."""

    prompt_len: np.ndarray
    output_len: np.ndarray
    start_s: np.ndarray
    ttft_s: np.ndarray
    itl_s: list[np.ndarray]
    latency_s: np.ndarray
    errors: list[str]

    @property
    def succeeded(self) -> np.ndarray:
        return np.array([not error for error in self.errors], dtype=bool)


def bench_metrics(view: ClientView, duration_s: float, slos: Mapping[str, float] | None) -> dict:
    """The figures of vLLM's result, by its field names, in its order (without the per-request lists)."""
    ok = view.succeeded
    output_len = view.output_len[ok]
    ttft, latency = view.ttft_s[ok], view.latency_s[ok]
    decoded = output_len > 1
    with np.errstate(divide="ignore", invalid="ignore"):
        all_tpot = np.where(decoded, (latency - ttft) / (output_len - 1), 0.0)  # 0 where one token: goodput's
    itl = np.concatenate([gaps for gaps, good in zip(view.itl_s, ok) if good] or [np.empty(0)])
    total_input, total_output = int(view.prompt_len[ok].sum()), int(output_len.sum())
    good = sum(is_good(*request, slos) for request in zip(ttft, all_tpot, latency)) if slos else 0
    figures = {
        "completed": int(ok.sum()),
        "failed": int((~ok).sum()),
        "total_input_tokens": total_input,
        "total_output_tokens": total_output,
        "request_throughput": _per_s(int(ok.sum()), duration_s),
        "request_goodput": _per_s(good, duration_s) if slos else None,
        "output_throughput": _per_s(total_output, duration_s),
        "total_token_throughput": _per_s(total_input + total_output, duration_s),
        **peaks(view),
    }
    for name, values in (("ttft", ttft), ("tpot", all_tpot[decoded]), ("itl", itl), ("e2el", latency)):
        figures.update(statistics(name, values))
    return figures


def statistics(name: str, values: np.ndarray) -> dict[str, float]:
    """mean_, median_, std_ and pXX_ `name` _ms, as vLLM's result names them."""
    values = values if len(values) else np.zeros(1)
    out = {f"mean_{name}_ms": float(np.mean(values)) * MS, f"median_{name}_ms": float(np.median(values)) * MS,
           f"std_{name}_ms": float(np.std(values)) * MS}
    for p in PERCENTILES:
        word = str(int(p)) if int(p) == p else str(p)
        out[f"p{word}_{name}_ms"] = float(np.percentile(values, p)) * MS
    return out


def peaks(view: ClientView) -> dict[str, float | int]:
    """max_output_tokens_per_s (the most chunks in one whole second after the first send) and
    max_concurrent_requests (the most requests between their send and their last chunk, ends before starts)."""
    ok = view.succeeded
    if not ok.any():
        return {"max_output_tokens_per_s": 0.0, "max_concurrent_requests": 0}
    start, ttft, latency = view.start_s[ok], view.ttft_s[ok], view.latency_s[ok]
    first_start = float(start.min())
    seconds = int(np.ceil(float((start + latency).max()) - first_start)) + 1
    # vLLM places each chunk at start + ttft, then adds the gaps one by one
    chunks = np.concatenate([np.cumsum(np.concatenate([[s + t], gaps]))
                             for s, t, gaps in zip(start, ttft, (g for g, good in zip(view.itl_s, ok) if good))])
    buckets = (chunks - first_start).astype(np.int64)
    per_second = np.bincount(buckets[(buckets >= 0) & (buckets < seconds)], minlength=seconds)
    times = np.concatenate([start, start + latency])
    deltas = np.concatenate([np.ones(len(start), np.int64), -np.ones(len(start), np.int64)])
    running = np.cumsum(deltas[np.lexsort((deltas, times))])  # by time, an end before a start at the same time
    return {"max_output_tokens_per_s": float(per_second.max()), "max_concurrent_requests": int(running.max())}


def _per_s(count: float, duration_s: float) -> float:
    return count / duration_s if duration_s > 0 else 0.0
