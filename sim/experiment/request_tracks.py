"""A run's requests as tracks of its Chrome/Perfetto trace (sim/experiment/trace_events.py): a thread per request
under a `requests` process, its life as slices laid end to end: `queued` from its arrival, `prefill` (the
iteration that sampled its first token), `decode` from its first token, then an instant where it ended
(`finished`, or `ignored` / `aborted` for a request dropped unserved); one cut off by the horizon runs on to the
trace's last iteration, its slice marked `unfinished`.

Each phase is read off the records exactly: its arrival, first token and end are the request's, and its prefill is
the iteration on its replica that ended at its first token. What the records do not hold is not drawn: where a
system prefills prompts in chunks, only the last chunk is found (`last prefill chunk`; the earlier ones are inside
`queued / earlier chunks`), and a request's preemptions are counted on its decode slice, not placed in time (the
records count them; which iterations a request sat out, swapped or waiting to be recomputed, they do not keep).

At most MAX_REQUEST_TRACKS requests get a track, so that a long run's trace still loads: beyond it, every k-th
request by id (k the least that fits), the whole run's span sampled evenly; the process's name says which.
"""
from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

MAX_REQUEST_TRACKS = 1000
PID = 1  # the iterations' process is 0
# DroppedRecord's fields (engine.core.records) this reads, by position
DROPPED_ID, DROPPED_REPLICA, DROPPED_ARRIVAL, DROPPED_FIRST_TOKEN, DROPPED_AT, DROPPED_PROMPT = range(6)
DROPPED_OUTPUT, DROPPED_N, DROPPED_PREEMPTIONS, DROPPED_STATUS = range(6, 10)


@dataclass(frozen=True)
class RunRequests:
    """What a run's request tracks are read from: its request records as columns (sim.core.records.request_arrays),
    its dropped requests' rows (engine.core.records.DroppedRecord's fields), and whether its system prefills
    prompts in chunks."""

    columns: Mapping[str, np.ndarray]
    dropped: Sequence[tuple] = ()
    chunked: bool = False


@dataclass(frozen=True)
class RequestLife:
    """One request's times as its track draws them (None: it never had that moment)."""

    request_id: int
    replica: int
    arrival_s: float
    prefill_s: float | None  # the start of the iteration that sampled its first token
    first_token_s: float | None
    end_s: float  # where it finished or was dropped; for one unfinished, the trace's end
    ending: str  # finished, ignored, aborted or unfinished
    args: dict


def request_events(requests: RunRequests, iterations: Mapping[str, np.ndarray],
                   cap: int = MAX_REQUEST_TRACKS) -> Iterator[dict]:
    """The requests process's events: its name, then each sampled request's track (the module's doc)."""
    ids = sorted([*requests.columns["request_id"].tolist(), *(row[DROPPED_ID] for row in requests.dropped)])
    every = sampling_step(len(ids), cap)
    lives = request_lives(requests, iterations, set(ids[::every]))
    name = "requests" if every == 1 else f"requests: every {ordinal(every)} of {len(ids)} by id ({len(lives)} tracks)"
    yield {"name": "process_name", "ph": "M", "pid": PID, "args": {"name": name}}
    yield {"name": "process_sort_index", "ph": "M", "pid": PID, "args": {"sort_index": PID}}
    for life in lives:
        yield from track(life, requests.chunked)


def sampling_step(count: int, cap: int) -> int:
    """k, where every k-th of `count` requests gets a track: the least k that leaves at most `cap`."""
    return max(1, math.ceil(count / cap))


def ordinal(k: int) -> str:
    """2nd, 3rd, 11th, 21st."""
    suffix = "th" if 10 <= k % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(k % 10, "th")
    return f"{k}{suffix}"


def track(life: RequestLife, chunked: bool) -> Iterator[dict]:
    """A request's thread: its name, then its phases, each ending where the next begins."""
    tid = life.request_id
    yield {"name": "thread_name", "ph": "M", "pid": PID, "tid": tid, "args": {"name": f"request {tid}"}}
    yield {"name": "thread_sort_index", "ph": "M", "pid": PID, "tid": tid, "args": {"sort_index": tid}}
    suffix = " (unfinished)" if life.ending == "unfinished" else ""
    queued = "queued / earlier chunks" if chunked else "queued"
    first = life.first_token_s
    if first is None:  # no token yet where it ended
        yield phase(queued + suffix, life.arrival_s, life.end_s, tid, life.args)
    else:
        prefill = life.prefill_s if life.prefill_s is not None else first
        yield phase(queued, life.arrival_s, prefill, tid, life.args)
        if life.prefill_s is not None:
            yield phase("last prefill chunk" if chunked else "prefill", prefill, first, tid, life.args)
        preempted = life.args["preemptions"]
        decode = f"decode (preempted {preempted}x)" if preempted else "decode"
        yield phase(decode + suffix, first, life.end_s, tid, life.args)
    if life.ending != "unfinished":
        yield {"name": life.ending, "cat": "request", "ph": "i", "s": "t", "pid": PID, "tid": tid,
               "ts": round(life.end_s * 1e9) / 1e3}


