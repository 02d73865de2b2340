"""The contract every scheduler keeps with the two data planes."""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

from engine.core.batch import Batch
from engine.core.sequence import SequenceGroup


@dataclass(slots=True)
class KVUsage:
    """KV pool slots by what holds them (paper Fig. 2); the five parts sum to the pool."""

    token: int = 0  # slots holding a token's K/V
    reserved: int = 0  # slots reserved for tokens the request will still generate
    internal: int = 0  # slots inside a request's own allocation it will never fill
    external: int = 0  # unusable: rounding above the estimate, free space nobody waiting can use
    idle: int = 0  # free space while nobody waits for it

    @property
    def total(self) -> int:
        return self.token + self.reserved + self.internal + self.external + self.idle


class Scheduler(ABC):
    """Decides each iteration; knows lengths and blocks, never token ids or tensors.

    Use: add_request() as requests arrive; schedule() -> Batch; run it (for real or on
    a cost model); complete(batch, now) applies the sampled tokens and returns the
    requests that finished.
    """

    block_size: int
    num_gpu_blocks: int
    num_cpu_blocks: int

    @abstractmethod
    def add_request(self, group: SequenceGroup) -> None: ...

    @abstractmethod
    def schedule(self) -> Batch: ...

    @abstractmethod
    def complete(self, batch: Batch, now_s: float) -> list[SequenceGroup]: ...

    @abstractmethod
    def block_table(self, seq_id: int) -> list[int]:
        """Physical GPU block ids holding the sequence's KV, in logical order."""

    @abstractmethod
    def has_unfinished(self) -> bool: ...

    @abstractmethod
    def kv_usage(self) -> KVUsage: ...

    @property
    @abstractmethod
    def num_waiting(self) -> int: ...

    @property
    @abstractmethod
    def num_running(self) -> int: ...
