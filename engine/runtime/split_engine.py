"""The real engine as a split fleet: a prefill engine and a decode engine of one model (same spec, seed and
weights) in one process, each with its own paged KV cache and control plane, serving requests the way the
simulator's split fleet does (sim/core/split_fleet.py, docs/concepts/engine.md):

  1. a request arrives at the prefill engine (admitted with output_len 1): its prefill samples its first token
     and it finishes there with its KV held (ServingCore.hand_off_kv);
  2. it waits, first come first served, for the decode engine to have room for its blocks (can_receive on the
     decode core's prefilled_group); none: it waits with its KV held ("hold");
  3. the decode core reserves its blocks (receive) and its prompt's KV blocks are copied from the prefill
     cache into them (engine/runtime/kv_transfer.py), one copy at a time on the link, first come first served;
     when the copy ends the prefill core lets its blocks go (release_kv) and the decode core decodes it from
     its next schedule() (kv_arrived), feeding the first token the prefill engine sampled.

The clock: both engines, the link and the arrivals on one virtual clock, as events in time order; events at
the same time in the order they were scheduled, as SimPy orders them, so that fed the same times the
simulator's sim/core/split_fleet.py takes the same decisions:
  - an arrival is admitted to the prefill core at its time and wakes the prefill engine;
  - an engine's iteration lasts its time_fn(batch) (Engine.time_fn) or else its measured forward; when it ends,
    its completions are handled (a prefill's finished requests join the queue of step 2, and the queue is
    placed; a decode that finished requests places the queue again, its blocks freed), then the engine starts
    its next iteration at once, or waits to be woken;
  - a copy lasts copy_time_fn(prompt tokens), or else the measured wall time of the copy; its end starts the
    next queued copy, then wakes both engines;
  - a woken engine starts at the wake's time, after the events scheduled before the wake at that time.
The copy itself runs when it starts on the clock (its blocks are reserved on both sides until it ends), so a
measured copy time is known when its end is scheduled.
"""
from __future__ import annotations

import heapq
import itertools
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from engine.core.sequence import SequenceGroup
from engine.core.serving import Request
from engine.core.system import SystemSpec
from engine.errors import Unschedulable
from engine.runtime.engine import Engine
from engine.runtime.kv_transfer import check_compatible, copy_prompt_kv
from engine.runtime.records import ReplayResult, check_request, replay_requests
from engine.runtime.sampler import SamplingParams
from engine.runtime.split_side import EngineSide

CopyTimeFn = Callable[[int], float]
PREFILL, DECODE = 0, 1  # the engines' replica numbers in the records, as the simulator numbers a 1 + 1 fleet
# one row per request that left the prefill engine for the decode engine, as the simulator's TRANSFER_COLUMNS
TRANSFER_COLUMNS = ("request_id", "prefill_replica", "decode_replica", "prefilled_s", "start_s", "end_s",
                    "num_tokens", "kind")


@dataclass
class Handoff:
    """A prefilled request waiting for the decode engine, its KV held on the prefill engine."""

    request: Request
    group: SequenceGroup  # the request as the decode core will hold it (prefilled_group)
    prefill_seq_id: int  # its sequence on the prefill side, whose blocks hold its prompt's KV
    tokens: list[int]  # its prompt and first token
    start_s: float = 0.0  # when its copy started


@dataclass
class SplitResult:
    """A split run: the generated tokens per request (the first token, sampled by the prefill engine,
    included), each engine's records, the transfers (rows of TRANSFER_COLUMNS, in order), each copy's
    seconds in order, and the requests done on the prefill engine (output_len 1: nothing to decode)."""

    outputs: dict[int, list[int]]
    prefill: ReplayResult
    decode: ReplayResult
    transfers: list[tuple] = field(default_factory=list)
    copy_s: list[float] = field(default_factory=list)
    prefill_times: list[float] = field(default_factory=list)  # each prefill iteration's seconds, in order
    decode_times: list[float] = field(default_factory=list)
    finished_on_prefill: list[int] = field(default_factory=list)


