"""What serving leaves behind, in one schema for both data planes: a row per request, a row per iteration.

The engine's replay and the simulator's replica write the same records through the same
`ServingRecords`, so a real run and a simulated run of one trace compare column by column and the
difference is the cost model's error. The simulator writes hundreds of thousands of iterations into
typed columns (8 bytes a value, where a tuple of Python numbers costs about 60), which is also how they
are read back for the frames and files: a lone iteration's row arrives as a plain tuple (building an
object per row would cost more than the iteration itself) and waits with a few others to move, and a
decode stretch's iterations go into the columns directly.
"""
from __future__ import annotations

from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields
from itertools import islice
from typing import TYPE_CHECKING

from mypy_extensions import mypyc_attr

from engine.core.kv_usage import KVUsage, UsageColumns, usage_values

if TYPE_CHECKING:
    from engine.core.batch import Batch
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
    # prefix caching only (CACHED_COLUMN): prompt tokens found in the prefix cache at its first admission
    cached_tokens: int | None = None
    # speculative decoding only (SPECULATIVE_COLUMNS): tokens its sequences proposed, and those the target accepted
    proposed_tokens: int | None = None
    accepted_tokens: int | None = None


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


@dataclass(frozen=True, slots=True)
class DroppedRecord:
    """A request that left without being served: `aborted` (ServingCore.abort), or `ignored` by a policy that
    refuses an unservable request at schedule time (vLLM's FINISHED_IGNORED). Kept apart from RequestRecord:
    latency metrics are over served requests, and a run that drops nobody records exactly what it did."""

    request_id: int
    replica: int
    arrival_s: float
    first_token_s: float | None  # an aborted request may have had its first token
    dropped_s: float
    prompt_len: int
    output_len: int
    n: int
    num_preemptions: int
    status: str  # one of DROPPED_STATUSES


DROPPED_STATUSES = ("aborted", "ignored")
# every run's request columns; a run with prefix caching adds CACHED_COLUMN after them (its rows one value longer),
# a speculating run SPECULATIVE_COLUMNS after those (two values longer); its iterations carry the same two, apart
# (ServingRecords.speculation_values)
CACHED_COLUMN = "cached_tokens"
SPECULATIVE_COLUMNS = ("proposed_tokens", "accepted_tokens")
OPTIONAL_COLUMNS = (CACHED_COLUMN,) + SPECULATIVE_COLUMNS  # mypyc compiles no starred tuple display here
REQUEST_COLUMNS = tuple(f.name for f in fields(RequestRecord) if f.name not in OPTIONAL_COLUMNS)
DROPPED_COLUMNS = tuple(f.name for f in fields(DroppedRecord))
ITERATION_COLUMNS = tuple(f.name for f in fields(IterationRecord))
# array typecodes of the iteration columns: float64 for times, int64 for counts (a field's type is the string
# "float" under `from __future__ import annotations`, and the class float itself once compiled by mypyc)
ITERATION_TYPECODES = tuple("d" if f.type in ("float", float) else "q" for f in fields(IterationRecord))
SWAP_COLUMN, COPY_COLUMN = ITERATION_COLUMNS.index("num_swap_blocks"), ITERATION_COLUMNS.index("num_copy_blocks")
ROWS_PER_CHUNK = 4096  # iterations kept as tuples before they move into the columns
ROWS_PER_COLUMNS = 4096  # iterations a set of columns grows to before the next set starts


