"""'[3/20, 1m05s left]': runs done of those expected, and the time left at the pace so far.

Runs differ in length (an hour of traffic, or 15 minutes), so the pace is per unit of work (a run's
simulated seconds), not per run. One Eta can span many sweeps (`servesim reproduce`): whoever makes
it declares all the work first; a sweep takes off the runs it finds already done.
"""
from __future__ import annotations

import time


class Eta:
    def __init__(self) -> None:
        self.started = time.perf_counter()
        self.runs_expected = self.runs_done = 0
        self.work_expected = self.work_done = 0.0

    def expect(self, runs: int, work_each: float) -> None:
        self.runs_expected += runs
        self.work_expected += runs * work_each

    def skip(self, runs: int, work_each: float) -> None:
        """Runs expected but found already done: no work, no time."""
        self.expect(-runs, work_each)

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def finished(self, work: float) -> str:
        """Count one run done; the progress text after it."""
        self.runs_done += 1
        self.work_done += work
        left = max(self.work_expected - self.work_done, 0.0) * self.elapsed / self.work_done if self.work_done else 0.0
        return f"[{self.runs_done}/{self.runs_expected}, {duration_text(left)} left]"


def duration_text(seconds: float) -> str:
    """1h02m, 3m05s, 12s."""
    seconds = int(round(seconds))
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    if seconds >= 60:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds}s"
