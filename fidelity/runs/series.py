"""Per-second series of a replay, side by side with the real run's: tokens per second (prompt, generation),
requests finished per second, running and waiting requests, KV cache use (%).

Second k is [k, k + 1) after the first arrival; a row is labelled by its end, t = k + 1, as the bench's logger
labels its rows. The simulated side counts as vLLM's stat logger does (bench_series.py): a prompt's tokens all at
its first token, every token generated (token_gaps.py places them), and running, waiting and KV use at the second's
last iteration, summed over replicas (KV averaged), with no row for a second without an iteration. KV use is the
pool's share held by requests' blocks (token states, reservations and their unfilled tails: a cached block nobody
holds is free, as vLLM counts it). Requests finished per second, on both sides, count finishes on the requests'
own clock. The real logger's other rows run on its own clock, started when the engine was (before its first
request, by less than its first row's second): up to a second apart from the requests'.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from fidelity.runs.real_run import RealRun, RealSeries

QUANTITIES = ("prompt_tokens_per_s", "generation_tokens_per_s", "finished_per_s", "running", "waiting",
              "kv_usage_pct")


def simulated_series(requests: dict[str, np.ndarray], iterations: dict[str, np.ndarray], times: list[np.ndarray],
                     pool_slots: int) -> pd.DataFrame:
    ends = iterations["start_s"] + iterations["duration_s"]
    finish = requests["finish_s"][np.isfinite(requests["finish_s"])]
    seconds = max(_last(ends), _last(finish), 0.0)
    count = int(math.floor(seconds)) + 1
    first = requests["first_token_s"]
    served = np.isfinite(first)
    frame = pd.DataFrame({"t": np.arange(1, count + 1, dtype=np.float64)})
    frame["prompt_tokens_per_s"] = _per_second(first[served], count, requests["prompt_len"][served])
    tokens = np.concatenate(times) if times else np.empty(0)
    frame["generation_tokens_per_s"] = _per_second(tokens, count)
    frame["finished_per_s"] = _per_second(finish, count)
    state = _last_iteration_state(iterations, ends, count, pool_slots)
    return pd.concat([frame, state], axis=1)


def real_series(run: RealRun) -> pd.DataFrame:
    """The run's own series (where recorded), with its finishes per second on the requests' clock."""
    finish = run.requests.arrival_s + run.requests.e2e_s
    count = int(math.floor(_last(finish))) + 1
    finished = pd.DataFrame({"t": np.arange(1, count + 1, dtype=np.float64),
                             "finished_per_s": _per_second(finish, count)})
    if run.series is None:
        return finished
    logged = _logged(run.series)
    return logged.merge(finished, on="t", how="outer").sort_values("t", kind="stable").reset_index(drop=True)


def side_by_side(real: pd.DataFrame, sim: pd.DataFrame) -> pd.DataFrame:
    """One row a second: t, then real_<quantity> and sim_<quantity> for each quantity (NaN where a side has none)."""
    both = real.add_prefix("real_").rename(columns={"real_t": "t"}).merge(
        sim.add_prefix("sim_").rename(columns={"sim_t": "t"}), on="t", how="outer")
    columns = ["t"] + [f"{side}_{q}" for q in QUANTITIES for side in ("real", "sim")]
    for column in columns:
        if column not in both:
            both[column] = np.nan
    return both[columns].sort_values("t", kind="stable").reset_index(drop=True)


def _logged(series: RealSeries) -> pd.DataFrame:
    return pd.DataFrame({"t": np.round(series.t_s, 3), "prompt_tokens_per_s": series.prompt_tokens_per_s,
                         "generation_tokens_per_s": series.generation_tokens_per_s, "running": series.running,
                         "waiting": series.waiting, "kv_usage_pct": series.kv_usage_pct})


def _per_second(times: np.ndarray, count: int, weights: np.ndarray | None = None) -> np.ndarray:
    """How many events (or how much weight) fell in each second [k, k + 1), k < count."""
    bins = np.clip(np.floor(times).astype(np.int64), 0, count - 1)
    return np.bincount(bins, weights=weights, minlength=count).astype(np.float64)[:count]


def _last(values: np.ndarray) -> float:
    return float(values.max()) if len(values) else 0.0


def _last_iteration_state(iterations: dict[str, np.ndarray], ends: np.ndarray, count: int,
                          pool_slots: int) -> pd.DataFrame:
    """Running, waiting (summed over replicas) and KV use (averaged) at each second's last iteration per replica."""
    used = iterations["kv_token"] + iterations["kv_reserved"] + iterations["kv_internal"]
    frame = pd.DataFrame({"second": np.floor(ends).astype(np.int64), "replica": iterations["replica"],
                          "end": ends, "running": iterations["num_running_groups"],
                          "waiting": iterations["num_waiting"], "kv_usage_pct": 100.0 * used / pool_slots})
    last = frame.sort_values("end", kind="stable").groupby(["second", "replica"]).tail(1)
    per_second = last.groupby("second").agg(running=("running", "sum"), waiting=("waiting", "sum"),
                                            kv_usage_pct=("kv_usage_pct", "mean"))
    return per_second.reindex(range(count)).reset_index(drop=True).astype(np.float64)