class SplitEngine:
    """A prefill Engine and a decode Engine of one model serving requests as a split fleet (module docstring).

    copy_time_fn(num_prompt_tokens) -> seconds prices a KV copy on the clock; None: its measured wall time.
    The engines' own time_fn, where given, price their iterations. After a run, `prefill_core` and
    `decode_core` are its control planes and `result` its SplitResult."""

    def __init__(self, prefill: Engine, decode: Engine, copy_time_fn: CopyTimeFn | None = None):
        if prefill.spec != decode.spec or prefill.seed != decode.seed:
            raise ValueError("a split fleet's two engines serve one model: the same spec and seed")
        for name, engine in (("prefill", prefill), ("decode", decode)):
            if engine.system.prefix_caching:
                raise ValueError(f"the split engine's {name} engine runs without prefix caching")
        check_split_speculation(prefill.system, decode.system)
        if prefill.runner is None or decode.runner is None:
            raise ValueError("a split fleet's engines run the model: build them with run_model=True")
        check_compatible(prefill.runner.cache, decode.runner.cache)
        self.prefill, self.decode, self.copy_time_fn = prefill, decode, copy_time_fn
        self.prefill_core = self.decode_core = None
        self.result: SplitResult | None = None

    @classmethod
    def build(cls, spec, system, prefill_blocks: int, decode_blocks: int, *, device="cpu", dtype=None, seed=0,
              num_cpu_blocks: int = 0, attention_backend: str = "auto", prefill_time_fn=None, decode_time_fn=None,
              copy_time_fn: CopyTimeFn | None = None) -> SplitEngine:
        """Both engines of one system, the decode engine on the prefill engine's weights; a speculating system's
        speculation runs on the decode engine alone."""
        prefill = Engine(spec, replace(system, speculative=None), device, dtype, seed, prefill_blocks, num_cpu_blocks,
                         attention_backend=attention_backend, time_fn=prefill_time_fn)
        decode = Engine(spec, system, device, dtype, seed, decode_blocks, num_cpu_blocks,
                        attention_backend=attention_backend, time_fn=decode_time_fn, model=prefill.runner.model)
        return cls(prefill, decode, copy_time_fn)

    # --- public ------------------------------------------------------------------------
    def generate(self, prompts: list[list[int]], max_new_tokens: int) -> list[list[int]]:
        """Greedy tokens (max_new_tokens each) per prompt, all arriving at time 0, as Engine.generate."""
        requests = [Request(i, 0.0, len(p), max_new_tokens) for i, p in enumerate(prompts)]
        result = self.serve(requests, self.prefill._given_prompts(prompts))
        return [result.outputs[i] for i in range(len(prompts))]

    def replay(self, requests, prompts: dict[int, list[int]] | None = None,
               sampling: SamplingParams | str = "greedy") -> SplitResult:
        """Serve a trace (rows as Engine.replay takes them); prompts by request id, else the random ones
        Engine.replay of the prefill engine draws for the same trace, so the two compare."""
        rows = replay_requests(requests)
        return self.serve(rows, prompts if prompts is not None else self.prefill._random_prompts(rows), sampling)

    def serve(self, requests: list[Request], prompts: dict[int, list[int]],
              sampling: SamplingParams | str = "greedy") -> SplitResult:
        sampling = SamplingParams(sampling) if isinstance(sampling, str) else sampling
        for request in requests:
            check_request(request, self.prefill.spec.max_seq_len, self.prefill.system)
            if request.n != 1 or request.beam_width != 1:
                raise ValueError(f"request {request.request_id}: a split fleet serves one sequence per request "
                                 "(n and beam_width must be 1)")
        if len({r.request_id for r in requests}) != len(requests):
            raise ValueError("request ids must be unique")
        self.result = _SplitRun(self, requests, prompts, sampling).run()
        return self.result


