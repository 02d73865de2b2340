"""What serving leaves behind, in one schema for both data planes: a row per request, a row per iteration.

The engine's replay and the simulator's replica write the same records through the same
`ServingRecords`, so a real run and a simulated run of one trace compare column by column and the
difference is the cost model's error. The simulator writes hundreds of thousands of iterations: a row
arrives as a plain tuple (building an object per row would cost more than the iteration itself) and
every few thousand rows move into typed columns (8 bytes a value, where a tuple of Python numbers
costs about 60), which is also how they are read back for the frames and files.
"""
from __future__ import annotations

from array import array
from collections.abc import Iterable, Sequence
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
# array typecodes of the iteration columns: float64 for times, int64 for counts
ITERATION_TYPECODES = tuple("d" if f.type == "float" else "q" for f in fields(IterationRecord))
ROWS_PER_CHUNK = 4096  # iterations kept as tuples (or stretches as pieces) before they move into the columns
# a piece of iterations not yet in the columns: their count, and per field an array or one value for all
Piece = tuple[int, tuple["array | int | float", ...]]


class ServingRecords:
    """Requests and iterations in the order of the record types' fields: an iteration run alone arrives
    as a plain tuple (one append on the simulator's hot path), a decode stretch as one piece of columns;
    both move into typed columns every ROWS_PER_CHUNK iterations and whenever they are read."""

    def __init__(self) -> None:
        self.request_values: list[tuple] = []
        self._rows: list[tuple] = []  # iterations run alone since the last piece
        self._pieces: list[list[tuple] | Piece] = []  # in order: lists of such rows, and stretches
        self._num_pending = 0  # iterations in _pieces
        self._chunks: list[tuple[array, ...]] = []  # then columns, a set per ROWS_PER_CHUNK or so iterations
        self._num_in_chunks = 0

    def add_request(self, group: SequenceGroup, replica: int, finished: bool = True) -> None:
        self.request_values.append((
            group.request_id, replica, group.arrival_s, group.first_token_s,
            group.finish_s if finished else None, group.prompt_len, group.output_len,
            group.num_seqs, group.num_preemptions))

    def add_iteration(self, batch: Batch, usage: KVUsage, start_s: float, duration_s: float,
                      num_waiting: int, replica: int) -> None:
        rows = self._rows
        rows.append((
            replica, start_s, duration_s, batch.num_prefill_tokens, len(batch.prefill_lens),
            batch.num_decodes, batch.sum_decode_context, batch.num_running_groups, num_waiting,
            batch.num_swap_blocks, len(batch.blocks_to_copy), usage.token, usage.reserved,
            usage.internal, usage.external, usage.idle, usage.unshared_blocks, usage.saved_blocks))
        if len(rows) >= ROWS_PER_CHUNK:
            self._move_pieces()

    def add_decode_stretch(self, batch: Batch, usage: UsageColumns, starts: list[float], durations: list[float],
                           num_waiting: Iterable[int], replica: int) -> None:
        """Rows for iterations 2, 3, ... of a decode stretch that `batch` began (Scheduler.decode_steps): the
        i-th (from 0) is batch.decode_later(i + 1), every context that much longer and no blocks moved,
        with the pool as usage (KVUsage's fields as columns) found it. The rows add_iteration would
        append for those batches, kept as one piece of columns (a value that stays put kept once)."""
        count, num_decodes = len(starts), batch.num_decodes
        first = batch.sum_decode_context + num_decodes
        contexts = array("q", range(first, first + count * num_decodes, num_decodes)) if num_decodes else first
        values = (replica, array("d", starts), array("d", durations), 0, 0, num_decodes, contexts,
                  batch.num_running_groups, array("q", num_waiting), 0, 0, *map(_usage_column, usage))
        if self._rows:
            self._pieces.append(self._rows)
            self._num_pending += len(self._rows)
            self._rows = []
        self._pieces.append((count, values))
        self._num_pending += count
        if self._num_pending >= ROWS_PER_CHUNK:
            self._move_pieces()

    def _move_pieces(self) -> None:
        """Into a chunk of new columns (growing one set of large arrays instead would scatter the
        reallocations' holes over the heap)."""
        if self._rows:
            self._pieces.append(self._rows)
            self._rows = []
        if not self._pieces:
            return
        columns: tuple[array, ...] = tuple(array(code) for code in ITERATION_TYPECODES)
        for piece in self._pieces:
            if isinstance(piece, list):  # rows
                for column, values in zip(columns, zip(*piece)):
                    column.extend(values)
                continue
            count, values = piece
            for column, value in zip(columns, values):
                column.extend(value if isinstance(value, array) else array(column.typecode, (value,)) * count)
        self._chunks.append(columns)
        self._num_in_chunks += len(columns[0])
        self._pieces, self._num_pending = [], 0

    @property
    def iteration_columns(self) -> tuple[array, ...]:
        """Every iteration so far, one typed array per field of IterationRecord (ITERATION_TYPECODES)."""
        self._move_pieces()
        if len(self._chunks) != 1:
            self._chunks = [tuple(_joined(code, [chunk[i] for chunk in self._chunks])
                                  for i, code in enumerate(ITERATION_TYPECODES))]
        return self._chunks[0]

    def set_iteration_columns(self, columns: Sequence[array]) -> None:
        """Replace every iteration by these columns (a fleet's records, merged in time order)."""
        if [column.typecode for column in columns] != list(ITERATION_TYPECODES):
            raise ValueError(f"iteration columns typed {[c.typecode for c in columns]}, expected "
                             f"{list(ITERATION_TYPECODES)}")
        self._rows, self._pieces, self._num_pending = [], [], 0
        self._chunks, self._num_in_chunks = [tuple(columns)], len(columns[0])

    @property
    def num_iterations(self) -> int:
        return self._num_in_chunks + self._num_pending + len(self._rows)

    @property
    def iteration_values(self) -> list[tuple]:
        """Every iteration as a tuple in the order of IterationRecord's fields."""
        return list(zip(*self.iteration_columns))

    @property
    def requests(self) -> dict[str, list]:
        """Columns, in the order requests finished (unfinished ones last)."""
        return _columns(self.request_values, REQUEST_COLUMNS)

    @property
    def iterations(self) -> dict[str, list]:
        return {name: column.tolist() for name, column in zip(ITERATION_COLUMNS, self.iteration_columns)}

    def request_rows(self) -> list[RequestRecord]:
        """Every request, ordered by request id."""
        rows = [RequestRecord(*values) for values in self.request_values]
        return sorted(rows, key=lambda r: r.request_id)

    def iteration_rows(self) -> list[IterationRecord]:
        """Every iteration, in the order they ran."""
        return [IterationRecord(*values) for values in self.iteration_values]


def _usage_column(values: Iterable[int]) -> array | int:
    """A KV usage column of a stretch's piece: one value when it stays put (itertools.repeat), else an array."""
    return next(values) if isinstance(values, repeat) else array("q", values)


def _joined(typecode: str, parts: list[array]) -> array:
    joined = array(typecode)
    if parts:
        joined.frombytes(b"".join(parts))
    return joined


def _columns(rows: list[tuple], names: tuple[str, ...]) -> dict[str, list]:
    if not rows:
        return {name: [] for name in names}
    return {name: list(column) for name, column in zip(names, zip(*rows))}
