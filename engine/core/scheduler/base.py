"""The contract every scheduler keeps with the two data planes."""
from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping

from engine.core.batch import Batch
from engine.core.kv_usage import KVUsage
from engine.core.sequence import SequenceGroup

__all__ = ["KVUsage", "Scheduler"]


class Scheduler(ABC):
    """Decides each iteration; knows lengths and blocks, never token ids or tensors.

    Use: add_request() as requests arrive; schedule() -> Batch; run it (for real or on
    a cost model); complete(batch, now, beam_parents) applies the sampled tokens and returns
    the requests that finished. beam_parents ({child seq id: parent seq id}, engine.core.beam)
    are the forks of the batch's beam searches after a decode step: the data plane's choice.
    """

    block_size: int
    num_gpu_blocks: int
    num_cpu_blocks: int

    @abstractmethod
    def add_request(self, group: SequenceGroup) -> None: ...

    @abstractmethod
    def schedule(self) -> Batch: ...

    @abstractmethod
    def complete(self, batch: Batch, now_s: float,
                 beam_parents: Mapping[int, int] | None = None) -> list[SequenceGroup]: ...

    @abstractmethod
    def block_table(self, seq_id: int) -> list[int]:
        """Physical GPU block ids holding the sequence's KV, in logical order."""

    @abstractmethod
    def has_unfinished(self) -> bool: ...

    @abstractmethod
    def kv_usage(self) -> KVUsage:
        """The pool by what holds it now (paper Fig. 2), computed by engine.core.kv_usage."""

    @property
    @abstractmethod
    def num_waiting(self) -> int: ...

    @property
    @abstractmethod
    def num_running(self) -> int: ...

    @abstractmethod
    def release_cache(self) -> None:
        """The run is over: free what the scheduler keeps cached across requests (vLLM: the shared
        prefix's blocks). Every request's own blocks are freed as it finishes."""

    @abstractmethod
    def groups_in_system(self) -> list[SequenceGroup]:
        """Every request admitted and not finished: waiting first (oldest first), then running, then swapped."""
