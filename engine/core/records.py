"""What serving leaves behind, in one schema for both data planes: a row per request, a row per iteration.

The engine's replay and the simulator's replica write the same records through the same
`ServingRecords`, so a real run and a simulated run of one trace compare column by column and the
difference is the cost model's error. Rows are kept as tuples until read: the simulator writes
hundreds of thousands of iterations, and building an object per row would cost more than the
iteration itself.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, fields
from itertools import repeat
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from engine.core.batch import Batch
    from engine.core.kv_usage import UsageColumns
    from engine.core.scheduler.base import KVUsage
    from engine.core.sequence import SequenceGroup


@dataclass(frozen=True, slots=True)
class RequestRecord:
    request_id: int
    replica: int
    arrival_s: float
    first_token_s: float | None
    finish_s: float | None  # None: still unfinished when the run was cut off
    prompt_len: int
    output_len: int
    n: int
    num_preemptions: int


@dataclass(frozen=True, slots=True)
class IterationRecord:
    replica: int
    start_s: float
    duration_s: float
    num_prefill_tokens: int
    num_prefills: int
    num_decodes: int
    sum_decode_context: int
    num_running_groups: int
    num_waiting: int  # after the arrivals during the iteration, before its completions
    num_swap_blocks: int
    num_copy_blocks: int
    kv_token: int
    kv_reserved: int
    kv_internal: int
    kv_external: int
    kv_idle: int
    # blocks the sequences would hold without sharing, and those sharing saves (paper Fig. 15)
    unshared_blocks: int
    saved_blocks: int


REQUEST_COLUMNS = tuple(f.name for f in fields(RequestRecord))
ITERATION_COLUMNS = tuple(f.name for f in fields(IterationRecord))


class ServingRecords:
    """Requests and iterations, appended as plain tuples in the order of the record types' fields
    (one append per iteration on the simulator's hot path); read back as rows or as columns."""

    def __init__(self) -> None:
        self.request_values: list[tuple] = []
        self.iteration_values: list[tuple] = []

    def add_request(self, group: SequenceGroup, replica: int, finished: bool = True) -> None:
        self.request_values.append((
            group.request_id, replica, group.arrival_s, group.first_token_s,
            group.finish_s if finished else None, group.prompt_len, group.output_len,
            group.num_seqs, group.num_preemptions))

    def add_iteration(self, batch: Batch, usage: KVUsage, start_s: float, duration_s: float,
                      num_waiting: int, replica: int) -> None:
        self.iteration_values.append((
            replica, start_s, duration_s, batch.num_prefill_tokens, len(batch.prefill_lens),
            batch.num_decodes, batch.sum_decode_context, batch.num_running_groups, num_waiting,
            batch.num_swap_blocks, len(batch.blocks_to_copy), usage.token, usage.reserved,
            usage.internal, usage.external, usage.idle, usage.unshared_blocks, usage.saved_blocks))

    def add_decode_stretch(self, batch: Batch, usage: UsageColumns, starts: list[float], durations: list[float],
                           num_waiting: Iterable[int], replica: int) -> None:
        """Rows for iterations 2, 3, ... of a decode stretch that `batch` began (Scheduler.decode_steps): the
        i-th (from 0) is batch.decode_later(i + 1), every context that much longer and no blocks moved,
        with the pool as usage (KVUsage's fields as columns) found it. The rows add_iteration would
        append for those batches, without building them."""
        num_decodes = batch.num_decodes
        first = batch.sum_decode_context + num_decodes
        contexts = range(first, first + len(starts) * num_decodes, num_decodes) if num_decodes else repeat(first)
        zero = repeat(0)
        self.iteration_values.extend(zip(
            repeat(replica), starts, durations, zero, zero, repeat(num_decodes), contexts,
            repeat(batch.num_running_groups), num_waiting, zero, zero, *usage))

    @property
    def requests(self) -> dict[str, list]:
        """Columns, in the order requests finished (unfinished ones last)."""
        return _columns(self.request_values, REQUEST_COLUMNS)

    @property
    def iterations(self) -> dict[str, list]:
        return _columns(self.iteration_values, ITERATION_COLUMNS)

    def request_rows(self) -> list[RequestRecord]:
        """Every request, ordered by request id."""
        rows = [RequestRecord(*values) for values in self.request_values]
        return sorted(rows, key=lambda r: r.request_id)

    def iteration_rows(self) -> list[IterationRecord]:
        """Every iteration, in the order they ran."""
        return [IterationRecord(*values) for values in self.iteration_values]


def _columns(rows: list[tuple], names: tuple[str, ...]) -> dict[str, list]:
    if not rows:
        return {name: [] for name in names}
    return {name: list(column) for name, column in zip(names, zip(*rows))}
