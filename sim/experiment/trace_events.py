"""A run as a Chrome/Perfetto trace (the JSON trace-event format; open trace.json.gz in https://ui.perfetto.dev or
chrome://tracing): a track per replica, a slice per iteration named after its batch, and inside it its parts
(swaps, the device's kernel kinds, the host's terms) laid end to end in the order the clock adds them, with a
counter of each replica's batch; and beside them a track per request, up to a cap (sim/experiment/request_tracks.py).
The parts' order inside an iteration is the cost model's sum, not a measured timeline: the simulator knows how long
each part takes, not when the engine ran it.
"""
from __future__ import annotations

import gzip
import io
import json
from collections.abc import Iterator, Mapping
from itertools import chain

import numpy as np

from sim.experiment.request_tracks import RunRequests, request_events

US = 1e6  # the format's timestamps are microseconds
TRACE_FILE = "trace.json.gz"


def trace_events_bytes(iterations: Mapping[str, np.ndarray], breakdown: Mapping[str, np.ndarray], label: str,
                       requests: RunRequests | None = None) -> bytes:
    """The trace of a run's iterations (their records and breakdown columns, sim/experiment/breakdown.py), and of
    its requests where given, gzipped; written a batch of events at a time, never held as one text."""
    sink = io.BytesIO()
    with gzip.GzipFile(fileobj=sink, mode="wb", mtime=0) as out:  # mtime 0: the same run, the same bytes
        out.write(b'{"displayTimeUnit": "ms", "traceEvents": [\n')
        first = True
        every = events(iterations, breakdown, label)
        if requests is not None:
            every = chain(every, request_events(requests, iterations))
        for event in every:
            out.write((("" if first else ",\n") + json.dumps(event, separators=(",", ":"))).encode())
            first = False
        out.write(b"\n]}\n")
    return sink.getvalue()


def events(iterations: Mapping[str, np.ndarray], breakdown: Mapping[str, np.ndarray], label: str) -> Iterator[dict]:
    replicas = iterations["replica"].tolist()
    yield {"name": "process_name", "ph": "M", "pid": 0, "args": {"name": label}}
    for replica in sorted(set(replicas)):
        yield {"name": "thread_name", "ph": "M", "pid": 0, "tid": replica, "args": {"name": f"replica {replica}"}}
    parts = [(name, name.split("_", 1)[0]) for name in breakdown
             if name.endswith("_s") and name.startswith(("device_", "host_")) and name not in ("device_s", "host_s")]
    columns = {name: breakdown[name].tolist() for name, _ in parts}
    swaps = breakdown["swap_s"].tolist()
    starts, durations = iterations["start_s"].tolist(), iterations["duration_s"].tolist()
    prefills, prefill_tokens = iterations["num_prefills"].tolist(), iterations["num_prefill_tokens"].tolist()
    decodes, contexts = iterations["num_decodes"].tolist(), iterations["sum_decode_context"].tolist()
    for i, replica in enumerate(replicas):
        start, batch = starts[i] * US, {"prefills": prefills[i], "prefill_tokens": prefill_tokens[i],
                                        "decodes": decodes[i], "decode_context": contexts[i]}
        yield {"name": slice_name(prefills[i], decodes[i]), "cat": "iteration", "ph": "X", "pid": 0, "tid": replica,
               "ts": start, "dur": durations[i] * US, "args": batch}
        yield {"name": f"replica {replica} batch", "ph": "C", "pid": 0, "ts": start,
               "args": {"prefills": prefills[i], "decodes": decodes[i]}}
        at = start
        for name, seconds, room in (("swap", swaps[i], "swap"),
                                    *((name[:-2], columns[name][i], room) for name, room in parts)):
            if seconds > 0:
                yield {"name": name, "cat": room, "ph": "X", "pid": 0, "tid": replica, "ts": at, "dur": seconds * US}
                at += seconds * US


def slice_name(num_prefills: int, num_decodes: int) -> str:
    """An iteration's slice is named after its batch, so that the kinds of iteration stand out on the track."""
    if num_prefills and num_decodes:
        return f"mixed {num_prefills}p+{num_decodes}d"
    return f"prefill {num_prefills}" if num_prefills else f"decode {num_decodes}"
