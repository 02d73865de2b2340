"""What an iteration costs: the interface the simulator's clock reads."""
from __future__ import annotations

from abc import ABC, abstractmethod

from engine.core.batch import Batch


class CostModel(ABC):
    """Seconds for one iteration of a Batch, and for moving KV blocks over PCIe."""

    #: shown in every output so a reader knows where the times came from
    source: str = ""

    @abstractmethod
    def iteration_time(self, batch: Batch) -> float: ...

    @abstractmethod
    def swap_time(self, num_blocks: int) -> float: ...

    def step_time(self, batch: Batch) -> float:
        """The whole iteration as the simulator charges it: swaps, then the forward."""
        swaps = batch.num_swap_blocks
        return self.iteration_time(batch) + (self.swap_time(swaps) if swaps else 0.0)


class ScaledCostModel(CostModel):
    """Another cost model's times on the same machine running slower (factor > 1) or faster than when
    it was calibrated (see calibrate/speed.py): iterations with a prefill scaled by `prefill_factor`,
    decode-only iterations and swaps by `decode_factor` (one factor for both when only one is given)."""

    def __init__(self, base: CostModel, decode_factor: float, prefill_factor: float | None = None):
        prefill_factor = decode_factor if prefill_factor is None else prefill_factor
        for name, factor in (("decode", decode_factor), ("prefill", prefill_factor)):
            if not factor > 0:
                raise ValueError(f"a {name} speed factor must be positive, got {factor}")
        self.base, self.decode_factor, self.prefill_factor = base, decode_factor, prefill_factor
        self.source = (f"{base.source} x {decode_factor:.3f} decode, x {prefill_factor:.3f} prefill "
                       f"(machine speed probed during the replay)")

    def factor_for(self, batch: Batch) -> float:
        return self.prefill_factor if batch.prefill_lens else self.decode_factor

    def iteration_time(self, batch: Batch) -> float:
        return self.base.iteration_time(batch) * self.factor_for(batch)

    def swap_time(self, num_blocks: int) -> float:
        return self.base.swap_time(num_blocks) * self.decode_factor
