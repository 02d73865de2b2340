"""One serving replica as a SimPy process: the control plane's step, timed by a cost model.

The step is engine.core's `ServingCore`, the same one the real engine runs; only the clock
differs: here an iteration lasts CostModel.step_time(batch) on the SimPy clock instead of a
measured forward. A run of decode-only iterations that nothing can change may pass on one SimPy
event (sim/core/fast_forward.py), with the same records. One loop (Replica.serve) serves every
replica; a replica alone on its clock whose arrivals are known ahead (sim/core/known_arrivals.py)
takes them itself, and its loop runs with no SimPy event at all (sim/core/handover.py).
"""
from __future__ import annotations

import math
from collections.abc import Callable, Generator

import simpy
from simpy.events import Event

from calibrate.clock.costmodel import CostModel
from engine.core.records import ServingRecords
from engine.core.scheduler.base import Scheduler
from engine.core.sequence import SequenceGroup
from engine.core.serving import Request, ServingCore
from engine.errors import SpecError
from sim.core.acceptance import AcceptanceModel, AcceptanceSource
from sim.core.alarm import LateCalls, sleep_until
from sim.core.beams import BeamParentModel
from sim.core.fast_forward import FastForward, Stretch
from sim.core.faults import ClockFault
from sim.core.handover import Handover, RouterHandover
from sim.core.known_arrivals import KnownArrivals


