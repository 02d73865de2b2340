"""Capacity searches on many workers, with the answers of one worker.

A search (sim/capacity/search.py) is a generator: it yields the point it wants probed next and is sent
whether that point held. Its next points depend on the answers, so one search alone keeps only one
worker busy. With more workers, each round probes the next points the search could want, under
either answer, breadth first to as many points as there are workers (its own share of them when
several searches run at once), then walks the search along the real answers as far as they go.
Probes the search does not reach are wasted work, never used: the path, each probe reported, and
the result are exactly those of the search run one probe at a time, on any number of workers.

Searches of one deployment under different targets may share what they learn (one `known` dict): a probe is
a run, whatever it is judged against, so a point one search probed is never run again for another.
"""
from __future__ import annotations

from collections import deque
from collections.abc import Callable, Generator, Hashable
from dataclasses import dataclass, field
from typing import Any

Search = Generator[Hashable, bool, Any]  # yields points to probe, is sent whether each held, returns the result
# a tree this wide whose every branch ends early (a search near its end) is explored this many times over
LOOKAHEAD_TRIES = 64


@dataclass
class Job:
    """One search to run, and what it has learnt: the probe at each point, in any order."""
    start: Callable[[], Search]  # a fresh generator of the search, to replay along the answers known
    probe_args: Callable[[Hashable], tuple]  # the arguments of probe_fn for a point
    holds: Callable[[Any], bool | None]  # the answer a probe gives this search (held, over, or None: nothing known)
    known: dict = field(default_factory=dict)  # point -> its probe (maybe shared with other jobs)
    path: list = field(default_factory=list)  # the points the search has taken, in order
    done: bool = False
    result: Any = None


def _walk(job: Job, assumed: dict | None = None) -> tuple[list, Hashable | None, Any]:
    """The search replayed along the known answers (and `assumed` ones): the points it took, the first
    point it wants that has no answer (None if it ended), and its result if it ended."""
    assumed = assumed or {}
    search = job.start()
    path: list = []
    try:
        point = next(search)
        while True:
            if point in assumed:
                holds = assumed[point]
            elif point in job.known:
                holds = job.holds(job.known[point])
            else:
                return path, point, None
            path.append(point)
            point = search.send(holds)
    except StopIteration as end:
        return path, None, end.value


def _lookahead(job: Job, width: int) -> list:
    """Up to `width` points the search may want next, nearest first: the one it wants now, then the
    next under each answer to it, and so on."""
    wanted: list = []
    queue: deque[dict] = deque([{}])
    tries = 0
    while queue and len(wanted) < width and tries < LOOKAHEAD_TRIES * width:
        tries += 1
        assumed = queue.popleft()
        _, point, _ = _walk(job, assumed)
        if point is None:
            continue
        if point not in wanted:
            wanted.append(point)
        queue.append({**assumed, point: True})
        queue.append({**assumed, point: False})
    return wanted


def run_searches(jobs: list[Job], probe_fn: Callable, workers, on_probe: Callable[[int, Any], None]) -> None:
    """Run every job to its end on `workers` (sim.executors.workers.Workers), in rounds; on_probe(job index, probe)
    is called for each probe on a search's path, in the order the search took them."""
    for i, job in enumerate(jobs):
        _advance(i, job, on_probe)
    while not all(job.done for job in jobs):
        active = [i for i, job in enumerate(jobs) if not job.done]
        calls, owners, asked = [], [], set()
        for rank, i in enumerate(active):
            share = workers.width // len(active) + (rank < workers.width % len(active))
            for point in _lookahead(jobs[i], max(1, share)):
                if (id(jobs[i].known), point) in asked:  # another search of the same deployment wants it too
                    continue
                asked.add((id(jobs[i].known), point))
                calls.append(jobs[i].probe_args(point))
                owners.append((i, point))
        for n, probe in workers.run_all(probe_fn, calls):
            i, point = owners[n]
            jobs[i].known[point] = probe
        for i in active:
            _advance(i, jobs[i], on_probe)


def _advance(index: int, job: Job, on_probe: Callable[[int, Any], None]) -> None:
    path, point, result = _walk(job)
    for taken in path[len(job.path):]:
        on_probe(index, job.known[taken])
    job.path = path
    if point is None:
        job.done, job.result = True, result
