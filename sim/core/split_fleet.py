"""A split fleet (docs/disaggregated.md): prefill replicas compute the prompts, decode replicas generate, and each
request's KV is copied from one to the other.

A request's story:
  1. the router hands it to a prefill replica, which computes its prompt and samples its first token (its
     time to first token) and keeps its KV (ServingCore.hand_off_kv);
  2. it waits, first come first served, for a decode replica with the blocks for it: the least loaded that
     has them reserves them (ServingCore.receive);
  3. its prompt's KV goes over the prefill replica's link, one copy at a time (kv_copy_s prices it), after
     which the prefill replica lets its blocks go and the decode replica decodes it from its next step.
When no decode replica has room (on_decode_full): `hold` keeps it waiting in 2 with its KV held, so the prefill
pool fills and stops admitting (DistServe, vLLM's disaggregated prefill); `recompute` lets the prefill KV go at
once and queues it on the least loaded decode replica as a prompt to compute again there (Splitwise's fallback
to a mixed machine).
The run ends at the horizon for the copies as for the replicas: a copy the horizon cuts off stops there, its
request recorded unfinished, so nothing the fleet records happens after the run's end.
A decode pool whose system speculates (docs/speculative-decoding.md) reserves each decode's lookahead slots from
the step the request joins on, as a colocated replica does, and draws its acceptance from its own child of the
run's generator; the prefill replicas compute prompts and first tokens alone, and never speculate.
"""
from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace

import numpy as np
import simpy

from engine.core.sequence import SequenceCounter, SequenceGroup
from engine.core.serving import Request, prefilled_group
from engine.errors import Unschedulable
from sim.core.fleet import FleetSetup
from sim.core.records import Records
from sim.core.replica import Replica, run_to_end
from sim.core.replica_run import ReplicaRun
from sim.core.router import trace_requests
from sim.core.routers import Router, by_load, least_loaded
from sim.core.simulate import replica_acceptances
from sim.workload.tokens import with_block_keys
from sim.workload.trace import Trace

ON_DECODE_FULL = ("hold", "recompute")
# the columns of a split fleet's transfers, one row per request prefilled for a decode replica: "copied" (its KV
# went over the link, start_s to end_s), "recomputed" (on_decode_full: recompute; start_s = end_s = when), or,
# at the horizon, "unfinished" (its copy had not ended: end_s NaN, and start_s NaN if it was still queued for the
# link) or "waiting" (still waiting for a decode replica: decode_replica -1, start_s and end_s NaN)
TRANSFER_COLUMNS = ("request_id", "prefill_replica", "decode_replica", "prefilled_s", "start_s", "end_s",
                    "num_tokens", "kind")
NOT_REACHED = float("nan")  # a transfer's time the run ended before


@dataclass(frozen=True)
class SplitSetup:
    """A split fleet: its two pools (FleetSetup each: replicas stepped one iteration at a time, since a copy's
    end is known to nobody ahead), the price of a request's KV copy by its prompt tokens, and what a request
    does when no decode replica has room."""

    prefill: FleetSetup
    decode: FleetSetup
    kv_copy_s: Callable[[int], float]
    on_decode_full: str = "hold"

    def __post_init__(self) -> None:
        if self.on_decode_full not in ON_DECODE_FULL:
            raise ValueError(f"on_decode_full {self.on_decode_full!r}: valid values are {list(ON_DECODE_FULL)}")

    @property
    def num_replicas(self) -> int:
        return self.prefill.replicas + self.decode.replicas


@dataclass
class Handoff:
    """A request prefilled and waiting for a decode replica, its KV held on its prefill replica."""

    request: Request
    prefill: Replica
    first_token_s: float | None  # set by the prefill replica's completion
    cached_prompt_tokens: int


@dataclass
class SplitRuns:
    """What a split fleet's simulation leaves: each replica's run (prefill replicas first), the requests that
    never reached a decode replica (recorded by the fleet), and the transfers as rows of TRANSFER_COLUMNS."""

    runs: list[ReplicaRun]
    transfers: list[tuple] = field(default_factory=list)