@mypyc_attr(allow_interpreted_subclasses=True)  # compiled, it stays a base: sim.experiment.records.Records adds frames
class ServingRecords:
    """Requests and iterations in the order of the record types' fields. A lone iteration arrives as a plain
    tuple, and every ROWS_PER_CHUNK of them, or before a decode stretch, or whenever they are read, the tuples
    move into typed columns. A decode stretch's iterations go into the columns directly, column by column
    (most of their values repeat or count up: no row of them is ever built)."""

    def __init__(self) -> None:
        self.request_values: list[tuple] = []
        self.dropped_values: list[tuple] = []  # DroppedRecord's fields, in the order they were dropped
        self._rows: list[tuple] = []  # the iterations since the last move
        self._chunks: list[tuple[array, ...]] = []  # then columns: sets of them, in order
        # the last set, while it still grows; None once it is full or handed out (iteration_columns: a caller
        # holding those arrays must not see them grow)
        self._open: tuple[array, ...] | None = None
        self.cached_column = False  # the requests carry CACHED_COLUMN (a prefix-caching run: ServingCore.admit)
        # a speculating run (sim.core.replica): requests carry SPECULATIVE_COLUMNS, and each iteration its tokens
        # proposed and accepted, in speculation_values (one pair an iteration, in the order they ran)
        self.speculating = False
        self.speculation_values: list[tuple[int, int]] = []

    def add_request(self, group: SequenceGroup, replica: int, finished: bool = True) -> None:
        values: tuple[int | float | None, ...] = (group.request_id, replica, group.arrival_s, group.first_token_s,
                  group.finish_s if finished else None, group.prompt_len, group.output_len,
                  group.num_seqs, group.num_preemptions)
        if self.cached_column:
            values += (max(group.cached_prompt_tokens, 0),)
        if self.speculating:
            values += (group.num_proposed_tokens, group.num_accepted_tokens)
        self.request_values.append(values)

    def add_speculation(self, num_proposed: int, num_accepted: int) -> None:
        """The last iteration's tokens proposed and accepted (a speculating run's: ServingCore.end_steps)."""
        self.speculation_values.append((num_proposed, num_accepted))

    def add_speculations(self, values: list[tuple[int, int]]) -> None:
        """add_speculation for each of a speculating stretch's iterations, in order."""
        self.speculation_values.extend(values)

    def add_dropped(self, group: SequenceGroup, replica: int, dropped_s: float, status: str) -> None:
        if status not in DROPPED_STATUSES:
            raise ValueError(f"dropped status {status!r} is not one of {list(DROPPED_STATUSES)}")
        self.dropped_values.append((
            group.request_id, replica, group.arrival_s, group.first_token_s, dropped_s, group.prompt_len,
            group.output_len, group.num_seqs, group.num_preemptions, status))

    def add_iteration(self, batch: Batch, usage: KVUsage, start_s: float, duration_s: float, num_waiting: int,
                      replica: int) -> None:
        """One iteration's row: what add_iterations writes for one, as a tuple, since the step-by-step loop
        writes one per iteration and a tuple costs less than a value per column (test_records holds the two
        alike)."""
        rows = self._rows
        rows.append((
            replica, start_s, duration_s, batch.num_prefill_tokens, len(batch.prefill_lens), batch.num_decodes,
            batch.sum_decode_context, batch.num_running_groups, num_waiting, batch.num_swap_blocks,
            len(batch.blocks_to_copy), *usage_values(usage)))
        if len(rows) >= ROWS_PER_CHUNK:
            self._move_rows()

    def add_iterations(self, batch: Batch, usage: UsageColumns, starts: Sequence[float],
                       durations: Iterable[float], num_waiting: Iterable[int] | int, replica: int,
                       context_sums: list[int] | None = None) -> None:
        """A row per start: `batch`, then, in a decode stretch it began (Scheduler.decode_stretch), the
        iterations after it, the i-th (from 0) batch.decode_later(i): every context i longer and no blocks
        moved. `usage`: the pool as each found it (KVUsage's fields as columns: kv_usage.UsageColumns; a
        column may run on past the last start, and one that stays the same is that int). context_sums: each
        one's sum of decode contexts where they do not grow by one a decode a step (a speculating stretch's).
        Written into the columns, one column at a time."""
        self._move_rows()  # the lone iterations before these, in order
        count, num_decodes, first = len(starts), batch.num_decodes, batch.sum_decode_context
        if not count:
            return
        contexts: Iterable[int] | int = (context_sums if context_sums is not None
                                         else range(first, first + count * num_decodes, num_decodes) if num_decodes
                                         else first)
        columns = self._open_columns()
        for column, values in zip(columns, (
                replica, starts, durations, batch.num_prefill_tokens, len(batch.prefill_lens), num_decodes, contexts,
                batch.num_running_groups, num_waiting, 0, 0, *usage)):
            _extend(column, values, count)
        # blocks move in the stretch's first iteration alone
        row = len(columns[0]) - count
        columns[SWAP_COLUMN][row] = batch.num_swap_blocks
        columns[COPY_COLUMN][row] = len(batch.blocks_to_copy)
        self._close_if_full(columns)

    def _move_rows(self) -> None:
        """The tuples since the last move, into the columns."""
        if self._rows:
            columns = self._open_columns()
            for column, values in zip(columns, zip(*self._rows)):
                column.extend(values)
            self._rows = []
            self._close_if_full(columns)

    def _open_columns(self) -> tuple[array, ...]:
        """The set of columns that grows: the last one, or a new one (growing one set of ever larger arrays
        instead would scatter the reallocations' holes over the heap)."""
        columns = self._open
        if columns is None:
            columns = tuple(array(code) for code in ITERATION_TYPECODES)
            self._chunks.append(columns)
            self._open = columns
        return columns

    def _close_if_full(self, columns: tuple[array, ...]) -> None:
        """A full set is kept as copies of its exact size: arrays grown by appends keep spare room, which
        raised the peak memory of an hour's `servesim run` from 239 to 252 MB."""
        if len(columns[0]) >= ROWS_PER_COLUMNS:
            self._chunks[-1] = tuple(array(column.typecode, column) for column in columns)
            self._open = None

    @property
    def iteration_columns(self) -> tuple[array, ...]:
        """Every iteration so far, one typed array per field of IterationRecord (ITERATION_TYPECODES)."""
        self._move_rows()
        self._open = None  # the caller holds these arrays: later iterations go into a new set
        if len(self._chunks) != 1:
            self._chunks = [tuple(_joined(code, [chunk[i] for chunk in self._chunks])
                                  for i, code in enumerate(ITERATION_TYPECODES))]
        return self._chunks[0]

    def set_iteration_columns(self, columns: Sequence[array]) -> None:
        """Replace every iteration by these columns (a fleet's records, merged in time order)."""
        if [column.typecode for column in columns] != list(ITERATION_TYPECODES):
            raise ValueError(f"iteration columns typed {[c.typecode for c in columns]}, expected "
                             f"{list(ITERATION_TYPECODES)}")
        self._rows = []
        self._chunks = [tuple(columns)]
        self._open = None  # the caller's arrays: never grown here

    @property
    def num_iterations(self) -> int:
        return sum(len(chunk[0]) for chunk in self._chunks) + len(self._rows)

    @property
    def iteration_values(self) -> list[tuple]:
        """Every iteration as a tuple in the order of IterationRecord's fields."""
        return list(zip(*self.iteration_columns))

    @property
    def request_columns(self) -> tuple[str, ...]:
        """REQUEST_COLUMNS, and CACHED_COLUMN where the requests carry it (a prefix-caching run)."""
        values = self.request_values  # a fleet's merged records have the rows, not the flags
        if values:
            return request_columns_of(len(values[0]))
        return (REQUEST_COLUMNS + ((CACHED_COLUMN,) if self.cached_column else ())
                + (SPECULATIVE_COLUMNS if self.speculating else ()))

    @property
    def requests(self) -> dict[str, list]:
        """Columns, in the order requests finished (unfinished ones last)."""
        return _columns(self.request_values, self.request_columns)

    @property
    def dropped(self) -> dict[str, list]:
        """Columns of the requests dropped unserved (DroppedRecord), in the order they were dropped."""
        return _columns(self.dropped_values, DROPPED_COLUMNS)

    def dropped_rows(self) -> list[DroppedRecord]:
        return sorted((DroppedRecord(*values) for values in self.dropped_values), key=lambda r: r.request_id)

    @property
    def iterations(self) -> dict[str, list]:
        return {name: column.tolist() for name, column in zip(ITERATION_COLUMNS, self.iteration_columns)}

    def request_rows(self) -> list[RequestRecord]:
        """Every request, ordered by request id."""
        names = self.request_columns
        rows = [RequestRecord(**dict(zip(names, values))) for values in self.request_values]
        return sorted(rows, key=lambda r: r.request_id)

    def iteration_rows(self) -> list[IterationRecord]:
        """Every iteration, in the order they ran."""
        return [IterationRecord(*values) for values in self.iteration_values]


