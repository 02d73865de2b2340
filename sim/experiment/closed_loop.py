"""The client's side of an experiment as vLLM's `vllm bench serve` drives a server: an infinite rate (every request
at 0 s, --request-rate inf) and a gate of max_concurrency requests in flight (--max-concurrency,
sim/core/client_gate.py), one for every run (workload.max_concurrency) or swept (`concurrencies`, beside `rates`).

A gated run's requests records keep both of a request's times: arrival_s, when it arrived at the client (drawn as
ever), and sent_s, when the gate let it go, which is when the server saw it arrive. Its latencies are counted from
sent_s, as vLLM's clock starts when its semaphore lets a request through: the client's wait is in none of them.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from engine.errors import SpecError
from engine.specs.checks import positive, positive_int

if TYPE_CHECKING:  # imported for their types alone: the figures' process reads this module's names, and no workload
    from sim.workload.config import WorkloadConfig
    from sim.workload.trace import Trace

INF_WORDS = ("inf", ".inf", "infinity")  # YAML 1.1 reads only .inf as a number: the others come as text
SENT_COLUMN = "sent_s"  # a gated run's requests records: after arrival_s
CONCURRENCY_COLUMN = "max_concurrency"  # a gated run's summary: after rate


def rate_value(value: Any, source: str, key: str) -> float:
    """A request rate: a positive number, or inf (YAML's .inf, or the word): vLLM's --request-rate inf."""
    if (isinstance(value, str) and value.strip().lower() in INF_WORDS) or (
            isinstance(value, float) and value == math.inf):
        return math.inf
    try:
        return positive(value, source, key)
    except SpecError as err:
        raise SpecError(source, key, f"{err.message.split(', got ')[0]} or inf (every request at 0 s), got "
                        f"{value!r}") from None


def listed(value: Any) -> Any:
    """`rates: 2` and `rates: inf` mean a list of one."""
    return [value] if isinstance(value, (int, float, str)) and not isinstance(value, bool) else value


def concurrencies_from_config(raw: dict, workload: WorkloadConfig, source: str) -> tuple[int | None, ...]:
    """Each run's gate: the `concurrencies` swept, or workload.max_concurrency for every run (None: no gate)."""
    value = raw.get("concurrencies")
    if value is None:
        return (workload.max_concurrency,)
    if workload.max_concurrency is not None:
        raise SpecError(source, "concurrencies", "and workload.max_concurrency both set the client's gate; give a "
                        "list here to sweep it, or one value there")
    value = listed(value)
    if not isinstance(value, list) or not value:
        raise SpecError(source, "concurrencies", f"must be a non-empty list of positive integers, got {value!r}")
    return tuple(positive_int(v, source, f"concurrencies[{i}]") for i, v in enumerate(value))


def with_sent_times(requests: dict[str, np.ndarray], dropped: list[tuple], trace: Trace
                    ) -> tuple[dict[str, np.ndarray], list[tuple]]:
    """A gated run's records, whose arrival_s the server saw, with each request's arrival at the client back in
    arrival_s and its sending in SENT_COLUMN after it (a dropped request keeps its arrival alone)."""
    arrival = trace.arrival_s
    columns: dict[str, np.ndarray] = {}
    for name, column in requests.items():
        if name == "arrival_s":
            columns[name] = arrival[requests["request_id"]] if len(column) else column
            columns[SENT_COLUMN] = column
        else:
            columns[name] = column
    return columns, [(row[0], row[1], float(arrival[row[0]]), *row[3:]) for row in dropped]