class SplitFleet:
    def __init__(self, env: simpy.Environment, setup: SplitSetup, router: Router,
                 rng: np.random.Generator | None = None):
        """rng: the run's seeded Generator, which a speculating decode pool needs (serve_split)."""
        setup = with_acceptances(setup, rng)
        self.env, self.setup, self.router = env, setup, router
        num_prefill = setup.prefill.replicas
        self.prefill = [setup.prefill.replica(env, i, None) for i in range(num_prefill)]
        self.decode = [setup.decode.replica(env, num_prefill + j, None) for j in range(setup.decode.replicas)]
        for replica in self.prefill:
            replica.core.hand_off_kv()
            replica.after_step = self._prefilled
        for replica in self.decode:
            replica.after_step = self._decoded
            replica.core.records.cached_column = setup.prefill.system.prefix_caching
        # a speculating decode pool's requests carry what they proposed and accepted, and every iteration its pair
        # (none on a prefill replica), wherever they are recorded
        speculating = setup.decode.system.speculative is not None
        for replica in self.prefill:
            replica.core.records.speculating = speculating
        self.links = {replica.index: simpy.Resource(env, capacity=1) for replica in self.prefill}
        self.requests: dict[int, Request] = {}
        self.waiting: deque[Handoff] = deque()
        self.num_copying = 0
        self.records = Records()  # the requests the fleet itself ends (or leaves unfinished), and its transfers
        self.records.cached_column = setup.prefill.system.prefix_caching
        self.records.speculating = speculating
        self.transfers: list[tuple] = []
        self._drained: simpy.Event | None = None
        self._probe_ids = SequenceCounter()  # the sequence ids of groups that only ask whether they fit

    # --- the processes ---------------------------------------------------------------------------------
    def arrivals(self, trace: Trace) -> Iterator[simpy.Event]:
        """Each request reaches the router at its arrival time and goes to a prefill replica, for its prompt and
        first token (output_len 1 there); then, once every prefill replica is done and every request has left
        the prefill pool, the decode replicas are told nothing more will come."""
        env = self.env
        for request in trace_requests(trace, range(len(trace))):
            self.requests[request.request_id] = request
            delay = request.arrival_s - env.now
            if delay > 0:
                yield env.timeout(delay)
            self.router.pick(self.prefill, request).submit(replace(request, output_len=1))
        for replica in self.prefill:
            replica.close()
        yield env.all_of([replica.process for replica in self.prefill])
        if self.waiting or self.num_copying:
            self._drained = env.event()
            yield self._drained
        for replica in self.decode:
            replica.close()

    def _copy(self, handoff: Handoff, decode: Replica) -> Iterator[simpy.Event]:
        """The request's prompt KV over its prefill replica's link, after the copies queued on it before; one the
        horizon cuts off holds the link to the horizon and stays unfinished (its request too: the decode replica
        records it so)."""
        env, request, horizon = self.env, handoff.request, self.setup.decode.horizon_s
        with self.links[handoff.prefill.index].request() as turn:
            yield turn
            start = env.now
            if start >= horizon:
                self._unfinished(handoff, decode, NOT_REACHED)
                return
            seconds = self._copy_s(request)
            if start + seconds > horizon:
                yield env.timeout(horizon - start)
                self._unfinished(handoff, decode, start)
                return
            yield env.timeout(seconds)
        handoff.prefill.core.release_kv(request.request_id)
        handoff.prefill.wake()
        decode.core.kv_arrived(request.request_id)
        decode.wake()
        self.transfers.append((request.request_id, handoff.prefill.index, decode.index, handoff.first_token_s,
                               start, env.now, request.prompt_len, "copied"))
        self.num_copying -= 1
        self._check_drained()

    def _copy_s(self, request: Request) -> float:
        seconds = self.setup.kv_copy_s(request.prompt_len)
        if not 0.0 <= seconds < math.inf:  # NaN fails both comparisons
            raise ValueError(f"request {request.request_id}: a KV copy of its {request.prompt_len} prompt tokens is "
                             f"priced at {seconds!r} s; kv_copy_s must give a finite, non-negative number of seconds")
        return seconds

    def _unfinished(self, handoff: Handoff, decode: Replica, start_s: float) -> None:
        """A copy the horizon cut off: it stays being copied (num_copying, the decode replica's incoming)."""
        request = handoff.request
        self.transfers.append((request.request_id, handoff.prefill.index, decode.index, handoff.first_token_s,
                               start_s, NOT_REACHED, request.prompt_len, "unfinished"))

    # --- what the replicas tell it -----------------------------------------------------------------------
    def _prefilled(self, replica: Replica, finished: list[SequenceGroup]) -> None:
        """A prefill replica's iteration ended; the requests it finished have their first token."""
        for group in finished:
            request = self.requests[group.request_id]
            handoff = Handoff(request, replica, group.first_token_s, group.cached_prompt_tokens)
            if request.output_len <= 1:  # nothing to decode: done on the prefill side
                replica.core.release_kv(request.request_id)
                self._record(handoff, finished_s=group.first_token_s)
                continue
            self.waiting.append(handoff)
        if finished:
            self._place()

    def _decoded(self, replica: Replica, finished: list[SequenceGroup]) -> None:
        """A decode replica's iteration ended: blocks it freed may take the next waiting request."""
        if finished and self.waiting:
            self._place()

    # --- placing the waiting requests on decode replicas -----------------------------------------------------
    def _place(self) -> None:
        """The waiting requests in order, each to the least loaded decode replica with room for its blocks, until
        one finds none (hold: it and those behind it wait; recompute: it goes to be computed again)."""
        env, horizon = self.env, self.setup.decode.horizon_s
        while self.waiting and env.now < horizon:
            handoff = self.waiting[0]
            decode = self._with_room(handoff)
            if decode is None and not any(r.outstanding for r in self.decode):
                raise Unschedulable(self._too_large(handoff.request))
            if decode is None and self.setup.on_decode_full == "hold":
                return
            self.waiting.popleft()
            if decode is None:
                self._recompute(handoff)
                continue
            group = self._group_on(decode, handoff)
            decode.core.receive(group)
            self.num_copying += 1
            env.process(self._copy(handoff, decode))
        self._check_drained()

    def _with_room(self, handoff: Handoff) -> Replica | None:
        probe = self._group(handoff, self._probe_ids)
        for decode in sorted(self.decode, key=by_load):
            if decode.core.can_receive(probe):
                return decode
        return None

    def _too_large(self, request: Request) -> str:
        pool = self.setup.decode
        return (f"request {request.request_id}: prompt {request.prompt_len} + its first token need more KV blocks "
                f"than an empty decode replica's pool of {pool.num_gpu_blocks} has above its watermark; give the "
                "decode pool more memory")

    def _recompute(self, handoff: Handoff) -> None:
        decode = least_loaded(self.decode)
        request, now = handoff.request, self.env.now
        handoff.prefill.core.release_kv(request.request_id)
        handoff.prefill.wake()
        decode.core.recompute(self._group_on(decode, handoff))
        decode.wake()
        self.transfers.append((request.request_id, handoff.prefill.index, decode.index, handoff.first_token_s, now,
                               now, request.prompt_len, "recomputed"))

    def _group_on(self, decode: Replica, handoff: Handoff) -> SequenceGroup:
        return self._group(handoff, decode.core.next_seq_id)

    @staticmethod
    def _group(handoff: Handoff, next_seq_id: SequenceCounter) -> SequenceGroup:
        return prefilled_group(handoff.request, handoff.first_token_s, next_seq_id, handoff.cached_prompt_tokens)

    def _check_drained(self) -> None:
        if self._drained is not None and not self._drained.triggered and not (self.waiting or self.num_copying):
            self._drained.succeed()

    def serve(self, trace: Trace) -> SplitRuns:
        """Every request of the trace, until all finish or the horizon (serve_split checks the trace first)."""
        self.env.process(self.arrivals(trace))
        run_to_end(self.env, self.decode)  # the prefill replicas' unfinished requests are the fleet's to record
        self.check_drained()
        self.record_unfinished()
        return self.runs()

    def check_drained(self) -> None:
        """Nothing is left to happen: before the horizon, every request must have left the prefill pool."""
        if self.env.now < self.setup.decode.horizon_s and (self.waiting or self.num_copying):
            raise Unschedulable(f"a split fleet stalled with {len(self.waiting)} prefilled requests waiting for a "
                                f"decode replica and {self.num_copying} KV copies unfinished")

    # --- the records ---------------------------------------------------------------------------------------
    def _record(self, handoff: Handoff, finished_s: float | None) -> None:
        group = self._group(handoff, self._probe_ids)
        group.finish_s = finished_s
        self.records.add_request(group, handoff.prefill.index, finished=finished_s is not None)

    def record_unfinished(self) -> None:
        """At the end: the requests a horizon cut off before they reached a decode replica, as the trace has them
        (a prefill replica holds them with output_len 1): still in the prefill pool, or prefilled and waiting."""
        for replica in self.prefill:
            for group in replica.core.scheduler.groups_in_system():
                request = self.requests[group.request_id]
                group.seqs[0].output_len = request.output_len
                self.records.add_request(group, replica.index, finished=False)
            replica.core.close()
        for handoff in self.waiting:
            self._record(handoff, None)
            request = handoff.request
            self.transfers.append((request.request_id, handoff.prefill.index, -1, handoff.first_token_s,
                                   NOT_REACHED, NOT_REACHED, request.prompt_len, "waiting"))

    def runs(self) -> SplitRuns:
        replicas = [*self.prefill, *self.decode]
        runs = [ReplicaRun(r.index, r.core.records, r.iteration_ends) for r in replicas]
        runs.append(ReplicaRun(len(replicas), self.records, []))
        return SplitRuns(runs, sorted(self.transfers))