class Replica:
    def __init__(self, env: simpy.Environment, index: int, scheduler: Scheduler, cost_model: CostModel,
                 records: ServingRecords, horizon_s: float, beams: BeamParentModel | None = None,
                 fast_forward: FastForward | None = None, arrivals: KnownArrivals | None = None,
                 acceptance: AcceptanceSource | None = None):
        """arrivals: the replica's requests known ahead, for a replica alone on `env`, which takes them itself;
        None: the router's process submits them (sim/core/handover.py). acceptance: a speculating system's outcome
        of each step (sim.core.acceptance); None: the system does not speculate."""
        self.env = env
        self.index = index
        self.core = ServingCore(scheduler, records, replica=index)
        self.cost_model = cost_model
        self.beams = beams  # chooses the beam searches' parents; None: the trace has none
        self.acceptance = acceptance
        # the draws a speculating stretch plans on ahead (FastForward.plan_speculating); a source that hands out
        # counts step by step (a replayed run's) is stepped through
        self.draws_ahead = acceptance if isinstance(acceptance, AcceptanceModel) else None
        if acceptance is not None:
            records.speculating = True  # its records say what each iteration and request proposed and accepted
        self.horizon_s = horizon_s
        self.fast_forward = fast_forward  # decode stretches in one event (fast_forward.py); None: step by step
        self.stretch: Stretch | None = None  # the one running now
        self.iteration_ends: list[float] = []  # when each recorded iteration ended, to merge a fleet's records
        self.handover: Handover = RouterHandover(env) if arrivals is None else arrivals
        self.now_s = 0.0  # the loop's clock: SimPy's, or where a replica alone on its clock stands
        # told after each iteration of serve() which requests it finished (a split fleet hands a prefill
        # replica's over to a decode replica, and tries again to place them when a decode replica frees blocks)
        self.after_step: Callable[[Replica, list[SequenceGroup]], None] | None = None
        self.process = env.process(self.serve() if arrivals is None else self.serve_alone())

    @property
    def outstanding(self) -> int:
        """Admitted to this replica, not yet finished (the router reads it)."""
        return self.core.outstanding

    # --- called by the router ----------------------------------------------------------
    def submit(self, request: Request) -> None:
        self.core.admit(request)
        stretch = self.stretch
        if stretch is not None and self.fast_forward is not None:  # a stretch runs only fast-forwarded
            self.fast_forward.arrive(self.env, stretch, self.env.now)
        self.handover.notify()

    def close(self) -> None:
        """No more arrivals will come."""
        self.handover.close()

    def wake(self) -> None:
        """Something changed that schedule() reads (a split fleet's KV arrived or went): step again now."""
        self.handover.notify()

    # --- the process ----------------------------------------------------------------------
    def serve(self) -> Generator[Event, None, None]:
        """The replica's one loop: schedule a step at `now`, price it, run it (or the decode stretch it starts) to
        its end, complete and record it; idle until a request comes. How each wait passes, and which requests
        reach the replica meanwhile, is the handover's (sim/core/handover.py): on SimPy's clock behind the router's
        process, or at once for a replica alone on its clock, whose loop then runs without a SimPy event."""
        core, handover, fast_forward = self.core, self.handover, self.fast_forward
        cost_model, index = self.cost_model, self.index
        now = self.now_s
        while now < self.horizon_s:
            step = core.start_step(now)
            if step is None:
                if core.idle_preempted:  # what it preempted runs at the next schedule(), now
                    continue
                if handover.exhausted() and not core.holds_kv:
                    core.check_schedulable()
                    return
                wait = handover.idle(core, now)  # until a request comes (or a KV copy ends)
                if wait is not None:
                    yield wait
                now = self.now_s = handover.woke_at()
                continue
            batch = step.batch
            seconds = cost_model.step_time(batch)
            if not 0.0 <= seconds < math.inf:  # NaN fails both comparisons
                raise ClockFault(self._bad_step_time(seconds, batch, now))
            stretch = (fast_forward.plan(core, cost_model, index, step, seconds, self.draws_ahead)
                       if fast_forward is not None else None)
            if stretch is not None and fast_forward is not None:
                self.stretch = stretch  # a request submitted meanwhile may cut it
                ends = yield from handover.stretch(fast_forward, core, stretch)
                self.stretch = None
                self.iteration_ends.extend(ends)
                now = ends[-1]
            else:
                wait = handover.iteration(core, now, seconds)
                if wait is not None:
                    yield wait
                now = now + seconds  # SimPy's clock after a timeout of `seconds`, to the bit
                # asked only of a batch with beams or proposals: a call each per step costs more than the checks
                finished = core.end_step(step, now, self._beam_parents(batch) if batch.beam_groups else None,
                                         self._accepted(batch) if batch.decode_proposed else None)
                self.iteration_ends.append(now)
                if self.after_step is not None:
                    self.after_step(self, finished)
            self.now_s = now
        handover.stopped(core)

    def serve_alone(self) -> Generator[Event, None, None]:
        """serve() for a replica alone on its clock, which runs without a SimPy event; one that fails sets SimPy's
        clock where it stopped first, for whoever reads env.now then."""
        error: Exception | None = None
        try:
            yield from self.serve()
        except Exception as exc:  # raised again below, from the process, as serve's would be
            error = exc
        if error is not None:
            yield from sleep_until(self.env, self.now_s)
            raise error

    def _beam_parents(self, batch) -> dict[int, int]:
        """The parents of the batch's beam searches' candidates (it decoded some)."""
        if self.beams is None:
            raise ValueError("the trace has beam searches but the replica has no BeamParentModel to choose parents")
        return self.beams.parents(batch)

    def _accepted(self, batch) -> list[int]:
        """The proposals the target accepted for each of the batch's decodes (it proposed some)."""
        if self.acceptance is None:
            raise ValueError("the system speculates but the replica has no AcceptanceSource for its outcome")
        return self.acceptance.accepted(batch)

    def _bad_step_time(self, seconds: float, batch, now_s: float) -> SpecError:
        """A cost model's garbage would reach SimPy as "Negative delay" or freeze the clock at NaN: name
        the cost model (where the numbers came from) and the batch it was asked about instead."""
        swaps = f", {batch.num_swap_blocks} blocks to swap" if batch.num_swap_blocks else ""
        return SpecError(self.cost_model.source, "", (
            f"step time {seconds!r} s for a batch of {batch.num_prefills} prefills ({batch.num_prefill_tokens} "
            f"tokens) and {batch.num_decodes} decodes{swaps}, at {now_s:.6g} s on replica {self.index}; "
            f"every step must take a finite, non-negative number of seconds"))


def run_to_end(env: simpy.Environment, fleet: list[Replica], late: LateCalls | None = None) -> None:
    """Run the simulation until nothing is left to happen, then record what the horizon left unfinished. late: calls
    made late in their instant (a client's gate), which the run's loop makes."""
    error: SpecError | None = None
    try:
        if late is None:
            env.run()
        else:
            late.run()
    except ClockFault as fault:
        error = fault.args[0]
    # raised outside the handler, so with no context: compiled by mypyc, `raise ... from None` keeps the
    # ClockFault as context, whose args lead back to the error, and a pickler that follows chains (tblib,
    # installed by distributed) recurses without end (tests/sim/executors/test_dask.py)
    if error is not None:
        raise error
    for replica in fleet:
        replica.core.record_unfinished()
        replica.core.close()
