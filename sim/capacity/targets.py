"""Latency targets, and whether one run meets them: what a capacity search asks of each probe.

A run meets a target only if it served its load: it is not saturated (sim/experiment/metrics.py measures
that from the backlog, not from the horizon), it kept pace with its arrivals (sim/capacity/saturation.py: no
backlog growing beyond noise, no climbing TTFT) and it dropped no request (a request vLLM ignored was never
served, so a latency over the rest says nothing of it). Then each target's metric must be at or under its
limit. Several targets are a joint SLO: a run meets them all, or not.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from engine.errors import SpecError
from sim.capacity.saturation import Pace

TARGET_METRICS = ("normalized_latency", "normalized_latency_p90", "ttft_p50_s", "ttft_p90_s", "ttft_p99_s",
                  "tpot_mean_s", "tpot_p90_s", "tpot_p99_s", "latency_mean_s")
# what a probe keeps of its run's summary besides the targets' metrics: what says whether it served its load
SERVED_KEYS = ("saturated", "backlog_growth", "num_unfinished", "num_ignored", "num_aborted")


@dataclass(frozen=True)
class Target:
    metric: str
    limit: float

    def __str__(self) -> str:
        return f"{self.metric}<={self.limit:g}"


@dataclass(frozen=True)
class Verdict:
    """held: True, False (over), or None (no request measured: neither); why: what failed, '' if held."""
    held: bool | None
    why: str = ""


def parse_target(text: str, name: str = "target") -> Target:
    """One METRIC=LIMIT; `name` is the argument it came in, as the caller spelled it."""
    if not isinstance(text, str) or "=" not in text:
        raise SpecError(name, repr(text),
                        f"write METRIC=LIMIT, e.g. normalized_latency=0.1; metrics: {list(TARGET_METRICS)}")
    metric, limit = (part.strip() for part in text.split("=", 1))
    if metric not in TARGET_METRICS:
        raise SpecError(name, repr(metric), f"unknown metric; valid: {list(TARGET_METRICS)}")
    try:
        value = float(limit)
    except ValueError:
        raise SpecError(name, metric, f"limit {limit!r} is not a number") from None
    if not (value > 0 and math.isfinite(value)):
        raise SpecError(name, metric, f"limit must be a positive number, got {value}")
    return Target(metric, value)


def parse_targets(texts: str | Sequence[str] | Mapping[str, float], name: str = "target") -> tuple[Target, ...]:
    """Every target of repeated --target options (or the API's list, or its mapping {METRIC: LIMIT}), each
    METRIC=LIMIT or a comma list of them; a metric given twice with two limits is refused, since which one counts
    would be a guess."""
    if isinstance(texts, str):
        texts = [texts]
    elif isinstance(texts, Mapping):
        texts = [f"{metric}={limit}" for metric, limit in texts.items()]
    if not isinstance(texts, Sequence) or not texts:
        raise SpecError(name, repr(texts), "give at least one METRIC=LIMIT, e.g. normalized_latency=0.1")
    targets = [parse_target(part, name) for text in texts for part in _parts(text)]
    if not targets:
        raise SpecError(name, repr(list(texts)), "give at least one METRIC=LIMIT, e.g. normalized_latency=0.1")
    seen: dict[str, Target] = {}
    for target in targets:
        if target.metric in seen and seen[target.metric] != target:
            raise SpecError(name, target.metric, (
                f"given twice ({seen[target.metric].limit:g} and {target.limit:g}); give each metric once"))
        seen[target.metric] = target
    return tuple(seen.values())


def _parts(text) -> list:
    return [part for part in text.split(",") if part.strip()] if isinstance(text, str) else [text]


def label(targets: Sequence[Target]) -> str:
    return " and ".join(map(str, targets))


def judge(summary: dict, targets: Sequence[Target]) -> Verdict:
    """Whether a run's summary meets every target, and if not, why (each reason that applies)."""
    reasons = not_served(summary)
    missing = []
    for target in targets:
        value = summary[target.metric]
        if value != value:
            missing.append(target.metric)
        elif value > target.limit:
            reasons.append(f"{target.metric} {value:.4g} > {target.limit:g}")
    if reasons:
        return Verdict(False, "; ".join(reasons))
    if missing:
        return Verdict(None, unmeasured(missing))
    return Verdict(True)


def unmeasured(metrics: Sequence[str]) -> str:
    """Why a run gave no value of these metrics: no request measured after the warm-up, or (TPOT) none that
    generated a second token."""
    why = f"no {' or '.join(metrics)} measured after the warm-up"
    if all(metric.startswith("tpot") for metric in metrics):
        why += " (TPOT needs a request of 2 output tokens or more)"
    return why


def not_served(summary: dict) -> list[str]:
    """Why a run did not serve its load, if it did not: saturated, fallen behind its arrivals (Pace: what a
    probe's summary carries besides the run's), or requests dropped unserved."""
    reasons = []
    fell_behind = Pace.of_summary(summary).why()
    if summary["saturated"]:
        growth = summary["backlog_growth"]
        unfinished = summary["num_unfinished"]
        parts = []
        if growth == growth and growth > 0:
            parts.append(f"the backlog grew by {growth:.0%} of the arrivals")
        if unfinished:
            parts.append(f"{_requests(unfinished)} unfinished at the horizon")
        reasons.append("saturated" + (f" ({', '.join(parts)})" if parts else ""))
    elif fell_behind:
        reasons.append(fell_behind)
    dropped = summary["num_ignored"] + summary["num_aborted"]
    if dropped:
        reasons.append(f"{_requests(dropped)} dropped unserved")
    return reasons


def _requests(count: int) -> str:
    return f"{count} request{'s' if count != 1 else ''}"
