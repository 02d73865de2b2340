"""When a client streaming each request would have received its chunks, from a run's request and iteration records.

vLLM's benchmark client times one chunk per streamed message: the first gives the TTFT, and every later one an
inter-token latency (ITL), its gap from the one before. vLLM's server streams a request's new tokens once per
engine step, so a step that emits several tokens of one sequence (a speculating decode: its accepted proposals and
one more) is one chunk and one ITL; a request of n sequences streams a chunk per sequence a step (the completions
endpoint sends each choice's delta on its own), gaps of 0 within the step.

The simulator emits a request's first token at the end of the iteration that sampled it (a chunked prompt's last
chunk) and each later one at the end of an iteration it decoded in. The iteration records say how many sequences
an iteration decoded, not which, so a request's chunk times are derived from its replica's iterations:

- A request never preempted decodes in every iteration of its replica from its first token to its finish (running
  sequences decode first in every scheduler; under vLLM's `separate` policy, in every iteration that decodes at
  all: a prompt-only one runs none). It ran K = output_len - 1 - accepted_tokens steps after its first token (a
  speculating step emits its accepted proposals and one more), so its chunks are the ends of the last K such
  iterations up to its finish: on one pool those are all of them, exactly K (`exact`); on a split fleet's decode
  replica the request arrived some iterations after its first token, and the last K are still its own.
- A preempted request left the batch and came back; the records hold neither when. Its TTFT, E2E and TPOT stay
  exact, its chunks are placed: the last K - p iterations up to its finish one chunk each, and the time from its
  first token to there split evenly into its p preemptions' gaps (fidelity/runs/token_gaps.py places a replayed
  run's tokens alike). A request whose iterations do not fit the rule above (FasterTransformer answers a batch
  when its longest request ends, after the shorter ones' tokens) gets even gaps. Neither is `exact`.

An iteration's end is its start plus its duration; one within EPSILON_S of a token's time is that token's.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from engine.core.system import SystemSpec

EPSILON_S = 1e-7  # far below any iteration's span, far above the rounding of its start plus its duration


@dataclass(frozen=True)
class Chunks:
    """Each request's chunk times (its first token's, then one per step after; empty for a request without a
    finish or a first token), in the requests' order, and whether the records pin them exactly."""

    times: list[np.ndarray]
    exact: np.ndarray  # bool, one per request


@dataclass(frozen=True)
class Schedule:
    """What the derivation needs of how the run was scheduled: `prompt_only` iterations run no decode (vLLM's
    separate policy); requests `join_late`, some iterations of their replica after their first token (a split
    fleet's decode replicas)."""

    prompt_only: bool = False
    join_late: bool = False

    @classmethod
    def of(cls, system: SystemSpec, join_late: bool = False) -> Schedule:
        """How `system` schedules (a split fleet's: its decode pool's system, whose requests join late)."""
        return cls(prompt_only=system.prefill_policy == "separate", join_late=join_late)


def chunk_times(requests: Mapping[str, np.ndarray], iterations: Mapping[str, np.ndarray],
                schedule: Schedule = Schedule()) -> Chunks:
    """Each request's chunk times by the rules above, from its columns (RequestRecord's, accepted_tokens where the
    run speculated) and the iterations' (replica, start_s, duration_s, num_decodes)."""
    ends_by_replica = _step_ends(iterations, schedule.prompt_only)
    accepted = requests["accepted_tokens"] if "accepted_tokens" in requests else np.zeros(len(requests["finish_s"]))
    times: list[np.ndarray] = []
    exact = np.zeros(len(requests["finish_s"]), dtype=bool)
    for i, (first, finish) in enumerate(zip(requests["first_token_s"], requests["finish_s"])):
        if np.isnan(first) or np.isnan(finish):
            times.append(np.empty(0))
            continue
        steps = int(requests["output_len"][i]) - 1 - int(accepted[i])
        ends = ends_by_replica.get(int(requests["replica"][i]), np.empty(0))
        lo = int(np.searchsorted(ends, first + EPSILON_S, side="left"))
        hi = int(np.searchsorted(ends, finish + EPSILON_S, side="right"))
        preemptions = int(requests["num_preemptions"][i])
        if preemptions == 0 and _fits(hi - lo, steps, schedule):
            exact[i] = True
            chunk = np.concatenate([[first], ends[hi - steps:hi]])
        else:
            chunk = _placed(first, finish, steps, preemptions, ends[lo:hi])
        if len(chunk) > 1:
            chunk[-1] = finish  # the finish itself, not its iteration's start plus duration
        times.append(np.repeat(chunk, int(requests["n"][i])))
    return Chunks(times, exact)


def _fits(count: int, steps: int, schedule: Schedule) -> bool:
    """A request never preempted ran its `steps` in the last of the `count` iterations from its first token to its
    finish: all of them on one pool; on a decode replica it joined late, so at least as many, but for a prompt
    computed again there in a prompt-only iteration, which `prompt_only` leaves out."""
    if schedule.join_late:
        return not schedule.prompt_only and count >= steps
    return count == steps


def _step_ends(iterations: Mapping[str, np.ndarray], prompt_only: bool) -> dict[int, np.ndarray]:
    """Each replica's iteration ends in order, those without a decode left out where prompts run alone."""
    replica = np.asarray(iterations["replica"])
    ends = np.asarray(iterations["start_s"]) + np.asarray(iterations["duration_s"])
    if prompt_only:
        decoding = np.asarray(iterations["num_decodes"]) > 0
        replica, ends = replica[decoding], ends[decoding]
    order = np.argsort(replica, kind="stable")  # each replica's in the order it ran them
    replica, ends = replica[order], ends[order]
    bounds = np.flatnonzero(np.diff(replica)) + 1
    return {int(part[0]): np.sort(ends_part) for part, ends_part in
            zip(np.split(replica, bounds), np.split(ends, bounds)) if len(part)}


def _placed(first: float, finish: float, steps: int, preemptions: int, span: np.ndarray) -> np.ndarray:
    """A request's chunk times where the records do not pin them; their sum of gaps, finish - first, is exact."""
    if steps <= 0:
        return np.array([first])
    present = steps - preemptions
    if preemptions > 0 and present >= 0 and len(span) > present:
        waits_end = span[len(span) - present - 1] if present else finish
        returns = first + (waits_end - first) * np.arange(1, preemptions + 1) / preemptions
        return np.concatenate([[first], returns, span[len(span) - present:]])
    return first + (finish - first) * np.arange(steps + 1) / steps
