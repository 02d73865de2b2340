"""Fast-forward: a replica runs a decode stretch on one SimPy event instead of one per iteration.

Between the events that can change a scheduling decision (a request arriving, a sequence finishing,
a block running short, a preemption, a swap-in or an admission becoming possible, a beam's parent
being drawn) a decode-only batch repeats with every context one longer per step. The scheduler says
how many iterations nothing in it can change (Scheduler.decode_stretch, which falls back to 1 wherever
that is not provable); the cost model prices them together (CostModel.decode_step_time_list, the same
floats as one call each; where the replica knows when its next request comes, only those up to it); the
replica sleeps until the last of them ends, or until a request reaching
it cuts the stretch at the iteration in flight, and then hands the iterations' ends to the control
plane's ServingCore.end_steps, which records them and completes them as it completes one step
(docs/concepts/fast-forward.md). A replica alone on its clock (sim.core.known_arrivals) does not sleep: it hands itself
the requests arriving before the stretch's end, each of which may cut it, and ends it at once (run_alone).
A request reaching a replica whose waiting queue was not empty when the stretch was scheduled cuts
nothing: the oldest waiting request stays refused all stretch long (decode_stretch's promise), and
every scheduler admits in arrival order, so the newcomer queues behind it and changes no schedule of
the stretch; only the records' waiting count grows, which end_steps is told. A saturated replica, whose
queue never empties, so runs from one finish to the next on one event.

Exact, not approximate: the clock is accumulated one iteration at a time, in order, as SimPy does,
each record holds what the step-by-step loop would have recorded, and a stretch never ends at a time an
arrival is processed at (it stops one iteration short instead), so that an arrival and an iteration's end
are never ordered differently than step by step. tests/sim/core/test_fast_forward.py compares the two
loops on randomized traces of every system and workload.
"""
from __future__ import annotations

import bisect
import math
from collections.abc import Generator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from mypy_extensions import mypyc_attr
from simpy.events import Event

from engine.core.serving import Step
from sim.core.alarm import Alarm
from sim.core.router_wakes import RouterWakes

if TYPE_CHECKING:
    from simpy import Environment

    from calibrate.clock.costmodel import CostModel
    from engine.core.batch import Batch
    from engine.core.scheduler.speculating_stretch import SpeculatingSteps
    from engine.core.serving import ServingCore
    from sim.core.acceptance import AcceptanceModel
    from sim.core.known_arrivals import KnownArrivals

MAX_STRETCH = 4096  # iterations priced at once; a longer run of decodes continues as the next stretch
# a stretch shorter than this costs more to plan than the iterations it spares: run them one by one
MIN_STRETCH = 3


def _piece(count: int, priced: int, end: float, until: float, seconds: float) -> int:
    """How many of a stretch's next `count` iterations to price now, `priced` priced and the last ending at `end`:
    as many as `seconds` a step would take to pass `until` (the next arrival), then twice as many as priced."""
    if until < math.inf and seconds > 0.0:
        reach = (until - end) / seconds  # the steps to pass `until`, were each as long as the first
        if reach < count:
            return min(count, max(priced, int(reach) + 2))
    return count


def _add_up(ends: list[float], times: list[float]) -> bool:
    """Each iteration's end appended to `ends` (whose last is when the one before it ends), its time added one at
    a time in order, as SimPy adds them; False, stopping there, at an iteration whose time is negative, NaN or
    infinite, or that ends at infinity (the replica then runs it alone, and refuses it)."""
    end = ends[-1]
    for t in times:
        if not t >= 0.0:  # negative or NaN
            return False
        end = end + t
        if not end < math.inf:
            return False
        ends.append(end)
    return True


