"""The contract every scheduler keeps with the two data planes."""
from __future__ import annotations

from abc import abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field

from engine.core.batch import Batch
from engine.core.kv_usage import KVUsage, UsageColumns
from engine.core.scheduler.speculating_stretch import SpeculatingSteps
from engine.core.sequence import Sequence, SequenceGroup

__all__ = ["DecodeStretch", "KVUsage", "Scheduler"]


class Scheduler:
    """Decides each iteration; knows lengths and blocks, never token ids or tensors.

    Not an abc.ABC: compiled by mypyc, an ABC's subclasses share one isinstance cache (ABC's own
    _abc_impl), so that `isinstance(vllm, ReservationScheduler)` turned True once `isinstance(vllm,
    VLLMScheduler)` had been asked. The abstract methods raise instead (tests/engine/core/test_scheduler_classes.py).

    Use: add_request() as requests arrive; schedule() -> Batch; run it (for real or on
    a cost model); complete(batch, now, beam_parents) applies the sampled tokens and returns
    the requests that finished. beam_parents ({child seq id: parent seq id}, engine.core.beam)
    are the forks of the batch's beam searches after a decode step: the data plane's choice.
    accepted (speculative decoding, Batch.decode_proposed) are the proposals the target accepted
    for each decode: the data plane's outcome too (the simulator draws it, an engine measures it);
    only a speculating vLLM scheduler reads it.
    """

    block_size: int
    num_gpu_blocks: int
    num_cpu_blocks: int
    caches_prefixes: bool = False  # automatic prefix caching (vLLM's option): requests record their hits
    # disaggregated serving, on a prefill replica: finished requests whose KV still waits to be copied out
    held_kv: dict[int, SequenceGroup]
    num_preemptions: int  # groups preempted so far, each time counted
    # the clock at the schedule() about to run, set by ServingCore.start_step (a policy that reads the time,
    # vLLM v0.3's delay_factor, reads it here; the others ignore it)
    now_s: float
    # the start of the step that ran just before this schedule(), when this one follows it without a pause; None
    # after an idle engine (set by ServingCore.start_step; vLLM V1's async scheduling reads it)
    previous_step_start_s: float | None

    @abstractmethod
    def add_request(self, group: SequenceGroup) -> None:
        raise NotImplementedError(f"{type(self).__name__}.add_request")

    @abstractmethod
    def schedule(self) -> Batch:
        raise NotImplementedError(f"{type(self).__name__}.schedule")

    @abstractmethod
    def complete(self, batch: Batch, now_s: float,
                 beam_parents: Mapping[int, int] | None = None,
                 accepted: list[int] | None = None) -> list[SequenceGroup]:
        raise NotImplementedError(f"{type(self).__name__}.complete")

    @abstractmethod
    def block_table(self, seq_id: int) -> list[int]:
        """Physical GPU block ids holding the sequence's KV, in logical order."""
        raise NotImplementedError(f"{type(self).__name__}.block_table")

    @abstractmethod
    def has_unfinished(self) -> bool:
        raise NotImplementedError(f"{type(self).__name__}.has_unfinished")

    @abstractmethod
    def kv_usage(self) -> KVUsage:
        """The pool by what holds it now (paper Fig. 2), computed by engine.core.kv_usage."""
        raise NotImplementedError(f"{type(self).__name__}.kv_usage")

    @property
    @abstractmethod
    def num_waiting(self) -> int:
        raise NotImplementedError(f"{type(self).__name__}.num_waiting")

    @abstractmethod
    def release_cache(self) -> None:
        """The run is over: free what the scheduler keeps cached across requests (vLLM: the shared
        prefix's blocks). Every request's own blocks are freed as it finishes."""
        raise NotImplementedError(f"{type(self).__name__}.release_cache")

    @abstractmethod
    def groups_in_system(self) -> list[SequenceGroup]:
        """Every request admitted and not finished: waiting first (oldest first), then running, then swapped."""
        raise NotImplementedError(f"{type(self).__name__}.groups_in_system")

    def stall_culprit(self) -> str | None:
        """When nothing can run and nothing more will arrive: the request that holds the rest up, when it is not
        the oldest waiting one (a group swapped out that cannot come back), in words; None otherwise."""
        return None

    def take_ignored(self) -> list[SequenceGroup]:
        """The requests schedule() ignored since the last call (never run, vLLM's FINISHED_IGNORED): a policy
        that refuses an unservable request at admission instead ignores none."""
        return []

    def abort(self, request_id: int) -> SequenceGroup | None:
        """Between steps: take the request out of the system wherever it is, freeing what it holds; None when
        it is not in the system (finished, ignored or never admitted)."""
        raise NotImplementedError(f"{type(self).__name__} cannot abort a request (vLLM's schedulers can)")

    # --- disaggregated serving (docs/disaggregated.md): the prefill side's hand-off, the decode side's receipt -----
    def hand_off_kv(self) -> None:
        """Keep a finished request's blocks until release_kv (a prefill replica's requests)."""
        raise NotImplementedError(f"{type(self).__name__} cannot hand KV over")

    def release_kv(self, request_id: int) -> None:
        raise NotImplementedError(f"{type(self).__name__} cannot hand KV over")

    def can_receive(self, group: SequenceGroup) -> bool:
        """Whether the blocks of a request prefilled elsewhere fit now (a decode replica's)."""
        raise NotImplementedError(f"{type(self).__name__} cannot receive KV (vLLM's schedulers can)")

    def receive(self, group: SequenceGroup) -> None:
        raise NotImplementedError(f"{type(self).__name__} cannot receive KV (vLLM's schedulers can)")

    def kv_arrived(self, request_id: int) -> None:
        raise NotImplementedError(f"{type(self).__name__} cannot receive KV (vLLM's schedulers can)")

    # --- decode stretches: what a simulator may advance in one go (docs/concepts/fast-forward.md) ---------------
    def decode_stretch(self, batch: Batch) -> DecodeStretch:
        """Right after schedule() returned `batch`: how many iterations, `batch` first, repeat it with
        every decode context one longer per step, with nothing decided differently (no admission,
        preemption, swap, copy or fork, and no request finishing before the last of them completes),
        provided no request arrives meanwhile. One where nothing more can be promised."""
        return DecodeStretch(batch, 1)

    def advance_decodes(self, stretch: DecodeStretch, num_steps: int, arrived: int = 0) -> UsageColumns:
        """Complete the first num_steps - 1 iterations of `stretch` (2 <= num_steps <= stretch.num_steps) and
        run the schedule() of each next one, without building their batches: the scheduler is left as
        schedule() leaves it before iteration num_steps, whose batch is stretch.batch.decode_later(num_steps - 1)
        and which complete(stretch.batch, ...) completes as any. Returns the KV usage each of iterations
        2..num_steps found (kv_usage()'s fields, as columns). `arrived`: requests added since schedule()
        returned `batch`, all during the last iteration (a request ends a stretch at the iteration it
        arrives in), so after every schedule() the stretch ran."""
        raise NotImplementedError(f"{type(self).__name__} promises no decode stretch")

    def speculating_stretch(self, batch: Batch) -> SpeculatingSteps | None:
        """Right after schedule() returned `batch`, of a speculating system: the decode stretch it begins, to be
        planned an iteration at a time from each one's accepted counts (SpeculatingSteps), provided no request
        arrives meanwhile; None where none can run (engine.core.scheduler.speculating_stretch)."""
        return None

    def advance_speculating(self, steps: SpeculatingSteps, num_steps: int, arrived: int = 0) -> UsageColumns:
        """advance_decodes for a speculating stretch: complete the first num_steps - 1 of its iterations (2 <=
        num_steps <= those whose accepted counts it has) and run the schedule() of each next one, leaving the
        scheduler as schedule() leaves it before iteration num_steps (steps.batches[num_steps - 1], which
        complete() completes as any, with its accepted counts). Returns the KV usage each of iterations
        2..num_steps found. `arrived`: requests added since schedule() returned the first, all during the last."""
        raise NotImplementedError(f"{type(self).__name__} promises no speculating stretch")


@dataclass(eq=False, slots=True)
class DecodeStretch:
    """What Scheduler.decode_stretch promised for the batch schedule() just returned: num_steps iterations
    that repeat it, every decode context one longer per step. `growth` is how the paged pool's block tables
    grow meanwhile: growth[s] holds the running sequences with s free slots in their last block, in the
    order schedule() appends, so iteration j >= 2 appends a block for each of growth[(j - 2) % block_size]
    (empty for a reservation, which never grows)."""

    batch: Batch
    num_steps: int
    growth: list[list[Sequence]] = field(default_factory=list)

    # written out, so that mypyc compiles it: a dataclass's generated __init__ runs interpreted, and a step that
    # promises nothing builds one too (tests/engine/core/test_value_inits.py)
    def __init__(self, batch: Batch, num_steps: int, growth: list[list[Sequence]] | None = None) -> None:
        self.batch = batch
        self.num_steps = num_steps
        self.growth = growth if growth is not None else []
