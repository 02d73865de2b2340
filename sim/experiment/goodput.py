"""Goodput's service level objectives, as vLLM's benchmark takes them (`vllm bench serve --goodput ttft:500 tpot:50`).

A request is good when it meets every objective given: its TTFT, its TPOT (0 for a request of one output token,
as vLLM counts it) and its end-to-end latency each at most the objective, in milliseconds; goodput is the good
requests per second of the benchmark's duration (DistServe's definition, vllm/benchmarks/serve.py). Given on the
command line as vLLM spells it (METRIC:MS pairs) or in a config as a mapping (`goodput: {ttft: 500, tpot: 50}`).
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from engine.errors import SpecError
from engine.specs.checks import known_keys

METRICS = ("ttft", "tpot", "e2el")  # vLLM's names, in the order it checks them
PAIR_FORM = "METRIC:MS pairs (METRIC one of ttft, tpot, e2el; MS milliseconds >= 0), e.g. ttft:500 tpot:50"


def slos_from_pairs(pairs: Sequence[str], flag: str = "--goodput") -> dict[str, float]:
    """The objectives `--goodput ttft:500 tpot:50` gives, by metric; a bad pair is refused naming the flag."""
    slos: dict[str, float] = {}
    for pair in pairs:
        name, sep, text = pair.partition(":")
        fault = _pair_fault(name, sep, text, slos)
        if fault:
            raise SpecError(flag, "", f"{pair!r} {fault}; give {PAIR_FORM}")
        slos[name] = float(text)
    return slos


def _pair_fault(name: str, sep: str, text: str, given: Mapping[str, float]) -> str:
    """What is wrong with one METRIC:MS pair ("" where nothing is)."""
    if not sep:
        return "is not METRIC:MS"
    if name not in METRICS:
        return f"names no metric of {list(METRICS)}"
    if name in given:
        return f"gives {name} a second time"
    return "" if _is_ms(_number(text)) else f"gives {text!r}, not a number of milliseconds >= 0"


def check_slos(value: Any, source: str, key: str) -> dict[str, float]:
    """A config's `goodput` mapping, checked: known metrics, each a finite number of ms >= 0."""
    if not isinstance(value, Mapping) or not value:
        raise SpecError(source, key, f"must be a mapping of objectives in ms, e.g. {{ttft: 500, tpot: 50}} "
                        f"(metrics: {', '.join(METRICS)}), got {value!r}")
    known_keys(value, sorted(METRICS), source, key)
    for name, ms in value.items():
        if not _is_ms(ms):
            raise SpecError(source, f"{key}.{name}", f"must be a number of milliseconds >= 0, got {ms!r}")
    return {name: float(value[name]) for name in METRICS if name in value}


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _is_ms(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value) and value >= 0


def is_good(ttft_s: float, tpot_s: float, e2el_s: float, slos: Mapping[str, float]) -> bool:
    """The request meets every objective given (vLLM: objective >= value, both in seconds)."""
    values = {"ttft": ttft_s, "tpot": tpot_s, "e2el": e2el_s}
    return all(slo / 1000 >= values[name] for name, slo in slos.items())
