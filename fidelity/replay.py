"""One trace on both data planes over the same KV pool: the real engine, and the SimPy replica.

`MeasuredClock` is the engine's time_fn that returns the runner's own measurement, unchanged,
and keeps it (with the batch it timed, and a speculating step's accepted counts); `ReplayedTimes`
is a cost model that hands those times back to the simulator in order, and `ReplayedAcceptance`
those counts in place of the simulator's draws. Fed them, the simulator must take the engine's
decisions one for one: `compare_schedules` says whether it did.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from calibrate.clock.costmodel import BatchLike, CostModel
from engine.core.batch import Batch, BatchShape
from engine.core.records import SPECULATIVE_COLUMNS

# what a batch is, for the schedule comparison and the per-iteration cost-model check
DECISION_COLUMNS = ("num_prefill_tokens", "num_prefills", "num_decodes", "sum_decode_context",
                    "num_running_groups", "num_waiting", "num_swap_blocks", "num_copy_blocks")
TIME_COLUMNS = ("start_s", "duration_s")
REQUEST_DECISIONS = ("request_id", "prompt_len", "output_len", "n", "num_preemptions")
REQUEST_TIMES = ("arrival_s", "first_token_s", "finish_s")


@dataclass(frozen=True)
class AcceptanceOutcome:
    """One speculating iteration of the engine: what each decode proposed (Batch.decode_proposed) and how many of
    those the verify kept, in the batch's decode order."""
    iteration: int
    proposed: tuple[int, ...]
    accepted: tuple[int, ...]


class MeasuredClock:
    """An Engine time_fn that changes nothing: each iteration costs what the runner measured.

    The engine calls runner.execute (which times the iteration) and then time_fn(batch); this
    wraps the runner's execute to catch the measurement and returns it, so the engine's clock
    advances exactly as without a time_fn, and `times` / `shapes` hold every iteration in order.
    Given the engine, the proposer's forwards (engine.last_proposer_s: a draft model's, or an EAGLE or MTP head's
    before and after the target's forward) are added, as the engine's own clock adds them; and with include_host,
    the step's host work (engine.last_host_s), as its clock="step" does. Of each iteration with decodes of a
    speculating system it keeps the verify's kept counts (the runner's last_accepted, as the engine reads them) in
    `acceptance`.
    """

    def __init__(self, runner, after_iteration: Callable[[], None] | None = None, engine=None,
                 include_host: bool = False):
        if include_host and engine is None:
            raise ValueError("include_host needs the engine whose host work to add")
        self.engine, self.include_host = engine, include_host
        self.after_iteration = after_iteration  # e.g. a speed probe's maybe_sample: runs off the engine's clock
        self.times: list[float] = []
        self.shapes: list[BatchShape] = []
        self.acceptance: list[AcceptanceOutcome] = []
        self._last: float | None = None
        self._kept: dict[int, int] = {}
        execute = runner.execute

        def timed_execute(*args, **kwargs):
            sampled, seconds = execute(*args, **kwargs)
            self._last, self._kept = seconds, runner.last_accepted
            return sampled, seconds

        runner.execute = timed_execute

    def __call__(self, batch: Batch) -> float:
        if self._last is None:
            raise RuntimeError("the engine asked for an iteration's time before running it")
        seconds, self._last = self._last, None
        if self.engine is not None:
            seconds += self.engine.last_proposer_s
        if self.include_host:
            seconds += self.engine.last_host_s
        if batch.decode_proposed:  # a decode that proposed nothing (or was not verified) kept none
            self.acceptance.append(AcceptanceOutcome(len(self.times), tuple(batch.decode_proposed),
                                                     tuple(self._kept.get(i, 0) for i in batch.decode_seq_ids)))
        self.times.append(seconds)
        self.shapes.append(batch.shape())
        if self.after_iteration is not None:
            self.after_iteration()
        return seconds

    def reset(self) -> None:
        self.times, self.shapes, self.acceptance, self._last, self._kept = [], [], [], None, {}


class ScheduleDiverged(AssertionError):
    """The simulator asked for a batch the engine did not run: the control planes differ."""


