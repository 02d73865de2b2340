"""Arrival processes: (rate, duration_s, rng) -> sorted float64 arrival times in [0, duration_s).

`poisson_quanta` is the authors' exact generator (paper-facts A, benchmark/trace.py): time in
10 ms quanta, each gets rng.poisson(rate * 0.01) arrivals stamped at the quantum's start. The
others are for users' questions: exact exponential gaps, gamma gaps with a chosen coefficient of
variation or shape (vLLM's `vllm bench serve --burstiness` is the shape), and a constant rate.

`first_arrivals` draws a count instead of a duration (vLLM's --num-prompts): the first `count` arrivals of
the same process, whenever the last of them comes.
"""
from __future__ import annotations

import math

import numpy as np

QUANTUM_S = 0.01


def poisson_quanta(rate: float, duration_s: float, rng: np.random.Generator) -> np.ndarray:
    _check(rate, duration_s)
    num_quanta = int(round(duration_s / QUANTUM_S))
    counts = rng.poisson(rate * QUANTUM_S, num_quanta)
    # quantum index / 100 rather than index * 0.01, so stamps are the nearest floats to k/100 s
    return np.repeat(np.arange(num_quanta) / round(1 / QUANTUM_S), counts).astype(np.float64)


def exponential(rate: float, duration_s: float, rng: np.random.Generator) -> np.ndarray:
    return _renewal(rate, duration_s, lambda size: rng.exponential(1.0 / rate, size))


def gamma(rate: float, duration_s: float, rng: np.random.Generator, cv: float = 1.0,
          shape: float | None = None) -> np.ndarray:
    """Gaps ~ Gamma(shape 1/cv^2, mean 1/rate): cv 1 is Poisson, above 1 bursty, below 1 regular. `shape`, where
    given, is used as it is instead (vLLM's burstiness: its gaps are Gamma(shape, scale 1 / (rate * shape)))."""
    return _renewal(rate, duration_s, _gamma_gaps(rate, rng, cv, shape))


def _gamma_gaps(rate: float, rng: np.random.Generator, cv: float, shape: float | None):
    if shape is None:
        if not cv > 0:
            raise ValueError(f"cv must be > 0, got {cv}")
        shape = 1.0 / cv**2
    elif not shape > 0:
        raise ValueError(f"shape must be > 0, got {shape}")
    drawn = shape
    return lambda size: rng.gamma(drawn, 1.0 / (rate * drawn), size)


def constant(rate: float, duration_s: float, rng: np.random.Generator) -> np.ndarray:
    _check(rate, duration_s)
    times = np.arange(math.ceil(duration_s * rate)) / rate
    return times[times < duration_s]


def _renewal(rate: float, duration_s: float, gaps) -> np.ndarray:
    """Arrival k at the sum of the first k gaps, until duration_s (first arrival after one gap)."""
    _check(rate, duration_s)
    expected = rate * duration_s
    chunks, total = [], 0.0
    while total < duration_s:
        times = total + np.cumsum(gaps(int(expected + 6 * math.sqrt(expected) + 16)))
        chunks.append(times)
        total = times[-1]
    times = np.concatenate(chunks)
    return times[times < duration_s]


def first_arrivals(arrival: str, rate: float, count: int, rng: np.random.Generator, cv: float = 1.0,
                   shape: float | None = None) -> np.ndarray:
    """The first `count` arrivals of process `arrival` (a name of ARRIVALS) at `rate`: `count` gaps of a renewal
    process, the first after one gap as there; the constant rate's from 0; the authors' quanta drawn until `count`
    arrivals have come (the last quantum's extra ones left out)."""
    _check(rate, 1.0)
    if not count > 0:
        raise ValueError(f"count must be > 0, got {count}")
    if arrival == "poisson":
        return _quanta_until(rate, count, rng)
    if arrival == "constant":
        return np.arange(count) / rate
    gaps = _gamma_gaps(rate, rng, cv, shape) if arrival == "gamma" else \
        (lambda size: rng.exponential(1.0 / rate, size))
    return np.cumsum(gaps(count))


def _quanta_until(rate: float, count: int, rng: np.random.Generator) -> np.ndarray:
    """poisson_quanta's stamps, quantum after quantum, until `count` arrivals have come."""
    per_quantum = rate * QUANTUM_S
    counts, drawn = [], 0
    while drawn < count:
        expected = (count - drawn) / per_quantum
        chunk = rng.poisson(per_quantum, int(expected + 6 * math.sqrt(expected) + 16))
        counts.append(chunk)
        drawn += int(chunk.sum())
    every = np.concatenate(counts)
    return np.repeat(np.arange(len(every)) / round(1 / QUANTUM_S), every)[:count].astype(np.float64)


def _check(rate: float, duration_s: float) -> None:
    if not rate > 0 or not math.isfinite(rate):
        raise ValueError(f"rate must be a positive number of requests/s, got {rate}")
    if not duration_s > 0 or not math.isfinite(duration_s):
        raise ValueError(f"duration_s must be > 0, got {duration_s}")


ARRIVALS = {"poisson": poisson_quanta, "exponential": exponential, "gamma": gamma, "constant": constant}
