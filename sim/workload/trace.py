"""A workload trace: when each request arrives and how long it is, as columns of integers.

The simulator's hot loop reads these arrays directly, so a Trace is columns, not request objects.
Arrays are made read-only: a trace is a value that runs share, and nobody should edit it in place.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engine.atomic import write_text_atomic

STAND_IN = "stand-in"
Segment = tuple[int, int, int]  # (segment id, first token, number of tokens): sim/workload/tokens.py
TRACE_COLUMNS = ("arrived_at", "num_prefill_tokens", "num_decode_tokens")


@dataclass(frozen=True, eq=False)  # arrays: compare columns, not objects
class Trace:
    arrival_s: np.ndarray    # float64, non-decreasing, seconds from trace start
    prompt_len: np.ndarray   # int64
    output_len: np.ndarray   # int64, tokens to generate (EOS ignored, as in the paper's runs)
    n: np.ndarray | int | None = None   # int64 parallel samples per request; an int or None means all the same (1)
    source: str = ""         # human label; contains "stand-in" when lengths are synthetic
    duration_s: float | None = None     # time the trace covers; None means up to the last arrival
    prefix_len: int = 0      # the first prefix_len tokens of every prompt are one shared prefix (0: none)
    # int64 beams per request (1: no beam search); an int or None means all the same (1). A request
    # samples n > 1 sequences or searches beam_width > 1 beams, not both.
    beam_width: np.ndarray | int | None = None
    # token identities (prefix caching): which requests' tokens are the same (sim/workload/tokens.py);
    # None: each request's own, but for the shared prefix
    segments: TokenSegments | None = None
    # the block keys of every request's full blocks, for one block size (with_block_keys: a simulation
    # with prefix caching sets them); None: none
    block_keys: list[tuple[int, ...]] | None = None

    def __post_init__(self):
        arrival = _column(self.arrival_s, np.float64)
        count = len(arrival)
        columns = dict(arrival_s=arrival, prompt_len=_column(self.prompt_len, np.int64),
                       output_len=_column(self.output_len, np.int64), n=_per_request(self.n, count),
                       beam_width=_per_request(self.beam_width, count))
        for name, values in columns.items():
            if len(values) != count:
                raise ValueError(f"Trace.{name} has {len(values)} entries, arrival_s has {count}")
            object.__setattr__(self, name, values)
        last = float(arrival[-1]) if count else 0.0
        duration = last if self.duration_s is None else float(self.duration_s)
        object.__setattr__(self, "duration_s", duration)
        if isinstance(self.prefix_len, bool) or not isinstance(self.prefix_len, (int, np.integer)) \
                or self.prefix_len < 0:
            raise ValueError(f"prefix_len must be an integer >= 0, got {self.prefix_len!r}")
        object.__setattr__(self, "prefix_len", int(self.prefix_len))
        _validate(self, last)
        if self.segments is not None and len(self.segments) != count:
            raise ValueError(f"Trace.segments has {len(self.segments)} requests, arrival_s has {count}")

    def __len__(self) -> int:
        return len(self.arrival_s)

    @property
    def is_stand_in(self) -> bool:
        return STAND_IN in self.source

    @property
    def mean_rate(self) -> float:
        """Requests per second over the time the trace covers."""
        if len(self) == 0:
            return 0.0
        return len(self) / self.duration_s if self.duration_s > 0 else float("inf")

    def window(self, start_s: float, end_s: float | None = None) -> Trace:
        """Requests arriving in [start_s, end_s), rebased so the window starts at 0 (no end: to the end)."""
        end = self.duration_s if end_s is None else float(end_s)
        if not 0 <= start_s < end:
            raise ValueError(f"window [{start_s}, {end_s}) is empty or negative")
        keep = (self.arrival_s >= start_s) & ((self.arrival_s < end) if end_s is not None else True)
        return self._select(keep, arrival_s=self.arrival_s[keep] - start_s,
                            duration_s=max(min(end, self.duration_s) - start_s, 0.0))

    @property
    def has_beams(self) -> bool:
        return bool((self.beam_width > 1).any())

    def scaled(self, factor: float) -> Trace:
        """Replay at `factor` x the recorded rate: arrival times divided by factor."""
        if not factor > 0:
            raise ValueError(f"time scale must be > 0, got {factor}")
        return Trace(self.arrival_s / factor, self.prompt_len, self.output_len, self.n,
                     self.source, self.duration_s / factor, beam_width=self.beam_width, prefix_len=self.prefix_len,
                     segments=self.segments)

    def fit_to(self, max_seq_len: int) -> Trace:
        """Drop (not truncate) requests with prompt + output >= max_seq_len, as the paper's generator did."""
        keep = self.prompt_len + self.output_len < max_seq_len
        return self._select(keep)

    def with_source(self, source: str) -> Trace:
        return Trace(self.arrival_s, self.prompt_len, self.output_len, self.n, source, self.duration_s,
                     beam_width=self.beam_width, prefix_len=self.prefix_len, segments=self.segments)

    def with_n(self, n: int) -> Trace:
        """Every request samples n sequences; n > 1 makes none a beam search (a request is one or the other)."""
        beam_width = 1 if n > 1 else self.beam_width
        return Trace(self.arrival_s, self.prompt_len, self.output_len, n, self.source, self.duration_s,
                     beam_width=beam_width, prefix_len=self.prefix_len, segments=self.segments)

    def with_beam_width(self, beam_width: int) -> Trace:
        """Every request searches beam_width beams; beam_width > 1 makes each sample one sequence."""
        n = 1 if beam_width > 1 else self.n
        return Trace(self.arrival_s, self.prompt_len, self.output_len, n, self.source, self.duration_s,
                     beam_width=beam_width, prefix_len=self.prefix_len, segments=self.segments)

    def _select(self, keep: np.ndarray, arrival_s: np.ndarray | None = None,
                duration_s: float | None = None) -> Trace:
        return Trace(self.arrival_s[keep] if arrival_s is None else arrival_s,
                     self.prompt_len[keep], self.output_len[keep], self.n[keep], self.source,
                     self.duration_s if duration_s is None else duration_s, beam_width=self.beam_width[keep],
                     prefix_len=self.prefix_len, segments=None if self.segments is None else self.segments.select(keep))


