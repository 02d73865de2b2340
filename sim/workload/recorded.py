"""Recorded arrival traces: read, cut to a window, fit to the model, and replay at k x the rate.

Two forms are accepted, so users can point at a trace as they downloaded it:
  arrived_at,num_prefill_tokens,num_decode_tokens[,n][,beam_width]
                                                        seconds (servesim's own form; vidur's)
  TIMESTAMP,ContextTokens,GeneratedTokens               the Azure LLM inference trace release,
                                                        date-times converted to seconds from the first
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engine.errors import SpecError

from .table import (
    Table,
    check_sorted,
    column_text,
    find_columns,
    numeric_column,
    optional_column,
    read_table,
)
from .trace import Trace

# a time's UTC offset: 2023-11-16T18:15:46+01:00, ...46Z, ...46.5-0500
UTC_OFFSET = re.compile(r"\d\d:\d\d(:\d\d(\.\d+)?)?\s*(Z|[+-]\d\d(:?\d\d)?)$")
FORMS = {
    "seconds": ("arrived_at", "num_prefill_tokens", "num_decode_tokens"),
    "azure": ("TIMESTAMP", "ContextTokens", "GeneratedTokens"),
}


@dataclass(frozen=True)
class Replay:
    """A trace ready to replay, and what was left out of the file on the way."""
    trace: Trace
    num_read: int               # data rows in the file
    num_empty: int              # rows with zero prompt or output tokens (nothing to serve), dropped
    num_outside_window: int
    num_too_long: int           # prompt + output >= max_seq_len, dropped as the paper's generator did


def read_recorded_trace(path: str | Path) -> Trace:
    """The whole file on its recorded clock (rows with zero tokens dropped)."""
    trace, _ = _read(path)
    return trace


def load_recorded(path: str | Path, *, time_scale: float | None = None,
                  window_s: tuple[float, float] | None = None, max_seq_len: int | None = None) -> Replay:
    """Read, keep [start, end) of the recorded clock, drop what does not fit, then scale time.

    The window is on the recorded clock (before scaling): "minutes 10-20 of the log, replayed 2x".
    """
    trace, (num_read, num_empty) = _read(path)
    notes = []
    before = len(trace)
    if window_s is not None:
        trace = trace.window(*window_s)
        notes.append(f"window [{window_s[0]:g}, {window_s[1]:g}) s")
    num_outside = before - len(trace)
    before = len(trace)
    if max_seq_len is not None:
        trace = trace.fit_to(max_seq_len)
        notes.append(f"dropped {before - len(trace)} of {before} with prompt+output >= {max_seq_len}")
    num_too_long = before - len(trace)
    if time_scale is not None and time_scale != 1:
        trace = trace.scaled(time_scale)
        notes.append(f"replayed at {time_scale:g}x the recorded rate")
    if notes:
        trace = trace.with_source(f"{trace.source}; " + "; ".join(notes))
    return Replay(trace, num_read, num_empty, num_outside, num_too_long)


def _read(path: str | Path) -> tuple[Trace, tuple[int, int]]:
    table = read_table(path)
    form, (t_col, p_col, o_col) = find_columns(table, FORMS)
    arrival = _arrival_seconds(table, t_col)
    check_sorted(table, arrival, table.header[t_col])
    prompt = numeric_column(table, p_col, integer=True)
    output = numeric_column(table, o_col, integer=True)
    n = _count_column(table, "n", "parallel samples")
    beam_width = _count_column(table, "beam_width", "beams")
    _check_one_kind(table, n, beam_width)
    served = (prompt > 0) & (output > 0)
    meta = _comment_values(table)
    source = meta.get("source") or f"recorded trace ({table.source})"
    num_empty = int((~served).sum())
    if num_empty:
        source += f"; dropped {num_empty} rows with zero tokens"
    duration = _duration(meta, arrival)
    prefix = _prefix_tokens(table, meta, prompt, served)
    trace = Trace(arrival[served], prompt[served], output[served], n[served], source, duration,
                  beam_width=beam_width[served], prefix_len=prefix)
    return trace, (len(table.rows), num_empty)


def _arrival_seconds(table: Table, index: int) -> np.ndarray:
    """Seconds as written, or date-times as seconds from the first row (the first cell decides which)."""
    cells = column_text(table, index)
    if _is_number(cells[0]):
        return numeric_column(table, index, integer=False)
    import pandas as pd  # only date-time columns need pandas' ISO-8601 parser
    _check_offsets(table, index, cells)
    # to UTC: a log whose UTC offset changes (daylight saving) still counts real seconds between rows
    stamps = pd.to_datetime(pd.Series(cells), format="ISO8601", errors="coerce", utc=True)
    bad = np.flatnonzero(stamps.isna().to_numpy())
    if bad.size:
        i = int(bad[0])
        raise SpecError(table.source, table.where(i),
                        f"(line {table.line_of(i)}) column {table.header[index]}: {cells[i]!r} is neither "
                        "seconds nor a date-time like 2023-11-16 18:15:46.6805900")
    return ((stamps - stamps.iloc[0]) / pd.Timedelta(seconds=1)).to_numpy(np.float64)


def _check_offsets(table: Table, index: int, cells: list[str]) -> None:
    """Every date-time with a UTC offset, or none: a local time beside one with an offset has no one
    meaning (which zone is the local one?)."""
    with_offset = [bool(UTC_OFFSET.search(cell)) for cell in cells]
    differs = next((i for i, has in enumerate(with_offset) if has != with_offset[0]), None)
    if differs is not None:
        has, lacks = ("has", "lacks") if with_offset[differs] else ("lacks", "has")
        raise SpecError(table.source, table.where(differs), (
            f"(line {table.line_of(differs)}) column {table.header[index]}: {cells[differs]!r} {has} a UTC offset "
            f"and row 1 {lacks} one; give every date-time an offset (or Z), or none"))


def _is_number(cell: str) -> bool:
    try:
        float(cell)
        return True
    except ValueError:
        return False


def _count_column(table: Table, name: str, what: str) -> np.ndarray:
    """An optional per-request count (n, beam_width): 1 where the file has no such column."""
    index = optional_column(table, name)
    if index is None:
        return np.ones(len(table.rows), np.int64)
    values = numeric_column(table, index, integer=True)
    zero = np.flatnonzero(values < 1)
    if zero.size:
        i = int(zero[0])
        raise SpecError(table.source, table.where(i),
                        f"(line {table.line_of(i)}) column {name}: {what} must be >= 1")
    return values


def _check_one_kind(table: Table, n: np.ndarray, beam_width: np.ndarray) -> None:
    both = np.flatnonzero((n > 1) & (beam_width > 1))
    if both.size:
        i = int(both[0])
        raise SpecError(table.source, table.where(i),
                        f"(line {table.line_of(i)}) n={n[i]} and beam_width={beam_width[i]}: a request samples "
                        "n sequences or searches beam_width beams, not both; set one of them to 1")


def _comment_values(table: Table) -> dict[str, str]:
    """`# key: value` lines at the top, as written by write_trace_csv."""
    values = {}
    for comment in table.comments:
        key, sep, value = comment.partition(":")
        if sep:
            values.setdefault(key.strip(), value.strip())
    return values


def _duration(meta: dict[str, str], arrival: np.ndarray) -> float | None:
    try:
        duration = float(meta["duration_s"])
    except (KeyError, ValueError):
        return None
    return duration if len(arrival) == 0 or duration >= arrival[-1] else None


def _prefix_tokens(table: Table, meta: dict[str, str], prompt: np.ndarray, served: np.ndarray) -> int:
    """The `# prefix_tokens: N` line write_trace_csv adds when every prompt starts with one shared prefix."""
    text = meta.get("prefix_tokens")
    if text is None:
        return 0
    try:
        prefix = int(text)
    except ValueError:
        prefix = -1
    if prefix < 0:
        raise SpecError(table.source, "prefix_tokens", f"the '# prefix_tokens:' line must give a whole number "
                        f"of tokens >= 0, got {text!r}")
    short = np.flatnonzero(served & (prompt <= prefix))
    if short.size:
        i = int(short[0])
        raise SpecError(table.source, table.where(i), (
            f"(line {table.line_of(i)}) a prompt of {int(prompt[i])} tokens cannot hold the shared prefix of "
            f"{prefix} tokens (# prefix_tokens) and an input"))
    return prefix
