"""What a replay leaves behind, row for row in the simulator's schema (sim/records.py columns).

Plain dataclasses, no torch: a real run and a simulated run of one trace compare column by
column, and the difference is the cost model's error.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields

from engine.core.batch import Batch
from engine.core.errors import Unschedulable  # noqa: F401  (the engine raises it; tests import it here)
from engine.core.scheduler.base import KVUsage
from engine.core.sequence import SequenceGroup



@dataclass(frozen=True)
class ReplayRequest:
    """One request of a trace: when it arrives and how long its prompt and output are."""

    request_id: int
    arrival_s: float
    prompt_len: int
    output_len: int
    n: int = 1


@dataclass
class RequestRecord:
    request_id: int
    replica: int
    arrival_s: float
    first_token_s: float | None
    finish_s: float | None
    prompt_len: int
    output_len: int
    n: int
    num_preemptions: int

    @classmethod
    def of(cls, group: SequenceGroup, replica: int = 0) -> "RequestRecord":
        return cls(group.request_id, replica, group.arrival_s, group.first_token_s, group.finish_s,
                   group.prompt_len, group.output_len, group.num_seqs, group.num_preemptions)


@dataclass
class IterationRecord:
    replica: int
    start_s: float
    duration_s: float
    num_prefill_tokens: int
    num_prefills: int
    num_decodes: int
    sum_decode_context: int
    num_running_groups: int
    num_waiting: int
    num_swap_blocks: int
    num_copy_blocks: int
    kv_token: int
    kv_reserved: int
    kv_internal: int
    kv_external: int
    kv_idle: int

    @classmethod
    def of(cls, batch: Batch, usage: KVUsage, start_s: float, duration_s: float, num_waiting: int,
           replica: int = 0) -> "IterationRecord":
        return cls(replica, start_s, duration_s, batch.num_prefill_tokens, len(batch.prefill_lens),
                   batch.num_decodes, batch.sum_decode_context, batch.num_running_groups, num_waiting,
                   batch.num_swap_blocks, len(batch.blocks_to_copy), usage.token, usage.reserved,
                   usage.internal, usage.external, usage.idle)


REQUEST_COLUMNS = tuple(f.name for f in fields(RequestRecord))
ITERATION_COLUMNS = tuple(f.name for f in fields(IterationRecord))


def columns(records: list, names: tuple[str, ...]) -> dict[str, list]:
    """Rows to columns (what sim.records.Records holds), ready for a DataFrame."""
    rows = [asdict(r) for r in records]
    return {name: [row[name] for row in rows] for name in names}


@dataclass
class ReplayResult:
    requests: list[RequestRecord] = field(default_factory=list)  # sorted by request_id
    iterations: list[IterationRecord] = field(default_factory=list)  # in time order

    def request_columns(self) -> dict[str, list]:
        return columns(self.requests, REQUEST_COLUMNS)

    def iteration_columns(self) -> dict[str, list]:
        return columns(self.iterations, ITERATION_COLUMNS)


def _row_value(row, name: str, index: int, default=None):
    value = row.get(name, default) if isinstance(row, dict) else getattr(row, name, default)
    if value is None:
        raise ValueError(f"request row {index}: missing {name!r} (need arrival_s, prompt_len, output_len; "
                         "n and request_id are optional)")
    return value


def replay_requests(requests) -> list[ReplayRequest]:
    """Rows (ReplayRequest, mappings or objects with the fields), or a columnar trace whose
    arrival_s / prompt_len / output_len / n are arrays (sim's Trace). Ids default to the row index."""
    if hasattr(requests, "arrival_s") and not isinstance(requests, ReplayRequest):
        count = len(requests.arrival_s)
        n = getattr(requests, "n", None)
        if n is None:
            ns = [1] * count
        elif hasattr(n, "__len__"):
            ns = list(n)
        else:
            ns = [int(n)] * count
        requests = [dict(arrival_s=a, prompt_len=p, output_len=o, n=k) for a, p, o, k in
                    zip(requests.arrival_s, requests.prompt_len, requests.output_len, ns)]
    rows = []
    for i, row in enumerate(requests):
        if isinstance(row, (tuple, list)):
            row = dict(zip(("arrival_s", "prompt_len", "output_len", "n"), row))
        rows.append(ReplayRequest(int(_row_value(row, "request_id", i, i)), float(_row_value(row, "arrival_s", i)),
                                  int(_row_value(row, "prompt_len", i)), int(_row_value(row, "output_len", i)),
                                  int(_row_value(row, "n", i, 1))))
    return rows


def check_request(request: ReplayRequest, max_seq_len: int) -> None:
    where = f"request {request.request_id}"
    if request.arrival_s < 0 or request.arrival_s != request.arrival_s:
        raise ValueError(f"{where}: arrival_s must be >= 0, got {request.arrival_s}")
    for name in ("prompt_len", "output_len", "n"):
        if getattr(request, name) < 1:
            raise ValueError(f"{where}: {name} must be >= 1, got {getattr(request, name)}")
    if request.prompt_len + request.output_len > max_seq_len:
        raise ValueError(f"{where}: prompt {request.prompt_len} + output {request.output_len} tokens "
                         f"exceeds the model's max_seq_len {max_seq_len}")