def serve_split(trace: Trace, setup: SplitSetup, router: Router, rng: np.random.Generator | None = None) -> SplitRuns:
    """The split fleet on one SimPy clock: every request of the trace, until all finish or the horizon. A decode pool
    that speculates needs `rng`, the run's seeded Generator: each decode replica draws the proposals accepted from a
    child of it (spawned only then, so a fleet without speculation draws what it always did)."""
    for name, pool in (("prefill", setup.prefill), ("decode", setup.decode)):
        if pool.replicas < 1:
            raise ValueError(f"a split fleet's {name} pool needs at least one replica, got {pool.replicas}")
    if trace.has_beams or (len(trace) and int(trace.n.max()) > 1):
        raise ValueError("a split fleet serves one sequence per request: the trace's n and beam_width must be 1")
    if setup.decode.system.prefix_caching:
        raise ValueError("a split fleet's decode pool runs without prefix caching: its prompts were computed by "
                         "the prefill pool (set prefix_caching on the prefill pool's system only)")
    if setup.prefill.system.prefix_caching and trace.block_keys is None:  # its requests carry their blocks' keys
        trace = with_block_keys(trace, setup.prefill.system.block_size)
    return SplitFleet(simpy.Environment(), setup, router, rng).serve(trace)


def with_acceptances(setup: SplitSetup, rng: np.random.Generator | None) -> SplitSetup:
    """The setup with each decode replica's outcome of its speculating steps, drawn from a child of `rng` (a decode
    pool that does not speculate draws nothing); the prefill pool never speculates."""
    if setup.prefill.system.speculative is not None:
        raise ValueError("a split fleet's prefill pool does not speculate: it computes prompts and first tokens (give "
                         "speculative to the decode pool's system)")
    decode = setup.decode
    if decode.system.speculative is None:
        return setup
    if rng is None:
        raise ValueError("a speculating decode pool needs the run's seeded rng to draw the proposals accepted")
    acceptances = replica_acceptances(decode.system, decode.replicas, rng, None)
    return replace(setup, decode=replace(decode, acceptances=acceptances, first_index=setup.prefill.replicas))
