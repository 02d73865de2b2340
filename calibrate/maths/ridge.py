"""A roofline that bends at the ridge: t = (c^p + m^p)^(1/p) instead of max(c, m).

c is a kernel's compute time and m its memory time, each at achieved (not peak) rates. Far from
the ridge point one of them dominates and t approaches the larger; where they are equal real
matmuls reach neither roof (measured A100 GEMMs of LLaMA-7B layers at 128-256 tokens run up to a
third slower than max(c, m)). The bend is set by one number, the ridge efficiency r: the share of
the roof reached at the ridge, where t = c / r. So r = 2^(-1/p); r = 1 is the hard max (p infinite),
r = 1/2 is c + m (p = 1).
"""
from __future__ import annotations

import math
from collections.abc import Callable, Iterable

import numpy as np


def ridge_exponent(ridge_efficiency: float) -> float:
    """p for a ridge efficiency r in (0, 1]: infinite (the hard max) at r = 1."""
    if not 0 < ridge_efficiency <= 1:
        raise ValueError(f"a ridge efficiency is a share in (0, 1], got {ridge_efficiency}")
    return math.inf if ridge_efficiency == 1 else math.log(2) / -math.log(ridge_efficiency)


def bent_roof(compute_s: float, memory_s: float, p: float) -> float:
    """(c^p + m^p)^(1/p), computed from the larger term so that a large p neither overflows nor
    underflows; the hard max at p = inf."""
    big, small = (compute_s, memory_s) if compute_s > memory_s else (memory_s, compute_s)
    if p == math.inf or small <= 0.0:
        return big
    return big * (1.0 + (small / big) ** p) ** (1.0 / p)


def bent_roofs(compute_s, memory_s, p: float) -> np.ndarray:
    """bent_roof over arrays."""
    c, m = np.asarray(compute_s, dtype=float), np.asarray(memory_s, dtype=float)
    big, small = np.maximum(c, m), np.minimum(c, m)
    if p == math.inf:
        return big
    ratio = np.divide(small, big, out=np.zeros_like(big), where=big > 0)
    return big * (1.0 + ratio ** p) ** (1.0 / p)


def best_on_grid(loss: Callable[[float, float], float], ridges: Iterable[float], latencies: Iterable[float],
                 shortest_s: float, start: tuple[float, float]) -> tuple[float, float]:
    """The (ridge efficiency, latency) of the grid whose fit has the lowest `loss(ridge, latency)`: ridges strictly
    inside (0, 1), latencies below 0.9 of the shortest time fitted (a latency near a row's whole time leaves its
    work nothing); `start` where none is tried."""
    best, best_loss = start, np.inf
    for latency in latencies:
        if latency >= 0.9 * shortest_s:
            break
        for ridge in ridges:
            if not 0 < ridge < 1:
                continue
            value = loss(ridge, latency)
            if value < best_loss:
                best, best_loss = (float(ridge), float(latency)), value
    return best