def phase(name: str, start_s: float, end_s: float, tid: int, args: dict) -> dict:
    """A slice from start_s to end_s, its ends on whole nanoseconds: a viewer that reads them as integer
    nanoseconds finds each phase ending exactly where the next begins, never a nanosecond inside it (which it would
    take for a slice nested in the one before)."""
    start_ns, end_ns = round(start_s * 1e9), round(end_s * 1e9)
    return {"name": name, "cat": "request", "ph": "X", "pid": PID, "tid": tid, "ts": start_ns / 1e3,
            "dur": (end_ns - start_ns) / 1e3, "args": args}


def request_lives(requests: RunRequests, iterations: Mapping[str, np.ndarray], shown: set[int]) -> list[RequestLife]:
    """The lives of the requests whose ids are `shown` (served, unfinished or dropped), by id."""
    prefills = PrefillFinder(iterations)
    columns = {name: column.tolist() for name, column in requests.columns.items()}
    lives = [served_life(columns, i, prefills) for i, request_id in enumerate(columns["request_id"])
             if request_id in shown]
    lives += [dropped_life(row, prefills) for row in requests.dropped if row[DROPPED_ID] in shown]
    return sorted(lives, key=lambda life: life.request_id)


def served_life(columns: Mapping[str, list], i: int, prefills: PrefillFinder) -> RequestLife:
    """The i-th request record's life: finished, or unfinished until the trace's end."""
    # a gated run's request queues at the server from its sending (sent_s), not from its arrival at the client
    arrival = columns["sent_s" if "sent_s" in columns else "arrival_s"][i]
    first, finish = known(columns["first_token_s"][i]), known(columns["finish_s"][i])
    replica = columns["replica"][i]
    args = {"replica": replica, "prompt_tokens": columns["prompt_len"][i], "output_tokens": columns["output_len"][i],
            "n": columns["n"][i], "preemptions": columns["num_preemptions"][i]}
    if "cached_tokens" in columns:  # a prefix-caching run's
        args["cached_tokens"] = columns["cached_tokens"][i]
    if finish is None:
        return RequestLife(columns["request_id"][i], replica, arrival, prefills.start(replica, first), first,
                           max(prefills.end_s, arrival), "unfinished", args)
    return RequestLife(columns["request_id"][i], replica, arrival, prefills.start(replica, first), first, finish,
                       "finished", args)


def dropped_life(row: tuple, prefills: PrefillFinder) -> RequestLife:
    """A dropped request's life (DroppedRecord's fields), to where it was ignored or aborted."""
    first, replica = known(row[DROPPED_FIRST_TOKEN]), row[DROPPED_REPLICA]
    args = {"replica": replica, "prompt_tokens": row[DROPPED_PROMPT], "output_tokens": row[DROPPED_OUTPUT],
            "n": row[DROPPED_N], "preemptions": row[DROPPED_PREEMPTIONS]}
    return RequestLife(row[DROPPED_ID], replica, row[DROPPED_ARRIVAL], prefills.start(replica, first), first,
                       row[DROPPED_AT], row[DROPPED_STATUS], args)


def known(value) -> float | None:
    """A record's time, None where it has none (a column with some None holds NaN)."""
    return None if value is None or value != value else float(value)


class PrefillFinder:
    """The iteration that sampled a request's first token: on its replica, the last to start before that token,
    which ended at it (a token is sampled at its iteration's end)."""

    def __init__(self, iterations: Mapping[str, np.ndarray]):
        replicas = np.asarray(iterations["replica"])
        starts = np.asarray(iterations["start_s"], dtype=float)
        ends = starts + np.asarray(iterations["duration_s"], dtype=float)
        self.by_replica = {int(r): (starts[replicas == r], ends[replicas == r]) for r in np.unique(replicas)}
        self.end_s = float(ends.max()) if len(ends) else 0.0  # the trace's end

    def start(self, replica: int, first_token_s: float | None) -> float | None:
        if first_token_s is None or replica not in self.by_replica:
            return None
        starts, ends = self.by_replica[replica]
        i = int(np.searchsorted(starts, first_token_s, side="left")) - 1
        # the end is start + duration, and duration the end less the start: equal to the token's time within rounding
        if i < 0 or abs(ends[i] - first_token_s) > 1e-9 * max(1.0, abs(first_token_s)):
            return None
        return float(starts[i])
