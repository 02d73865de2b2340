"""Real against simulated: each request's TTFT, TPOT and E2E latency, and over the run the mean, median, p90, p95
and p99 of TTFT, TPOT, ITL (every gap between consecutive tokens, pooled) and E2E, with the simulation's signed
error: (sim - real) / real, in %, so -5 means the simulator predicts 5% faster. Percentiles interpolate linearly
between order statistics (numpy's default, as vLLM's benchmark and LLMServingSim's summary compute them); a
statistic is over the requests that have the metric (TPOT: more than one output token; ITL: gaps recorded).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

METRICS = ("ttft", "tpot", "itl", "e2e")
METRIC_LABELS = {"ttft": "TTFT", "tpot": "TPOT", "itl": "ITL", "e2e": "E2E"}
STATISTICS = (("mean", None), ("p50", 50.0), ("p90", 90.0), ("p95", 95.0), ("p99", 99.0))


@dataclass(frozen=True)
class Row:
    metric: str
    statistic: str
    real_s: float
    sim_s: float
    error_pct: float


def statistic(values: np.ndarray, name: str) -> float:
    """mean, or a percentile pNN, over the finite values; NaN where there are none."""
    finite = np.asarray(values, np.float64)
    finite = finite[np.isfinite(finite)]
    if not len(finite):
        return math.nan
    quantile = dict(STATISTICS)[name]
    return float(finite.mean() if quantile is None else np.percentile(finite, quantile))


def signed_error_pct(real: float, sim: float) -> float:
    if not (math.isfinite(real) and math.isfinite(sim)) or real == 0:
        return math.nan
    return (sim - real) / real * 100.0


def summary_rows(real: dict[str, np.ndarray], sim: dict[str, np.ndarray]) -> list[Row]:
    """Every metric x statistic: real and simulated (seconds) and the error. A metric a side lacks is NaN there."""
    rows = []
    for metric in METRICS:
        for name, _ in STATISTICS:
            r = statistic(real.get(metric, np.empty(0)), name)
            s = statistic(sim.get(metric, np.empty(0)), name)
            rows.append(Row(metric, name, r, s, signed_error_pct(r, s)))
    return rows


def summary_text(rows: list[Row]) -> str:
    """The table a person reads: milliseconds, and the signed error."""
    lines = [f"{'metric':<6} {'stat':<5} {'real ms':>12} {'sim ms':>12} {'error':>8}"]
    for row in rows:
        lines.append(f"{METRIC_LABELS[row.metric]:<6} {row.statistic:<5} {_ms(row.real_s):>12} {_ms(row.sim_s):>12} "
                     f"{_pct(row.error_pct):>8}")
    return "\n".join(lines)


def _ms(seconds: float) -> str:
    return "n/a" if not math.isfinite(seconds) else f"{seconds * 1000:.1f}"


def _pct(value: float) -> str:
    return "" if not math.isfinite(value) else f"{value:+.1f}%"
