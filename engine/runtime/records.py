"""A replay's input rows and what it leaves behind, in the control plane's record schema.

No torch: a real run and a simulated run of one trace compare column by column, and the
difference is the cost model's error.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from engine.core.records import (
    CACHED_COLUMN,
    ITERATION_COLUMNS,
    REQUEST_COLUMNS,
    SPECULATIVE_COLUMNS,
    DroppedRecord,
    IterationRecord,
    RequestRecord,
    ServingRecords,
)
from engine.core.serving import Request
from engine.core.system import SystemSpec


@dataclass
class ReplayResult:
    """A replay's records as rows: requests by request id, iterations in time order."""

    requests: list[RequestRecord] = field(default_factory=list)
    iterations: list[IterationRecord] = field(default_factory=list)
    # per iteration, the host's wall seconds outside the timed forward (scheduler, inputs, sampling's
    # host side, completion, records): measured, not charged to the replay's clock
    host_s: list[float] = field(default_factory=list, compare=False)
    # per iteration, the span of its device work (engine/runtime/timing.py: CUDA events from its first
    # block plan to its last sampling kernel; on a CPU that span's wall time); its host time is the rest of
    # its step: duration + host_s - device_s on the forward clock. Measured, not in the shared records.
    device_s: list[float] = field(default_factory=list, compare=False)
    dropped: list[DroppedRecord] = field(default_factory=list)  # aborted or ignored, by request id
    # a speculating run's: each iteration's tokens proposed and accepted, in the order they ran
    speculation: list[tuple[int, int]] = field(default_factory=list)


    @classmethod
    def of(cls, records: ServingRecords, host_s: list[float] | None = None,
           device_s: list[float] | None = None) -> ReplayResult:
        return cls(records.request_rows(), records.iteration_rows(), list(host_s or []), list(device_s or []),
                   records.dropped_rows(), list(records.speculation_values))

    def request_columns(self) -> dict[str, list]:
        first = self.requests[0] if self.requests else None
        names = (REQUEST_COLUMNS + ((CACHED_COLUMN,) if first is not None and first.cached_tokens is not None else ())
                 + (SPECULATIVE_COLUMNS if first is not None and first.proposed_tokens is not None else ()))
        return {name: [getattr(r, name) for r in self.requests] for name in names}

    def iteration_columns(self) -> dict[str, list]:
        columns = {name: [getattr(r, name) for r in self.iterations] for name in ITERATION_COLUMNS}
        if self.speculation:  # the simulator's iterations carry the same two columns (speculation_records.py)
            columns.update({name: [pair[i] for pair in self.speculation] for i, name in enumerate(SPECULATIVE_COLUMNS)})
        return columns


def _row_value(row, name: str, index: int, default=None):
    value = row.get(name, default) if isinstance(row, dict) else getattr(row, name, default)
    if value is None:
        raise ValueError(f"request row {index}: missing {name!r} (need arrival_s, prompt_len, output_len; "
                         "n, beam_width and request_id are optional)")
    return value


def _per_row(trace, name: str, count: int) -> list[int]:
    """A columnar trace's n or beam_width: an array, one int for all, or absent (1)."""
    values = getattr(trace, name, None)
    if values is None:
        return [1] * count
    if hasattr(values, "__len__"):
        return list(values)
    return [int(values)] * count


def replay_requests(requests) -> list[Request]:
    """Rows (Request, mappings or objects with the fields), or a columnar trace whose
    arrival_s / prompt_len / output_len / n / beam_width are arrays and whose prefix_len (if any) is one
    number for every request (sim's Trace). Ids default to the row index."""
    if hasattr(requests, "arrival_s") and not isinstance(requests, Request):
        prefix_len = int(getattr(requests, "prefix_len", 0))
        count = len(requests.arrival_s)
        requests = [dict(arrival_s=a, prompt_len=p, output_len=o, n=k, beam_width=w, prefix_len=prefix_len)
                    for a, p, o, k, w in zip(requests.arrival_s, requests.prompt_len, requests.output_len,
                                             _per_row(requests, "n", count), _per_row(requests, "beam_width", count))]
    rows = []
    for i, row in enumerate(requests):
        if isinstance(row, (tuple, list)):
            row = dict(zip(("arrival_s", "prompt_len", "output_len", "n", "beam_width"), row))
        rows.append(Request(int(_row_value(row, "request_id", i, i)), float(_row_value(row, "arrival_s", i)),
                                  int(_row_value(row, "prompt_len", i)), int(_row_value(row, "output_len", i)),
                                  int(_row_value(row, "n", i, 1)), prefix_len=int(_row_value(row, "prefix_len", i, 0)),
                                  beam_width=int(_row_value(row, "beam_width", i, 1))))
    return rows


def check_request(request: Request, max_seq_len: int, system: SystemSpec | None = None) -> None:
    where = f"request {request.request_id}"
    if request.arrival_s < 0 or request.arrival_s != request.arrival_s:
        raise ValueError(f"{where}: arrival_s must be >= 0, got {request.arrival_s}")
    for name in ("prompt_len", "output_len", "n", "beam_width"):
        if getattr(request, name) < 1:
            raise ValueError(f"{where}: {name} must be >= 1, got {getattr(request, name)}")
    if not 0 <= request.prefix_len < request.prompt_len:
        raise ValueError(f"{where}: a shared prefix of {request.prefix_len} tokens must be shorter than its "
                         f"prompt of {request.prompt_len}")
    if request.n > 1 and request.beam_width > 1:
        raise ValueError(f"{where}: n={request.n} and beam_width={request.beam_width}; a request samples n "
                         "sequences or searches beam_width beams, not both")
    if system is not None and system.speculative is not None and max(request.n, request.beam_width) > 1:
        what = f"n={request.n}" if request.n > 1 else f"beam_width={request.beam_width}"
        raise ValueError(f"{where}: {what}, but {system.name} speculates, and speculative decoding serves one "
                         "sequence a request (give n=1 and beam_width=1)")
    if system is not None and request.beam_width > system.max_seqs_per_batch:
        raise ValueError(f"{where}: beam_width {request.beam_width} is more beams than {system.name} ever "
                         f"batches ({system.max_seqs_per_batch} sequences); give at most {system.max_seqs_per_batch}")
    ignores = system is not None and system.kind == "vllm" and system.prefill_policy != "mixed"
    if request.prompt_len + request.output_len > max_seq_len and not ignores:  # else ignored when scheduled
        raise ValueError(f"{where}: prompt {request.prompt_len} + output {request.output_len} tokens "
                         f"exceeds the model's max_seq_len {max_seq_len}")
