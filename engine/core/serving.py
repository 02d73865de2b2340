"""One step of serving, written once for both data planes.

A step is: admit what has arrived, schedule a batch, note how the KV pool is used, let the data
plane execute the batch (the real engine runs and times the forward; the simulator's replica
waits the cost model's time on the SimPy clock), then complete it and record what happened.
Only the middle differs between the planes, so `ServingCore` does the rest:

    step = core.start_step(now)          # None: nothing to run now
    ... the data plane spends the batch's seconds ...
    core.end_step(step, now, beam_parents)   # records, completions (and the data plane's beam forks)

so a real run and a simulated run of one trace take the same decisions by construction. A simulator
may also let a decode-only step repeat (`decode_stretch`) and end several iterations at once
(`end_steps`); one step is that stretch's one-iteration case (docs/concepts/fast-forward.md).
"""
from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import chain, repeat
from operator import sub

from engine.core.batch import Batch
from engine.core.kv_usage import after_first, usage_values
from engine.core.records import ServingRecords
from engine.core.scheduler.base import DecodeStretch, KVUsage, Scheduler
from engine.core.scheduler.speculating_stretch import SpeculatingSteps
from engine.core.sequence import SequenceCounter, SequenceGroup, make_group
from engine.errors import Unschedulable


@dataclass(frozen=True, slots=True)
class Request:
    """One request of a trace, recorded or generated: when it arrives, how long its prompt and output
    are, and how many sequences it generates: n samples, or a beam search of beam_width beams (one or
    the other); the first prefix_len tokens of its prompt are the workload's shared prefix (0: none).
    block_keys: with prefix caching, opaque keys of its full blocks (SequenceGroup.block_keys)."""

    request_id: int
    arrival_s: float
    prompt_len: int
    output_len: int
    n: int = 1
    prefix_len: int = 0
    beam_width: int = 1
    block_keys: tuple[int, ...] = ()


@dataclass(slots=True)
class Step:
    """A scheduled iteration between start_step() and end_step()."""

    batch: Batch
    usage: KVUsage  # the pool as the batch found it
    start_s: float
    num_waiting: int  # requests waiting once it was scheduled
    stretch: DecodeStretch | None = None  # the iterations it may repeat for (decode_stretch)
    speculating: SpeculatingSteps | None = None  # or, speculating, those planned after it (speculating_stretch)

    # written out so that mypyc compiles it (a dataclass's generated __init__ runs interpreted): one a step
    def __init__(self, batch: Batch, usage: KVUsage, start_s: float, num_waiting: int,
                 stretch: DecodeStretch | None = None, speculating: SpeculatingSteps | None = None) -> None:
        self.batch, self.usage, self.start_s, self.num_waiting, self.stretch = (batch, usage, start_s, num_waiting,
                                                                               stretch)
        self.speculating = speculating


def prefilled_group(request: Request, first_token_s: float | None, next_seq_id: SequenceCounter,
                    cached_prompt_tokens: int = -1) -> SequenceGroup:
    """The request as a decode replica holds it: its prompt and first token computed elsewhere, at first_token_s
    (and cached_prompt_tokens of its prompt found in the prefill replica's prefix cache)."""
    group = make_group(request.request_id, request.arrival_s, request.prompt_len, request.output_len,
                       request.n, next_seq_id, prefix_len=request.prefix_len, beam_width=request.beam_width)
    if group.num_seqs != 1:
        raise ValueError(f"request {request.request_id}: a split fleet serves one sequence per request, not "
                         f"{group.num_seqs} (n and beam_width must be 1)")
    group.seqs[0].length = request.prompt_len + 1
    group.first_token_s = first_token_s
    group.cached_prompt_tokens = cached_prompt_tokens
    return group