def request_columns_of(width: int) -> tuple[str, ...]:
    """The request columns of rows `width` values long: REQUEST_COLUMNS, then CACHED_COLUMN (one more) or
    SPECULATIVE_COLUMNS (two more) or both (three)."""
    extra = width - len(REQUEST_COLUMNS)
    if extra not in (0, 1, 2, 3):
        raise ValueError(f"request rows of {width} values: expected {len(REQUEST_COLUMNS)} to "
                         f"{len(REQUEST_COLUMNS) + 3}")
    return REQUEST_COLUMNS + ((CACHED_COLUMN,) if extra % 2 else ()) + (SPECULATIVE_COLUMNS if extra >= 2 else ())


def _joined(typecode: str, parts: list[array]) -> array:
    joined = array(typecode)
    if parts:
        joined.frombytes(b"".join(parts))
    return joined


def _columns(rows: list[tuple], names: tuple[str, ...]) -> dict[str, list]:
    if not rows:
        return {name: [] for name in names}
    return {name: list(column) for name, column in zip(names, zip(*rows))}


def _extend(column: array, values: Iterable[int] | Iterable[float] | int | float, count: int) -> None:
    """`count` values onto the column: a number is that number `count` times, copied in C (a stretch's columns
    are mostly such); a list's values are converted in one pass over the list (fromlist), an iterator's one
    call at a time."""
    if isinstance(values, (int, float)):
        column.extend(array(column.typecode, (values,)) * count)
    elif isinstance(values, list):
        column.fromlist(values if len(values) <= count else values[:count])
    else:
        column.extend(islice(values, count))
