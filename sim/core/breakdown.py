"""A replica's clock that keeps each iteration's breakdown (calibrate/clock/breakdown.py) as it prices it.

A run asked for its breakdown serves every iteration on its own event, priced when it starts and in order, so
the iterations a replica priced are the ones it recorded, and in the same order (the last may be cut off by
the horizon: it was priced, never recorded). A decode stretch priced ahead would price iterations it never
runs, so this clock does not price ahead; the records are the same either way (tests/sim/core).
"""
from __future__ import annotations

from calibrate.clock.breakdown import IterationTime
from calibrate.clock.costmodel import BatchLike, CostModel


class BreakdownRecorder(CostModel):
    """`base`'s times, unchanged, with each priced step's breakdown kept in `steps`; a fleet's replicas each get
    their own (for_replica), kept by replica index."""

    prices_ahead = False

    def __init__(self, base: CostModel):
        self.base = base
        self.source = base.source
        self.steps: list[IterationTime] = []
        self.replicas: dict[int, BreakdownRecorder] = {}

    def for_replica(self, index: int) -> BreakdownRecorder:
        """A fresh clock for replica `index`, which replaces any earlier one of that index (a fleet served again
        from the start)."""
        clock = BreakdownRecorder(self.base)
        self.replicas[index] = clock
        return clock

    def step_time(self, batch: BatchLike) -> float:
        self.steps.append(self.base.breakdown(batch))
        return self.base.step_time(batch)

    def iteration_time(self, batch: BatchLike) -> float:
        return self.base.iteration_time(batch)

    def swap_time(self, num_blocks: int) -> float:
        return self.base.swap_time(num_blocks)

    def breakdown(self, batch: BatchLike) -> IterationTime:
        return self.base.breakdown(batch)

    def replica_steps(self, index: int) -> list[IterationTime]:
        """What replica `index` priced, in order."""
        return self.replicas[index].steps
