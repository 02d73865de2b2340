"""When each simulated token came, from the simulator's records: a request's first token at its first_token_s,
and every later one at the end of an iteration of its replica.

An iteration's records say how many sequences it decoded, not which, so a request's tokens are placed thus:

- A request never preempted decodes in every iteration of its replica from its first token to its finish (every
  running sequence decodes each iteration: vLLM's schedulers put decodes first, and chunked prefill's budget holds
  one of each, engine.core.system). Its later tokens come exactly at the ends of the iterations that end after
  its first token and up to its finish, one each, and its gaps are those iterations' spans: exact. The check is
  that there are output_len - 1 of them.
- A preempted request (num_preemptions p > 0) waited, out of the batch, and came back through a prefill that gave
  it its next token; the records hold neither when it left nor when it came back. Its output_len - 1 later tokens
  are placed at the ends of its last output_len - 1 - p iterations (present ones, gaps of one iteration each), and
  the rest of its time from first token to there is split evenly into p gaps, each a wait and a return. The sum
  of its gaps (its TPOT) is exact; which iterations its one-iteration gaps span, and how its waits split, is not.
- Where the count does not fit either rule (a request cut off by the horizon has no finish), its gaps are even:
  (finish - first token) / (output_len - 1) each.

An iteration's end is its start plus its duration; a token at a time within EPSILON_S of it belongs to it.
"""
from __future__ import annotations

import numpy as np

EPSILON_S = 1e-7  # far below any iteration's span, far above the rounding of its times


def token_times(requests: dict[str, np.ndarray], iterations: dict[str, np.ndarray]) -> list[np.ndarray]:
    """Every request's token times (its first token, then output_len - 1 more); empty for a request never served."""
    ends_by_replica = _iteration_ends(iterations)
    out = []
    for i in range(len(requests["request_id"])):
        first, finish = requests["first_token_s"][i], requests["finish_s"][i]
        count = int(requests["output_len"][i])
        if np.isnan(first):
            out.append(np.empty(0))
            continue
        if np.isnan(finish) or count == 1:
            out.append(np.array([first]) if count == 1 or np.isnan(finish) else np.array([first, finish]))
            continue
        ends = ends_by_replica.get(int(requests["replica"][i]), np.empty(0))
        out.append(_placed(first, finish, count, int(requests["num_preemptions"][i]), ends))
    return out


def gaps(times: list[np.ndarray]) -> list[np.ndarray]:
    """Each request's gaps between consecutive tokens."""
    return [np.diff(t) for t in times]


def _iteration_ends(iterations: dict[str, np.ndarray]) -> dict[int, np.ndarray]:
    ends = iterations["start_s"] + iterations["duration_s"]
    return {int(r): np.sort(ends[iterations["replica"] == r]) for r in np.unique(iterations["replica"])}


def _placed(first: float, finish: float, count: int, preemptions: int, ends: np.ndarray) -> np.ndarray:
    later = count - 1
    lo = int(np.searchsorted(ends, first + EPSILON_S, side="left"))
    hi = int(np.searchsorted(ends, finish + EPSILON_S, side="right"))
    span = ends[lo:hi]
    if preemptions == 0 and len(span) == later:
        return np.concatenate([[first], span])
    present = later - preemptions
    if preemptions > 0 and present >= 0 and len(span) > present:
        waits_end = span[len(span) - present - 1] if present else finish
        returns = first + (waits_end - first) * np.arange(1, preemptions + 1) / preemptions
        return np.concatenate([[first], returns, span[len(span) - present:]])
    return first + (finish - first) * np.arange(count) / later