@dataclass(eq=False, slots=True)
class Stretch:
    """A decode stretch a replica is running: its first iteration as scheduled, and when each would end."""

    step: Step
    ends: list[float]
    num_steps: int  # the iterations it runs: fewer when a request reaching the replica cuts it
    resume: Event | None = field(default=None)  # what the replica's process sleeps on (run)
    alarm: Alarm | None = field(default=None)
    # when each request reached the replica during the stretch and joined the waiting queue behind its refused
    # head (FastForward.arrive): it cut nothing, and each iteration ending after it records it waiting
    queued_s: list[float] = field(default_factory=list)
    # a speculating stretch's draws of its accepted counts, handed out for the iterations it ran (_finish)
    acceptance: AcceptanceModel | None = field(default=None)

    # written out so that mypyc compiles it: one a stretch
    def __init__(self, step: Step, ends: list[float], num_steps: int, resume: Event | None = None,
                 alarm: Alarm | None = None, queued_s: list[float] | None = None,
                 acceptance: AcceptanceModel | None = None) -> None:
        self.step, self.ends, self.num_steps, self.resume, self.alarm = step, ends, num_steps, resume, alarm
        self.queued_s = queued_s if queued_s is not None else []
        self.acceptance = acceptance


@mypyc_attr(allow_interpreted_subclasses=True)  # compiled, it stays a base (tests count what it ran)
class FastForward:
    """Plans and runs the decode stretches of one simulation's replicas."""

    def __init__(self, arrival_times: list[float], horizon_s: float, by_replica: list[list[float]] | None = None):
        """arrival_times: when each request reaches the router (arrival_event_times); by_replica: the same
        for the requests each replica will get, where the router's choice is known ahead (round robin)."""
        self.router = RouterWakes(arrival_times)
        self.by_replica = by_replica
        self.horizon_s = horizon_s
        self.num_forwarded = 0  # iterations run in stretches: what benchmarks/speed/sim_speed.py reports
        self.num_speculated = 0  # of those, a speculating system's (planned on its accepted counts: plan_speculating)
        self.num_queued = 0  # requests that reached a replica during a stretch and queued without cutting it

    def plan(self, core: ServingCore, cost_model: CostModel, index: int, step: Step, seconds: float,
             acceptance: AcceptanceModel | None = None) -> Stretch | None:
        """The stretch starting with `step` (just scheduled on replica `index`, whose serving core and cost model
        these are, costing `seconds`), or None when it would not reach a second iteration: the replica then runs
        the step as it always does. acceptance: a speculating replica's draws (plan_speculating)."""
        batch = step.batch
        if batch.prefill_seq_ids:  # the next batch differs (Scheduler.decode_stretch): the common case, checked first
            return None
        if acceptance is not None:
            return self.plan_speculating(core, cost_model, index, step, seconds, acceptance)
        queued = self.arrivals_queue(step)
        # a request reaching the replica (unless it only queues) cuts the stretch at the iteration in flight then
        next_arrival = math.inf if queued else self._next_arrival(index, step.start_s)
        if next_arrival < step.start_s + MIN_STRETCH * seconds:
            return None  # the request reaching the replica would cut it short
        allowed = core.decode_stretch(step)
        if allowed < MIN_STRETCH:
            return None
        # the stretch's iterations, none moving blocks (only the first may, and it costs `seconds`)
        ends = self._ends(cost_model, batch, step.start_s + seconds, min(allowed, MAX_STRETCH), next_arrival,
                          seconds)
        return self._stretch(step, ends, None)

    def plan_speculating(self, core: ServingCore, cost_model: CostModel, index: int, step: Step, seconds: float,
                         acceptance: AcceptanceModel) -> Stretch | None:
        """plan() for a speculating replica: how far each iteration advances is its accepted counts, drawn ahead in
        the order the steps would draw them (AcceptanceModel.ahead), so the control plane plans the stretch an
        iteration at a time from them (ServingCore.speculating_stretch: while nobody waits, so that any request
        reaching the replica cuts it) and each iteration is priced as its own batch (the same call as a step)."""
        if step.num_waiting:
            return None
        next_arrival = self._next_arrival(index, step.start_s)
        if next_arrival < step.start_s + MIN_STRETCH * seconds:
            return None
        steps = core.speculating_stretch(step)
        if steps is None:
            return None
        ends = self._speculating_ends(cost_model, steps, acceptance, step.start_s + seconds, next_arrival, seconds)
        stretch = self._stretch(step, ends, acceptance)
        if stretch is None:  # the replica runs the step as it always does, with its draws handed out then
            step.speculating = None
        return stretch

    @staticmethod
    def _speculating_ends(cost_model: CostModel, steps: SpeculatingSteps, acceptance: AcceptanceModel,
                          first_end: float, until: float, seconds: float) -> list[float]:
        """_ends for a speculating stretch: each iteration planned from the accepted counts of the one before it (and
        given its own), none after the first to end past `until`, the stretch ending where it cannot go on or before
        an iteration whose time is negative, NaN or infinite. Planned and priced a piece at a time, as _ends prices
        them (CostModel.step_time_list: the same floats as a call each)."""
        batch = steps.batches[0]
        num_decodes = len(batch.decode_seq_ids)
        steps.accept(acceptance.ahead(batch, 0))
        ends = [first_end]
        end = first_end
        going = True
        while going and len(ends) < MAX_STRETCH and end <= until:
            priced = len(ends)
            count = _piece(MAX_STRETCH - priced, priced, end, until, seconds)
            planned: list[Batch] = []
            while len(planned) < count:
                later = steps.extend()
                if later is None:
                    going = False
                    break
                steps.accept(acceptance.ahead(later, (priced + len(planned)) * num_decodes))
                planned.append(later)
            if not _add_up(ends, cost_model.step_time_list(planned)):
                return ends
            end = ends[-1]
        if end > until:
            del ends[bisect.bisect_right(ends, until) + 1:]
        return ends

    def _stretch(self, step: Step, ends: list[float], acceptance: AcceptanceModel | None) -> Stretch | None:
        """The stretch of the iterations ending at `ends`, cut after the first to end at the horizon and before
        any ending when the router wakes; None where fewer than two are left."""
        num_steps = len(ends)
        if num_steps < 2:
            return None
        if ends[-1] >= self.horizon_s:  # the replica's loop stops after the first to end at the horizon
            num_steps = bisect.bisect_left(ends, self.horizon_s) + 1
        num_steps = self._before_any_arrival_tie(ends, num_steps, step.start_s)
        if num_steps < 2:
            return None
        return Stretch(step, ends[:num_steps], num_steps, acceptance=acceptance)

    @staticmethod
    def _ends(cost_model: CostModel, batch: Batch, first_end: float, num_steps: int, until: float,
              seconds: float) -> list[float]:
        """When each iteration of the stretch ends, added up one at a time in order as SimPy adds them (the
        first ends at first_end): num_steps of them, or fewer: none after the first to end past `until` (when the
        next request reaches the replica: it cuts the stretch there, so no later one is priced), and none from
        the first whose time is negative, NaN or infinite (the replica then runs it alone, and refuses it).
        Priced a piece at a time: as many as `seconds` a step would take to pass `until`, then twice as many."""
        ends = [first_end]
        end = first_end
        while len(ends) < num_steps and end <= until:
            priced = len(ends)
            count = _piece(num_steps - priced, priced, end, until, seconds)
            if not _add_up(ends, cost_model.decode_step_time_list(batch.decode_later(priced), count)):
                return ends
            end = ends[-1]
        if end > until:
            del ends[bisect.bisect_right(ends, until) + 1:]
        return ends

    @staticmethod
    def arrivals_queue(step: Step) -> bool:
        """Whether a request reaching the replica during the stretch of `step` only queues (others were waiting
        when it was scheduled: the module's doc), or may be admitted next and so cuts the stretch."""
        return step.num_waiting > 0

    def _next_arrival(self, index: int, now_s: float) -> float:
        """When the next request reaches replica `index`, where the router's choice is known ahead; else inf
        (any request might, and the one that does cuts the stretch)."""
        if self.by_replica is None:
            return math.inf
        times = self.by_replica[index]
        at = bisect.bisect_left(times, now_s)
        return times[at] if at < len(times) else math.inf

    def _before_any_arrival_tie(self, ends: list[float], num_steps: int, start_s: float) -> int:
        """Stop before the first iteration that would end exactly when the router's process wakes: which of
        the two SimPy processes runs first then depends on event ids the stretch does not reproduce."""
        wakes = self.router.distinct
        if num_steps == len(ends) and wakes.isdisjoint(ends):  # the common case, in one pass
            return num_steps
        for at in range(num_steps):
            if ends[at] in wakes:
                return at
        return num_steps

    def run(self, env: Environment, core: ServingCore, stretch: Stretch) -> Generator[Event, None, list[float]]:
        """The replica's process through the stretch (on `env`, serving with `core`): sleep until its last
        iteration ends (a request reaching the replica may bring that forward, arrive()), then record the
        iterations and complete the last. When each recorded iteration ended."""
        resume = stretch.resume = env.event()
        self._arm(env, stretch)
        yield resume
        return self._finish(core, stretch)

    def run_alone(self, core: ServingCore, stretch: Stretch, arrivals: KnownArrivals) -> list[float]:
        """run() for a replica alone on its clock, with no event: the requests reaching it before the stretch's
        last iteration ends (none at an end, see plan) reach it in order, each cutting the stretch as arrive()
        would, then the iterations are recorded. When each ended."""
        while arrivals.next_wake < stretch.ends[stretch.num_steps - 1]:
            now_s = arrivals.next_wake
            arrivals.hand_over_next(core)
            self.cut(stretch, now_s)
        return self._finish(core, stretch)

    def arrive(self, env: Environment, stretch: Stretch, now_s: float) -> None:
        """A request reached the replica running `stretch` at now_s, which admitted it to its waiting queue. With
        others already waiting when the stretch was scheduled it queues behind them and changes no schedule of
        the stretch (the module's doc): noted for the records. Otherwise it may be admitted next: the iteration
        then in flight (the first to end after now_s; none ends at it, see plan) is the stretch's last, and the
        scheduler sees the request next."""
        if self.cut(stretch, now_s):
            self._arm(env, stretch)

    def cut(self, stretch: Stretch, now_s: float) -> bool:
        """arrive()'s decision: whether the request reaching the replica at now_s cut the stretch short (else it
        queued, or reached it during the stretch's last iteration)."""
        if self.arrivals_queue(stretch.step):
            stretch.queued_s.append(now_s)
            self.num_queued += 1
            return False
        in_flight = bisect.bisect_right(stretch.ends, now_s, 0, stretch.num_steps) + 1
        if in_flight < stretch.num_steps:
            stretch.num_steps = in_flight
            return True
        return False

    def _arm(self, env: Environment, stretch: Stretch) -> None:
        def ring(alarm: Event) -> None:
            resume = stretch.resume
            if alarm is stretch.alarm and resume is not None:  # an alarm a cut replaced rings for nobody
                resume.succeed()

        stretch.alarm = Alarm(env, stretch.ends[stretch.num_steps - 1], ring)

    def _finish(self, core: ServingCore, stretch: Stretch) -> list[float]:
        """The stretch's iterations recorded and the last completed; when each ended."""
        ends = stretch.ends[:stretch.num_steps]
        self.num_forwarded += len(ends)
        acceptance = stretch.acceptance
        if acceptance is not None:  # the accepted counts of the iterations it ran, handed out
            self.num_speculated += len(ends)
            acceptance.skip(len(ends) * len(stretch.step.batch.decode_seq_ids))
        core.end_steps(stretch.step, ends, queued_s=stretch.queued_s)
        return ends