class ReplayedTimes(CostModel):
    """The engine's measured iteration times, handed back in order.

    With `expected` (the engine's BatchShape per iteration) every batch the simulator runs is
    checked against the one the engine ran at that position; a difference raises ScheduleDiverged.
    """

    source = "replayed engine times"
    prices_ahead = False  # the times come in call order: the simulator must ask for each as it runs it

    def __init__(self, times: list[float], expected: list[BatchShape] | None = None):
        if expected is not None and len(expected) != len(times):
            raise ValueError(f"{len(times)} times but {len(expected)} recorded batches")
        self.times, self.expected, self.position = list(times), expected, 0

    def step_time(self, batch: BatchLike) -> float:
        i = self.position
        if i >= len(self.times):
            raise ScheduleDiverged(f"the simulator runs iteration {i}, but the engine ran only {len(self.times)}")
        if self.expected is not None:
            got = batch.shape() if isinstance(batch, Batch) else batch
            if got != self.expected[i]:
                raise ScheduleDiverged(f"iteration {i}: the simulator batches {got}, the engine batched "
                                       f"{self.expected[i]}")
        self.position += 1
        return self.times[i]

    def iteration_time(self, batch: BatchLike) -> float:  # the measured time already includes swaps
        return self.step_time(batch)

    def swap_time(self, num_blocks: int) -> float:
        return 0.0

    @property
    def exhausted(self) -> bool:
        return self.position == len(self.times)


class ReplayedAcceptance:
    """The engine's accepted counts, handed back to a speculating replica in order (sim.core.acceptance's
    AcceptanceSource): each step's decodes must propose what the engine's did at that step, else ScheduleDiverged."""

    def __init__(self, outcomes: list[AcceptanceOutcome]):
        self.outcomes, self.position = list(outcomes), 0

    def accepted(self, batch: Batch) -> list[int]:
        i = self.position
        if i >= len(self.outcomes):
            raise ScheduleDiverged(f"the simulator's decodes speculate a step more than the engine's "
                                   f"{len(self.outcomes)} speculating iterations")
        outcome = self.outcomes[i]
        if tuple(batch.decode_proposed) != outcome.proposed:
            raise ScheduleDiverged(f"iteration {outcome.iteration}: the simulator's decodes propose "
                                   f"{list(batch.decode_proposed)} tokens, the engine's {list(outcome.proposed)}")
        self.position += 1
        return list(outcome.accepted)

    @property
    def exhausted(self) -> bool:
        return self.position == len(self.outcomes)


@dataclass
class ScheduleComparison:
    """How the simulator's replay (fed the engine's times) compares with the engine's run."""
    num_iterations: int
    num_requests: int
    same_batches: bool
    same_preemptions: bool
    max_time_diff_s: float
    first_mismatch: str = ""

    @property
    def identical(self) -> bool:
        return self.same_batches and self.same_preemptions and self.max_time_diff_s <= 1e-9


def _first_row_mismatch(real: pd.DataFrame, sim: pd.DataFrame, columns, what: str) -> str:
    """The first row of `columns`, and of a speculating run's tokens proposed and accepted, that differs."""
    if len(real) != len(sim):
        return f"{what}: engine has {len(real)} rows, simulator {len(sim)}"
    for column in SPECULATIVE_COLUMNS:
        if (column in real) != (column in sim):
            return f"{what}s: only the {'engine' if column in real else 'simulator'} records {column}"
    for column in (*columns, *(c for c in SPECULATIVE_COLUMNS if c in real)):
        a, b = real[column].to_numpy(), sim[column].to_numpy()
        diff = np.flatnonzero(a != b)
        if len(diff):
            i = int(diff[0])
            return f"{what} {i}: {column} is {a[i]} on the engine, {b[i]} in the simulator"
    return ""


def _max_abs_diff(real: pd.DataFrame, sim: pd.DataFrame, columns) -> float:
    if len(real) != len(sim) or not len(real):
        return 0.0 if len(real) == len(sim) else math.inf
    diffs = [np.nanmax(np.abs(real[c].to_numpy(float) - sim[c].to_numpy(float))) for c in columns]
    return float(max(diffs))


def compare_schedules(real_requests: pd.DataFrame, real_iterations: pd.DataFrame,
                      sim_requests: pd.DataFrame, sim_iterations: pd.DataFrame) -> ScheduleComparison:
    batches = _first_row_mismatch(real_iterations, sim_iterations, DECISION_COLUMNS, "iteration")
    requests = _first_row_mismatch(real_requests, sim_requests, REQUEST_DECISIONS, "request")
    times = max(_max_abs_diff(real_iterations, sim_iterations, TIME_COLUMNS),
                _max_abs_diff(real_requests, sim_requests, REQUEST_TIMES))
    first = batches or requests or ("" if times <= 1e-9 else f"timestamps differ by up to {times:.3g} s")
    return ScheduleComparison(len(real_iterations), len(real_requests), not batches, not requests, times, first)
