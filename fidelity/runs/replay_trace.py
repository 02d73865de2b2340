"""A real run as the simulator's Trace: the recorded arrivals (seconds after the first, not rescaled), lengths and,
where the run's workload has them, token identities as prefix-cache block keys (block_keys.py).

A Trace's arrivals are non-decreasing and its request k is the k-th to arrive; a run's file need not be in that
order (a data-parallel run logs its engines' requests as they come), so the trace is the run sorted by arrival
(stable: a tie keeps the file's order), and `order` maps it back: trace request k is the run's request order[k].
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fidelity.runs.block_keys import prompt_block_keys
from fidelity.runs.real_run import RealRun
from sim.workload.trace import Trace


@dataclass(frozen=True, eq=False)
class ReplayTrace:
    trace: Trace
    order: np.ndarray  # int64: trace request k is the run's request order[k]


def replay_trace(run: RealRun, block_size: int | None, arrival_s: np.ndarray | None = None) -> ReplayTrace:
    """The run's requests at their recorded arrivals (or at `arrival_s`, one a request in the run's order, where the
    run recorded none). block_size: the simulated system's, when it caches prefixes (None: no keys). Without token
    ids (a vllm bench result), no keys are given, and the simulator keys each request's blocks as its own."""
    requests = run.requests
    arrivals = requests.arrival_s if arrival_s is None else np.asarray(arrival_s, np.float64)
    if len(arrivals) != len(requests):
        raise ValueError(f"{len(arrivals)} arrivals for {len(requests)} requests")
    order = np.argsort(arrivals, kind="stable")
    keys = None
    if block_size is not None and run.workload is not None:
        ids = run.workload.input_tok_ids
        keys = [prompt_block_keys(ids[i], block_size) for i in order.tolist()]
    source = f"{run.format} run {run.source}"
    trace = Trace(arrivals[order] - arrivals.min(), requests.prompt_len[order], requests.output_len[order],
                  source=source, block_keys=keys)
    return ReplayTrace(trace, order)
