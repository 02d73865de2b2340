"""Tensor-parallel all-reduce priced from measured times by message size, instead of a ring formula alone.

A measured table (Vidur's `all_reduce.csv`: `size` in bytes, `num_workers`, `devices_per_node`,
`time_stats.all_reduce.median` in ms) keeps the rows whose GPUs all sit in one node, as tensor
parallelism places them. Medians of small messages are bimodal (on a DGX A100 neighbouring sizes take
0.02 or 0.06 ms), so the times are made non-decreasing in size by isotonic regression, which averages
such runs instead of following either mode; the table keeps the fewest points that follow that curve
within 1%.
Between points the time is interpolated linearly; below the smallest message it is the smallest's
time (latency-bound), above the largest it grows in proportion to size (bandwidth-bound).
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from calibrate.tables.op_table import MS, check_columns, numeric, read_csv
from engine.errors import SpecError

REQUIRED_COLUMNS = ("size", "num_workers", "devices_per_node", "time_stats.all_reduce.median")
THIN_RTOL = 0.01  # points kept where dropping them would move the interpolated time by more than 1%


@dataclass(frozen=True)
class AllReduceTable:
    """Seconds to all-reduce a message, by the number of GPUs: (sizes in bytes, increasing; seconds)."""
    points: dict[int, tuple[tuple[float, ...], tuple[float, ...]]]

    def covers(self, workers: int) -> bool:
        return workers in self.points

    def time(self, workers: int, size_bytes: float) -> float:
        sizes, seconds = self.points[workers]
        if size_bytes <= sizes[0]:
            return seconds[0]
        if size_bytes >= sizes[-1]:
            return seconds[-1] * size_bytes / sizes[-1]
        i = bisect.bisect_right(sizes, size_bytes)
        s0, s1 = sizes[i - 1], sizes[i]
        return seconds[i - 1] + (seconds[i] - seconds[i - 1]) * (size_bytes - s0) / (s1 - s0)

    def latency(self, workers: int) -> float:
        """The smallest message's time on `workers` GPUs: the collective's fixed cost, its bytes aside."""
        return self.points[workers][1][0]

    def scaled(self, link_speedup: float) -> AllReduceTable:
        """The same collective over links `link_speedup` times as fast: a message costs what one
        `link_speedup` times smaller did (latency unchanged, bandwidth-bound times divided)."""
        return AllReduceTable({w: (tuple(s * link_speedup for s in sizes), seconds)
                               for w, (sizes, seconds) in self.points.items()})

    def to_dict(self) -> dict:
        return {int(w): {"size_bytes": [float(s) for s in sizes], "time_s": [float(t) for t in seconds]}
                for w, (sizes, seconds) in sorted(self.points.items())}

    @classmethod
    def from_dict(cls, raw: dict, source: str = "", key: str = "all_reduce") -> AllReduceTable:
        if not isinstance(raw, dict) or not raw:
            raise SpecError(source, key, "must map GPU counts to {size_bytes: [...], time_s: [...]}")
        points = {}
        for workers, entry in raw.items():
            where = f"{key}.{workers}"
            if not isinstance(workers, int) or isinstance(workers, bool) or workers < 2:
                raise SpecError(source, where, "GPU counts are whole numbers of at least 2")
            sizes = entry.get("size_bytes") if isinstance(entry, dict) else None
            seconds = entry.get("time_s") if isinstance(entry, dict) else None
            if not isinstance(sizes, list) or not isinstance(seconds, list) or not sizes or len(sizes) != len(seconds):
                raise SpecError(source, where, "needs size_bytes and time_s: two lists of one length")
            sizes_a, seconds_a = np.asarray(sizes, dtype=float), np.asarray(seconds, dtype=float)
            if not (np.isfinite(sizes_a).all() and (sizes_a > 0).all() and (np.diff(sizes_a) > 0).all()):
                raise SpecError(source, f"{where}.size_bytes", "must be positive and increasing")
            if not (np.isfinite(seconds_a).all() and (seconds_a > 0).all()):
                raise SpecError(source, f"{where}.time_s", "must be positive seconds")
            points[workers] = (tuple(float(s) for s in sizes), tuple(float(t) for t in seconds))
        return cls(points)


def isotonic(values: np.ndarray) -> np.ndarray:
    """The non-decreasing sequence nearest `values` in squared error (pool adjacent violators)."""
    blocks: list[list[float]] = []  # [sum, count]
    for v in values:
        blocks.append([float(v), 1.0])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] > blocks[-1][0] / blocks[-1][1]:
            total, count = blocks.pop()
            blocks[-1][0] += total
            blocks[-1][1] += count
    return np.concatenate([np.full(int(count), total / count) for total, count in blocks])


def thin(sizes: np.ndarray, seconds: np.ndarray, rtol: float = THIN_RTOL) -> tuple[np.ndarray, np.ndarray]:
    """The fewest points (greedily, from the smallest size) whose linear interpolation stays within `rtol`
    of every point dropped."""
    keep, anchor = [0], 0
    while anchor < len(sizes) - 1:
        end = anchor + 1
        while end + 1 < len(sizes) and _within(sizes, seconds, anchor, end + 1, rtol):
            end += 1
        keep.append(end)
        anchor = end
    return sizes[keep], seconds[keep]


def _within(sizes: np.ndarray, seconds: np.ndarray, start: int, end: int, rtol: float) -> bool:
    inner = slice(start + 1, end)
    line = np.interp(sizes[inner], [sizes[start], sizes[end]], [seconds[start], seconds[end]])
    return bool(np.all(np.abs(line - seconds[inner]) <= rtol * seconds[inner]))


def read_all_reduce(path: str | Path) -> AllReduceTable:
    source = str(path)
    table = read_csv(path, "all-reduce table")
    check_columns(table, REQUIRED_COLUMNS, source, "all-reduce table")
    if "collective" in table.columns:
        table = table[table["collective"] == "all_reduce"]
    workers = numeric(table, "num_workers", source, positive=True).astype(int)
    in_one_node = workers == numeric(table, "devices_per_node", source, positive=True).astype(int)
    if not (in_one_node & (workers >= 2)).any():
        raise SpecError(source, "column devices_per_node", "no rows with every GPU in one node "
                        "(devices_per_node == num_workers >= 2): tensor parallelism stays inside a node")
    sizes = numeric(table, "size", source, positive=True)
    seconds = numeric(table, "time_stats.all_reduce.median", source, positive=True) * MS
    points = {}
    for w in sorted(set(workers[in_one_node & (workers >= 2)])):
        at = in_one_node & (workers == w)
        by_size: dict[float, list[float]] = {}
        for s, t in zip(sizes[at], seconds[at]):
            by_size.setdefault(float(s), []).append(float(t))
        ordered = np.array(sorted(by_size))
        smooth = isotonic(np.array([np.mean(by_size[s]) for s in ordered]))
        kept_sizes, kept_seconds = thin(ordered, smooth)
        points[int(w)] = (tuple(float(s) for s in kept_sizes), tuple(float(t) for t in kept_seconds))
    return AllReduceTable(points)
