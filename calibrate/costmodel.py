"""What an iteration costs: the interface the simulator's clock reads."""
from __future__ import annotations

from abc import ABC, abstractmethod

from engine.core.batch import Batch, BatchShape

BatchLike = Batch | BatchShape  # a live batch, or its shape kept after it ran


class CostModel(ABC):
    """Seconds for one iteration of a Batch (or its BatchShape), and for moving KV blocks over PCIe."""

    #: shown in every output so a reader knows where the times came from
    source: str = ""
    #: whether iteration_time includes the engine's host work around the forward; only a profile that
    #: measured it can, and a validation whose real clock is the forward alone turns it off
    charge_host: bool = False

    @abstractmethod
    def iteration_time(self, batch: BatchLike) -> float: ...

    @abstractmethod
    def swap_time(self, num_blocks: int) -> float: ...

    def step_time(self, batch: BatchLike) -> float:
        """The whole iteration as the simulator charges it: swaps, then the forward."""
        swaps = batch.num_swap_blocks
        return self.iteration_time(batch) + (self.swap_time(swaps) if swaps else 0.0)


class ScaledCostModel(CostModel):
    """Another cost model's times, all multiplied by one factor: the same machine running slower
    (factor > 1) or faster than when it was calibrated (see calibrate/speed.py)."""

    def __init__(self, base: CostModel, factor: float):
        if not factor > 0:
            raise ValueError(f"a speed factor must be positive, got {factor}")
        self.base, self.factor = base, factor
        self.source = f"{base.source} x {factor:.3f} (machine speed probed during the replay)"

    def iteration_time(self, batch: BatchLike) -> float:
        return self.base.iteration_time(batch) * self.factor

    def swap_time(self, num_blocks: int) -> float:
        return self.base.swap_time(num_blocks) * self.factor
