"""A client that keeps at most max_concurrency requests in flight: vLLM's `vllm bench serve --max-concurrency`.

vLLM's benchmark draws its arrivals as it always does and sends each request inside a semaphore of
max_concurrency: a request arriving while that many are in flight waits at the client, and goes out the moment
one of them ends (its last token received, or its failure). Its clock starts when it goes out (the request
function stamps its start inside the semaphore), so the client's wait is in no latency vLLM reports. The gate
here is that semaphore, in front of the router: a request reaches the router at its arrival while fewer than
max_concurrency are in flight, else when one of them finishes or is dropped, and the server sees it arrive
then (Request.arrival_s is its sending).

Its requests are no longer known ahead, since they wait on the replicas' progress: a gated fleet is served on one
SimPy clock behind the gate's process (never apart), and its decode stretches are those of any router whose choice
is not known ahead, each cut where a request reaches its replica. Exact, not stepped: a request sent at its arrival
goes out as the router's process would send it (sim/core/router.py: the same instant and the same order among the
events of that instant, before which every stretch stops); one sent when a request in flight ends goes out late,
after every other event of its instant (sim.core.alarm.LateCalls), so that every replica has by then ended the
iterations ending at that instant and started its next, whether it ran them step by step or in a stretch. With
max_concurrency at least the number of requests the gate never waits, and the records are those of the ungated
run (tests/sim/core/test_client_gate.py).
"""
from __future__ import annotations

from collections.abc import Generator

import simpy
from simpy.events import Event

from engine.core.serving import Request
from sim.core.alarm import LateCalls, sleep_until
from sim.core.beams import BeamParentModel
from sim.core.fleet import FleetSetup
from sim.core.records import Records
from sim.core.replica import Replica, run_to_end
from sim.core.replica_run import ReplicaRun
from sim.core.router import trace_requests
from sim.core.routers import Router
from sim.workload.trace import Trace


class ClientGate:
    """The client's semaphore: the requests in flight (sent, not yet finished or dropped) and at most `limit`."""

    def __init__(self, env: simpy.Environment, limit: int):
        if limit < 1:
            raise ValueError(f"max_concurrency must be at least 1, got {limit}")
        self.env = env
        self.late = LateCalls(env)  # the run's loop (run_to_end), which makes the slots' calls late in their instant
        self.limit = limit
        self.in_flight = 0
        self._slot: Event | None = None  # what the gate's process waits on while `limit` are in flight

    def slot(self) -> Event:
        """An event that comes when a request in flight ends (late in its instant)."""
        self._slot = self.env.event()
        return self._slot

    def release(self) -> None:
        """A request in flight finished or was dropped: a waiting request may go out, late in this instant."""
        self.in_flight -= 1
        slot, self._slot = self._slot, None
        if slot is not None:
            self.late.add(slot.succeed)


class GatedRecords(Records):
    """A replica's records that tell the gate when one of its requests leaves it: finished, or dropped unserved."""

    def __init__(self, gate: ClientGate):
        super().__init__()
        self.gate: ClientGate | None = gate

    def add_request(self, group, replica: int, finished: bool = True) -> None:
        super().add_request(group, replica, finished)
        if finished and self.gate is not None:
            self.gate.release()

    def add_dropped(self, group, replica: int, dropped_s: float, status: str) -> None:
        super().add_dropped(group, replica, dropped_s, status)
        if self.gate is not None:
            self.gate.release()


def serve_gated(trace: Trace, wakes: list[float], fleet: FleetSetup, router: Router, beams: BeamParentModel | None,
                max_concurrency: int) -> list[ReplicaRun]:
    """The fleet on one SimPy clock, behind the router, behind the client's gate (the module's doc). wakes: when the
    router's process would hand each request over (sim.core.router_wakes.arrival_event_times)."""
    env, fast_forward = simpy.Environment(), fleet.stretches(wakes)
    gate = ClientGate(env, max_concurrency)
    records = [GatedRecords(gate) for _ in range(fleet.replicas)]
    replicas = [fleet.replica(env, i, fast_forward, beams, records=records[i]) for i in range(fleet.replicas)]
    env.process(gated_arrivals(env, trace, wakes, replicas, router, gate))
    try:
        run_to_end(env, replicas, gate.late)
    finally:
        if beams is not None:
            beams.settle()
        for kept in records:  # the records outlive the run: they hold no clock (and pickle)
            kept.gate = None
    return [ReplicaRun(r.index, r.core.records, r.iteration_ends) for r in replicas]


def gated_arrivals(env: simpy.Environment, trace: Trace, wakes: list[float], replicas: list[Replica],
                   router: Router, gate: ClientGate) -> Generator[Event, None, None]:
    """A SimPy process: each request arrives as the router's process has it arrive (sim.core.router.arrivals, event
    for event), then waits for a slot; one sent later than the router would have handed it over is stamped with
    its sending."""
    for request, wake in zip(trace_requests(trace, range(len(trace))), wakes):
        if request.arrival_s - env.now > 0:  # as the router's timeout, at its very instant
            yield from sleep_until(env, max(wake, env.now))
        while gate.in_flight >= gate.limit:
            yield gate.slot()
        gate.in_flight += 1
        # held back (for a slot, or behind requests that were): sent later than the router would hand it over
        sent = request if env.now == wake else sent_at(request, env.now)
        router.pick(replicas, sent).submit(sent)
    for replica in replicas:
        replica.close()


def sent_at(request: Request, now_s: float) -> Request:
    """The request as the server sees it when it goes out at now_s."""
    return Request(request.request_id, now_s, request.prompt_len, request.output_len, request.n,
                   prefix_len=request.prefix_len, beam_width=request.beam_width, block_keys=request.block_keys)