class ServingCore:
    """One replica's control plane: its scheduler, the requests it holds, and its records."""

    def __init__(self, scheduler: Scheduler, records: ServingRecords | None = None, replica: int = 0):
        self.scheduler = scheduler
        self.records = records if records is not None else ServingRecords()
        self.replica = replica
        self.next_seq_id = SequenceCounter()
        self.outstanding = 0  # admitted, not yet finished (a router reads it)
        # the last schedule() that ran nothing: it may still move blocks (a preemption by swapping),
        # which the real engine applies and the simulator charges nothing for
        self.idle_batch: Batch | None = None
        # that schedule() preempted someone: the next one runs what it preempted (a group is not re-admitted
        # or swapped back in by the schedule() that preempted it), so a data plane schedules again at once,
        # as vLLM's engine loop steps again while requests are unfinished, instead of idling
        self.idle_preempted = False
        # disaggregated serving: a prefill replica's finished requests are not done (hand_off_kv)
        self.hands_off = False
        # the last iteration that ran: its start and end (an asynchronous scheduler reads the start, when the next
        # step follows it without a pause: Scheduler.previous_step_start_s)
        self.last_start_s: float | None = None
        self.last_end_s: float | None = None

    def admit(self, request: Request) -> SequenceGroup:
        group = make_group(request.request_id, request.arrival_s, request.prompt_len, request.output_len,
                           request.n, self.next_seq_id, prefix_len=request.prefix_len,
                           beam_width=request.beam_width, block_keys=request.block_keys)
        if self.scheduler.caches_prefixes:
            group.cached_prompt_tokens = 0  # until its admission finds some
            self.records.cached_column = True
        self.scheduler.add_request(group)
        self.outstanding += 1
        return group

    def start_step(self, now_s: float) -> Step | None:
        """Schedule the next iteration; None when nothing can run now (then idle_preempted says whether the
        next call can)."""
        self.scheduler.now_s = now_s
        follows = self.last_end_s is not None and now_s <= self.last_end_s
        self.scheduler.previous_step_start_s = self.last_start_s if follows else None
        preempted = self.scheduler.num_preemptions
        batch = self.scheduler.schedule()
        ignored = self.scheduler.take_ignored()
        if ignored:
            self._drop(ignored, now_s, "ignored")
        if batch.is_empty:
            self.idle_batch = batch
            self.idle_preempted = self.scheduler.num_preemptions > preempted
            return None
        return Step(batch, self.scheduler.kv_usage(), now_s, self.scheduler.num_waiting)

    def end_step(self, step: Step, now_s: float, beam_parents: Mapping[int, int] | None = None,
                 accepted: list[int] | None = None) -> list[SequenceGroup]:
        """The batch ran until now_s: record the iteration, complete it, record the requests it finished.

        beam_parents: the data plane's choice for the batch's beam searches (step.batch.beam_groups)
        after a decode step, as forks {child seq id: parent seq id} (engine.core.beam.beam_parents);
        a beam left out continues itself. accepted: speculative decoding's outcome, the proposals accepted for
        each decode (Scheduler.complete)."""
        return self.end_steps(step, (now_s,), beam_parents, accepted=accepted)

    def decode_stretch(self, step: Step) -> int:
        """How many iterations the step's decode-only batch may repeat, nothing decided differently
        (Scheduler.decode_stretch), kept with the step for end_steps."""
        step.stretch = self.scheduler.decode_stretch(step.batch)
        return step.stretch.num_steps

    def speculating_stretch(self, step: Step) -> SpeculatingSteps | None:
        """The speculating stretch the step's decode-only batch begins (Scheduler.speculating_stretch), kept with
        the step for end_steps; None where none can run."""
        step.speculating = self.scheduler.speculating_stretch(step.batch)
        return step.speculating

    def end_steps(self, step: Step, ends: Sequence[float], beam_parents: Mapping[int, int] | None = None,
                  queued_s: Sequence[float] = (), accepted: list[int] | None = None) -> list[SequenceGroup]:
        """The step's batch and the next len(ends) - 1 iterations of its decode stretch (decode_stretch, or
        speculating_stretch with the accepted counts of each) ran, ending at `ends`: record each iteration,
        complete them, record the requests the last finished (only the last may). One end is end_step. Requests
        that arrived meanwhile arrived during the last, but for those that joined a waiting queue behind its
        refused head, at `queued_s` (in order, none at an end): each iteration ending after one records it
        waiting."""
        scheduler, count, batch = self.scheduler, len(ends), step.batch
        waiting = scheduler.num_waiting
        speculating = step.speculating
        if count == 1:
            self.records.add_iteration(batch, step.usage, step.start_s, ends[0] - step.start_s, waiting,
                                       self.replica)
        else:
            contexts: list[int] | None = None
            if speculating is not None:
                later = scheduler.advance_speculating(speculating, count, waiting - step.num_waiting)
                contexts = speculating.context_sums(count)
            elif step.stretch is not None:
                later = scheduler.advance_decodes(step.stretch, count, waiting - step.num_waiting)
            else:
                raise ValueError("end_steps: several iterations of a step whose decode_stretch was not asked")
            starts = [step.start_s, *ends[:-1]]
            usage = tuple(map(after_first, usage_values(step.usage), later))  # the step's own, then the stretch's
            waits: Iterable[int] | int = (waiting if waiting == step.num_waiting
                                          else chain(repeat(step.num_waiting, count - 1), (waiting,)))
            if queued_s:
                waits = chain([step.num_waiting + bisect_left(queued_s, end) for end in ends[:-1]], (waiting,))
            self.records.add_iterations(batch, usage, starts, map(sub, ends, starts), waits, self.replica, contexts)
            if speculating is not None:  # the stretch's iterations before its last, then the last as any
                self.records.add_speculations(speculating.speculation(count - 1))
        if speculating is not None:  # the last iteration it ran (a request reaching the replica may cut it to one)
            batch, accepted = speculating.batches[count - 1], speculating.accepted[count - 1]
        self.last_start_s = ends[-2] if count > 1 else step.start_s
        self.last_end_s = ends[-1]
        if self.records.speculating:  # a speculating iteration's pair: the last of a stretch, or the one
            self.records.add_speculation(batch.num_proposed, sum(accepted) if accepted is not None else 0)
        finished = scheduler.complete(batch, ends[-1], beam_parents, accepted)
        if not self.hands_off:
            for group in finished:
                self.records.add_request(group, self.replica)
        self.outstanding -= len(finished)
        return finished

    # --- disaggregated serving (docs/disaggregated.md) ------------------------------------------------------
    def hand_off_kv(self) -> None:
        """Make this a prefill replica: a request admitted here computes its prompt and samples its first token
        (admit it with output_len 1), then leaves end_steps' list of finished requests unrecorded with its KV
        still held, for a decode replica to receive; release_kv lets the KV go once it has."""
        self.hands_off = True
        self.scheduler.hand_off_kv()

    def release_kv(self, request_id: int) -> None:
        self.scheduler.release_kv(request_id)

    @property
    def holds_kv(self) -> bool:
        """A prefill replica still holds some finished request's KV, to be copied out."""
        return bool(self.scheduler.held_kv)  # empty but on a prefill replica

    def prefilled_group(self, request: Request, first_token_s: float | None) -> SequenceGroup:
        """The request as this decode replica holds it (prefilled_group), its sequence numbered here."""
        return prefilled_group(request, first_token_s, self.next_seq_id)

    def can_receive(self, group: SequenceGroup) -> bool:
        """Whether a decode replica has the blocks for a request prefilled elsewhere (prefilled_group) now."""
        return self.scheduler.can_receive(group)

    def receive(self, group: SequenceGroup) -> None:
        """Reserve the blocks of a request prefilled elsewhere, for its KV to be copied in
        (scheduler.block_table of its sequence); it decodes after kv_arrived."""
        self.scheduler.receive(group)
        self.outstanding += 1

    def kv_arrived(self, request_id: int) -> None:
        self.scheduler.kv_arrived(request_id)

    def recompute(self, group: SequenceGroup) -> None:
        """Take a request prefilled elsewhere whose KV is not copied: it waits as a prompt of its prompt and first
        token, computed again here."""
        self.scheduler.add_request(group)
        self.outstanding += 1

    def abort(self, request_id: int, now_s: float) -> bool:
        """Take the request out between steps (vLLM's abort): it frees what it holds, is recorded as aborted,
        and never runs again. False when it is not in the system (finished, ignored, or never admitted)."""
        group = self.scheduler.abort(request_id)
        if group is None:
            return False
        self._drop([group], now_s, "aborted")
        return True

    def _drop(self, groups: list[SequenceGroup], now_s: float, status: str) -> None:
        for group in groups:
            self.records.add_dropped(group, self.replica, now_s, status)
        self.outstanding -= len(groups)

    def close(self) -> None:
        """No request will come any more: free what the scheduler caches across requests."""
        self.scheduler.release_cache()

    def check_schedulable(self) -> None:
        """Called when nothing can run and nothing more will arrive: waiting requests are stuck."""
        if self.scheduler.has_unfinished():
            raise Unschedulable(self.unschedulable_message())

    def unschedulable_message(self) -> str:
        """What is stuck and why: the scheduler's culprit when it names one (a swapped-out group that cannot come
        back), else the oldest waiting request."""
        s = self.scheduler
        culprit = s.stall_culprit()
        if culprit is not None:
            where = f"replica {self.replica}: " if self.replica else ""
            stuck = len(s.groups_in_system())
            return (f"{where}{stuck} request{'s' if stuck > 1 else ''} can never be scheduled: {culprit}; give the "
                    "KV cache more memory")
        first = s.groups_in_system()[0] if s.num_waiting else None  # the oldest waiting request
        width = "beam_width" if first is not None and first.is_beam else "n"
        which = (f"; the first is request {first.request_id} (prompt {first.prompt_len} + output "
                 f"{first.output_len} tokens, {width}={first.num_seqs})" if first is not None else "")
        where = f"replica {self.replica}: " if self.replica else ""
        return (f"{where}{s.num_waiting} waiting requests can never be scheduled: the KV pool of "
                f"{s.num_gpu_blocks} blocks x {s.block_size} tokens is too small{which}")

    def record_unfinished(self) -> None:
        """At a horizon: the requests still in the system, with no finish time."""
        for group in self.scheduler.groups_in_system():
            self.records.add_request(group, self.replica, finished=False)