def check_split_speculation(prefill: SystemSpec, decode: SystemSpec) -> None:
    """As the simulator's split fleet, only the decode engine speculates, and with the n-gram proposer: a draft
    model or an EAGLE or MTP head follows every token the target computes, and would need its own state of the
    prompt (its KV, a head's output at the last token), which the prefill engine neither computes nor copies."""
    if prefill.speculative is not None:
        raise ValueError("the split engine's prefill engine runs without speculative decoding: it computes prompts "
                         "and first tokens (give system.speculative to the decode engine)")
    spec = decode.speculative
    if spec is not None and spec.method != "ngram":
        raise ValueError(f"the split engine's decode engine speculates with 'ngram' alone, not {spec.method!r}: its "
                         "proposer's state of the prompt (KV, a head's last output) is neither computed by the "
                         "prefill engine nor copied")


class _SplitRun:
    """One serve(): the two engines, the queue of prefilled requests, the link, on one event clock."""

    def __init__(self, engine: SplitEngine, requests: list[Request], prompts: dict[int, list[int]],
                 sampling: SamplingParams):
        self.copy_time_fn = engine.copy_time_fn
        self.prefill = EngineSide.of(engine.prefill, PREFILL, sampling)
        self.decode = EngineSide.of(engine.decode, DECODE, sampling)
        self.prefill.core.hand_off_kv()
        engine.prefill_core, engine.decode_core = self.prefill.core, self.decode.core
        self.requests = {r.request_id: r for r in requests}
        self.pending = deque(sorted(requests, key=lambda r: (r.arrival_s, r.request_id)))
        self.prompts = prompts
        self.waiting: deque[Handoff] = deque()  # prefilled, waiting for the decode engine's room
        self.link: deque[Handoff] = deque()  # placed: copying (the first) or queued for the link
        self.outputs: dict[int, list[int]] = {}
        self.transfers: list[tuple] = []
        self.copy_s: list[float] = []
        self.finished_on_prefill: list[int] = []
        self.events: list[tuple] = []  # (time, order, kind, what): a heap
        self.order = itertools.count()  # the order events were scheduled in, for those at one time

    # --- the clock ---------------------------------------------------------------------------------------
    def run(self) -> SplitResult:
        # the engines start first and find nothing, then the arrivals come, as the simulator's processes do
        self._wake(self.prefill, 0.0)
        self._wake(self.decode, 0.0)
        if self.pending:
            self._schedule(self.pending[0].arrival_s, "arrive", None)
        while self.events:
            now, _, kind, what = heapq.heappop(self.events)
            if kind == "arrive":
                self._arrive(now)
            elif kind == "start":
                what.woken = False
                self._start(what, now)
            elif kind == "end":
                self._ended(what, now)
            else:
                self._copied(now)
        if self.waiting or self.link:
            raise Unschedulable(f"a split engine stalled with {len(self.waiting)} prefilled requests waiting for "
                                f"the decode engine and {len(self.link)} KV copies unfinished")
        for side in (self.prefill, self.decode):
            side.core.check_schedulable()
            side.core.close()
        return SplitResult(self.outputs, ReplayResult.of(self.prefill.core.records),
                           ReplayResult.of(self.decode.core.records), self.transfers, self.copy_s,
                           self.prefill.times, self.decode.times, self.finished_on_prefill)

    def _schedule(self, at_s: float, kind: str, what) -> None:
        heapq.heappush(self.events, (at_s, next(self.order), kind, what))

    def _wake(self, side: EngineSide, now: float) -> None:
        """Something it schedules from changed: an idle engine starts at now (one pending start at a time);
        a busy one reads it at its next schedule() anyway."""
        if side.step is None and not side.woken:
            side.woken = True
            self._schedule(now, "start", side)

    def _start(self, side: EngineSide, now: float) -> None:
        if side.start(now):
            self._schedule(side.end_s, "end", side)

    # --- what happens ------------------------------------------------------------------------------------
    def _arrive(self, now: float) -> None:
        """Every request arriving now goes to the prefill engine, for its prompt and first token."""
        side = self.prefill
        while self.pending and self.pending[0].arrival_s <= now:
            request = self.pending.popleft()
            group = side.core.admit(replace(request, output_len=1))
            side.tokens[group.seqs[0].seq_id] = list(self.prompts[request.request_id])
        if self.pending:
            self._schedule(self.pending[0].arrival_s, "arrive", None)
        self._wake(side, now)

    def _ended(self, side: EngineSide, now: float) -> None:
        finished = side.end()
        if side is self.prefill:
            self._prefilled(finished, now)
        else:
            for group in finished:
                self.outputs[group.request_id] = side.tokens.pop(group.seqs[0].seq_id)[group.prompt_len:]
            if finished and self.waiting:
                self._place(now)
        self._start(side, now)  # its loop goes on at once, as the simulator's replica's does

    def _prefilled(self, finished: list[SequenceGroup], now: float) -> None:
        """The prefill engine's finished requests have their first token: they queue for the decode engine."""
        for group in finished:
            request = self.requests[group.request_id]
            seq_id = group.seqs[0].seq_id
            tokens = self.prefill.tokens.pop(seq_id)
            if request.output_len <= 1:  # nothing to decode: done on the prefill side
                self.prefill.core.release_kv(request.request_id)
                self.outputs[request.request_id] = tokens[request.prompt_len:]
                self.finished_on_prefill.append(request.request_id)
                continue
            decode_group = self.decode.core.prefilled_group(request, group.first_token_s)
            self.waiting.append(Handoff(request, decode_group, seq_id, tokens))
        if finished:
            self._place(now)

    def _place(self, now: float) -> None:
        """The queue in order onto the decode engine while it has room; the first that does not fit waits
        with those behind it, its KV held (hold)."""
        decode = self.decode
        while self.waiting:
            handoff = self.waiting[0]
            if not decode.core.can_receive(handoff.group):
                if not decode.core.outstanding:
                    raise Unschedulable(self._too_large(handoff.request))
                return
            self.waiting.popleft()
            decode.core.receive(handoff.group)
            decode.tokens[handoff.group.seqs[0].seq_id] = handoff.tokens
            self.link.append(handoff)
            if len(self.link) == 1:  # the link is free: the copy starts now
                self._start_copy(now)

    def _too_large(self, request: Request) -> str:
        return (f"request {request.request_id}: prompt {request.prompt_len} + its first token need more KV blocks "
                f"than the empty decode engine's pool of {self.decode.engine.num_gpu_blocks} has above its "
                "watermark; give the decode engine more blocks")

    def _start_copy(self, now: float) -> None:
        """The link's first placed request: its prompt's KV, prefill blocks into its reserved decode blocks."""
        handoff = self.link[0]
        prefill_scheduler = self.prefill.core.scheduler
        held = prefill_scheduler.held_kv[handoff.request.request_id].seqs[0]
        src_blocks = prefill_scheduler.allocator.block_table(held)
        dst_blocks = self.decode.core.scheduler.block_table(handoff.group.seqs[0].seq_id)
        measured = copy_prompt_kv(self.prefill.engine.runner.cache, src_blocks, self.decode.engine.runner.cache,
                                  dst_blocks, handoff.request.prompt_len)
        seconds = self.copy_time_fn(handoff.request.prompt_len) if self.copy_time_fn is not None else measured
        self.copy_s.append(seconds)
        handoff.start_s = now
        self._schedule(now + seconds, "copied", None)

    def _copied(self, now: float) -> None:
        """The link's copy is done: the next starts, the prefill blocks go, and the request decodes."""
        handoff = self.link.popleft()
        if self.link:
            self._start_copy(now)
        request = handoff.request
        self.prefill.core.release_kv(request.request_id)
        self._wake(self.prefill, now)
        self.decode.core.kv_arrived(request.request_id)
        self._wake(self.decode, now)
        self.transfers.append((request.request_id, PREFILL, DECODE, handoff.group.first_token_s, handoff.start_s,
                               now, request.prompt_len, "copied"))