@dataclass(frozen=True, eq=False)  # arrays: compare columns, not objects
class TokenSegments:
    """Token identities (sim/workload/tokens.py): every request's segments, flat; request i's are rows
    offsets[i] .. offsets[i + 1] - 1."""

    offsets: np.ndarray  # int64, requests + 1
    ids: np.ndarray      # int64
    starts: np.ndarray   # int64
    lengths: np.ndarray  # int64

    @classmethod
    def of(cls, requests: Sequence[Sequence[Segment]]) -> TokenSegments:
        offsets = np.zeros(len(requests) + 1, np.int64)
        offsets[1:] = np.cumsum([len(r) for r in requests])
        flat = [segment for request in requests for segment in request]
        columns = np.array(flat, np.int64).reshape(-1, 3).T
        return cls(offsets, columns[0].copy(), columns[1].copy(), columns[2].copy())

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def request(self, i: int) -> list[Segment]:
        lo, hi = int(self.offsets[i]), int(self.offsets[i + 1])
        return list(zip(self.ids[lo:hi].tolist(), self.starts[lo:hi].tolist(), self.lengths[lo:hi].tolist()))

    def num_tokens(self) -> np.ndarray:
        """Tokens each request's segments cover."""
        sums = np.concatenate([[0], np.cumsum(self.lengths)])
        return sums[self.offsets[1:]] - sums[self.offsets[:-1]]

    def select(self, keep: np.ndarray) -> TokenSegments:
        """The requests where keep (a boolean mask) is True, in order."""
        return TokenSegments.of([self.request(i) for i in np.flatnonzero(keep).tolist()])


def _per_request(values, count: int) -> np.ndarray:
    """A per-request count column: an array, or one value (None: 1) for every request."""
    return _column(np.full(count, 1 if values is None else values, np.int64) if np.ndim(values) == 0 else values,
                   np.int64)


def _column(values, dtype) -> np.ndarray:
    array = np.array(values, dtype=dtype, copy=True).reshape(-1)
    array.setflags(write=False)
    return array


def _validate(trace: Trace, last_arrival: float) -> None:
    if len(trace) == 0:
        return
    if not np.isfinite(trace.arrival_s).all() or trace.arrival_s[0] < 0:
        raise ValueError("arrival times must be finite and >= 0")
    if (np.diff(trace.arrival_s) < 0).any():
        raise ValueError("arrival times must be non-decreasing")
    for name in ("prompt_len", "output_len", "n", "beam_width"):
        if getattr(trace, name).min() < 1:
            raise ValueError(f"every request needs {name} >= 1")
    both = np.flatnonzero((trace.n > 1) & (trace.beam_width > 1))
    if both.size:
        i = int(both[0])
        raise ValueError(f"request {i} has n={trace.n[i]} and beam_width={trace.beam_width[i]}; a request samples "
                         "n sequences or searches beam_width beams, not both")
    if trace.duration_s < last_arrival:
        raise ValueError(f"duration_s {trace.duration_s} is before the last arrival {last_arrival}")
    if trace.prefix_len and trace.prompt_len.min() <= trace.prefix_len:
        raise ValueError(f"every prompt must be longer than the shared prefix of {trace.prefix_len} tokens")


def write_trace_csv(trace: Trace, path: str | Path) -> Path:
    """`arrived_at,num_prefill_tokens,num_decode_tokens[,n][,beam_width]`, with the source and duration
    as comments.

    Times are written with repr() so that reading the file back (recorded.read_recorded_trace)
    gives the same floats bit for bit.
    The n column is written only when some request samples more than one sequence, the beam_width
    column only when some request is a beam search, the `# prefix_tokens:` line only when the prompts
    start with a shared prefix.
    """
    if len(trace) == 0:
        raise ValueError(f"no requests to write to {path}")  # a header-only file would not read back
    extra = [name for name in ("n", "beam_width") if (getattr(trace, name) != 1).any()]
    header = ",".join(TRACE_COLUMNS + tuple(extra))
    lines = [f"# source: {_one_line(trace.source)}", f"# duration_s: {trace.duration_s!r}"]
    if trace.prefix_len:
        lines.append(f"# prefix_tokens: {trace.prefix_len}")
    lines.append(header)
    columns = [trace.arrival_s.tolist(), trace.prompt_len.tolist(), trace.output_len.tolist()]
    columns.extend(getattr(trace, name).tolist() for name in extra)
    lines.extend(",".join(map(repr, row)) for row in zip(*columns))
    return write_text_atomic(path, "\n".join(lines) + "\n")


def _one_line(text: str) -> str:
    return " ".join(text.split())
