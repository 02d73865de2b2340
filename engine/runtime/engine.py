"""The real engine: one of the five systems' schedulers driving the model runner.

Each iteration is the control plane's step (engine.core.serving.ServingCore), the same one the
simulator's replica takes, so a replay here and a simulated replay of the same trace differ only
in where each iteration's time comes from: a measured forward here, a cost model there (or an
injected `time_fn` here, for fidelity tests).
"""
from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np
import torch

from engine.core.batch import Batch
from engine.core.factory import make_scheduler
from engine.core.sequence import SequenceGroup
from engine.core.serving import Request, ServingCore
from engine.core.spec import ModelSpec
from engine.core.system import SystemSpec
from engine.runtime.beam import BeamSearch
from engine.runtime.cache import DEFAULT_MEMORY_FRACTION, default_swap_blocks
from engine.runtime.draft import DraftProposer
from engine.runtime.graphs import MAX_GRAPH_BATCH
from engine.runtime.head_model import HEAD_METHODS, build_head, head_kv_spec
from engine.runtime.head_proposer import HeadProposer
from engine.runtime.model import build_decoder
from engine.runtime.prefix_keys import segment_token_ids, token_block_keys
from engine.runtime.records import ReplayResult, check_request, replay_requests
from engine.runtime.runner import ModelRunner, resolve_device, resolve_dtype
from engine.runtime.sampler import SamplingParams
from engine.runtime.speculation import draft_spec, ngram_proposals, target_pool_share

CLOCKS = ("forward", "step")
TimeFn = Callable[[Batch], float]


@dataclass
class ServingRun:
    """State of one generate() or replay(): a fresh control plane over the engine's KV pool."""

    core: ServingCore
    pending: deque[Request]
    prompts: dict[int, list[int]]  # request_id -> prompt token ids
    tokens: dict[int, list[int]] = field(default_factory=dict)  # seq_id -> prompt + generated
    outputs: dict[int, list[list[int]]] = field(default_factory=dict)  # request_id -> generated, per sample
    beam: BeamSearch = field(default_factory=BeamSearch)  # the beams in flight and their scores
    beam_scores: dict[int, list[float]] = field(default_factory=dict)  # request_id -> each beam's final score
    clock: float = 0.0  # virtual seconds
    # per iteration, the wall seconds of its step outside the timed forward: scheduling, building the
    # inputs, completing and recording (on the clock only with clock="step"; see ReplayResult.host_s)
    host_s: list[float] = field(default_factory=list)
    device_s: list[float] = field(default_factory=list)  # per iteration, the span of its device work (timing.py)
    carried_host_s: float = 0.0  # the last completion's host work, charged to the next iteration
    # a replay with prefix caching: request_id -> its prompt and output tokens (Engine._streams), and
    # seq_id -> that stream for a sequence made to generate its output
    streams: dict[int, list[int]] = field(default_factory=dict)
    forced: dict[int, list[int]] = field(default_factory=dict)


class Engine:
    """Offline `generate` and trace `replay` with one system's scheduler on the paged runtime.

    num_gpu_blocks=None fills free device memory; num_cpu_blocks=None gives a host swap pool of
    vLLM's 4 GiB, or as many blocks as the device pool where that is fewer
    (engine.runtime.cache.default_swap_blocks). run_model=False (with time_fn, and num_gpu_blocks
    given) replays the control plane alone: no weights, no cache, no tokens; replay() only.

    clock: what an iteration lasts on the replay's clock. "forward" is the timed forward alone (block
    plans, inputs to the device, the model, sampling); "step" adds the host work around it (admission,
    scheduling, building inputs, completion, records), as a server's users wait for it. A time_fn, when
    given, decides instead.

    cuda_graphs (engine.cuda_graphs in a config): decode batches replay CUDA graphs, captured here for
    every bucket up to the system's largest batch; None: on where they can run (CUDA, Triton kernels).
    """

    def __init__(self, spec: ModelSpec, system: SystemSpec, device: torch.device | str = "cpu",
                 dtype: torch.dtype | str | None = None, seed: int = 0, num_gpu_blocks: int | None = None,
                 num_cpu_blocks: int | None = None, *, attention_backend: str = "auto",
                 time_fn: TimeFn | None = None, run_model: bool = True, cpu_budget_bytes: int | None = None,
                 model=None, clock: str = "forward", cuda_graphs: bool | None = None):
        system.validate("Engine", "system")
        if clock not in CLOCKS:
            raise ValueError(f"clock must be one of {CLOCKS}, got {clock!r}")
        self.spec, self.system, self.seed, self.time_fn, self.clock = spec, system, seed, time_fn, clock
        self.last_host_s = 0.0  # the host seconds charged to the iteration now running (a time_fn may read it)
        # its proposer's seconds, a draft's or a head's before and after the target's forward (a time_fn may read it)
        self.last_proposer_s = 0.0
        self.runner: ModelRunner | None = None
        self.draft: DraftProposer | None = None  # a draft system's draft model, on its own cache
        self.head: HeadProposer | None = None  # an EAGLE or MTP system's head, on its own cache
        if run_model:
            draft = draft_spec(system.speculative, spec)
            on = resolve_device(device)
            dtype_on = resolve_dtype(dtype, on)
            draft_model = build_decoder(draft, on, dtype_on, seed) if draft is not None else None
            method = system.speculative.method if system.speculative is not None else None
            if method in HEAD_METHODS:  # the head shares the target's embedding and LM head: the target first
                model = model if model is not None else build_decoder(spec, on, dtype_on, seed)
            head = build_head(model, method, seed) if method in HEAD_METHODS else None
            proposer_kv = draft if draft is not None else head_kv_spec(spec) if head is not None else None
            share = target_pool_share(spec, proposer_kv, system.block_size, dtype_on)
            self.runner = ModelRunner(spec, device, dtype, seed, num_gpu_blocks, num_cpu_blocks, system.block_size,
                                      attention_backend=attention_backend, cpu_budget_bytes=cpu_budget_bytes,
                                      model=model, cuda_graphs=cuda_graphs,
                                      max_graph_batch=min(system.max_seqs_per_batch, MAX_GRAPH_BATCH),
                                      memory_fraction=DEFAULT_MEMORY_FRACTION * share, keep_hidden=head is not None)
            if draft is not None and draft_model is not None:
                self.draft = DraftProposer(draft, draft_model, self.runner.num_gpu_blocks, self.runner.num_cpu_blocks,
                                           system.block_size, attention_backend, seed)
            if head is not None:
                self.head = HeadProposer(head, self.runner.model, self.runner.num_gpu_blocks,
                                         self.runner.num_cpu_blocks, system.block_size, attention_backend)
            self.runner.capture_graphs()  # at start-up, as a server does: no replay pays for a capture
            num_gpu_blocks, num_cpu_blocks = self.runner.num_gpu_blocks, self.runner.num_cpu_blocks
        elif time_fn is None or num_gpu_blocks is None:
            raise ValueError("run_model=False needs a time_fn and an explicit num_gpu_blocks")
        elif num_cpu_blocks is None:  # the pool the model would have had: its blocks' bytes are its dtype's
            dtype_on = resolve_dtype(dtype, torch.device(device))
            num_cpu_blocks = default_swap_blocks(spec, system.block_size, dtype_on, num_gpu_blocks)
        self.num_gpu_blocks, self.num_cpu_blocks = num_gpu_blocks, num_cpu_blocks
        self.records: ReplayResult | None = None  # of the last generate() or replay()

    # --- public ------------------------------------------------------------------------
    def generate(self, prompts: list[list[int]], max_new_tokens: int, n: int = 1,
                 sampling: SamplingParams | str = "greedy") -> list[list[int]]:
        """Generated tokens (exactly max_new_tokens each), prompt-major: the n samples of
        prompts[i] are entries i*n .. i*n+n-1. All requests arrive at time 0."""
        if self.runner is None:
            raise ValueError("generate needs the model: build the Engine with run_model=True")
        sampling = SamplingParams(sampling) if isinstance(sampling, str) else sampling
        requests = [Request(i, 0.0, len(p), max_new_tokens, n) for i, p in enumerate(prompts)]
        run = self._run(requests, self._given_prompts(prompts), sampling, self.time_fn)
        return [out for i in range(len(prompts)) for out in run.outputs[i]]

    def beam_search(self, prompts: list[list[int]], max_new_tokens: int,
                    beam_width: int) -> list[list[tuple[list[int], float]]]:
        """A beam search of `beam_width` beams from each prompt, exactly max_new_tokens long (EOS
        ignored): per prompt, every final beam as (generated tokens, sum of their log-probabilities),
        best first. All requests arrive at time 0 and are served together, as generate() serves them."""
        if self.runner is None:
            raise ValueError("beam_search needs the model: build the Engine with run_model=True")
        requests = [Request(i, 0.0, len(p), max_new_tokens, beam_width=beam_width)
                    for i, p in enumerate(prompts)]
        run = self._run(requests, self._given_prompts(prompts), SamplingParams(), self.time_fn)
        results = []
        for i in range(len(prompts)):
            beams = list(zip(run.outputs[i], run.beam_scores[i]))
            results.append(sorted(beams, key=lambda beam: -beam[1]))
        return results

    def replay(self, requests, sampling: SamplingParams | str = "greedy",
               time_fn: TimeFn | None = None) -> ReplayResult:
        """Serve a trace in virtual time: rows of (arrival_s, prompt_len, output_len, n[, beam_width]),
        or a columnar trace. Prompts are random token ids from the engine's seed. The clock
        advances by each iteration's measured time (or time_fn(batch)) and jumps to the next
        arrival when idle."""
        sampling = SamplingParams(sampling) if isinstance(sampling, str) else sampling
        rows = replay_requests(requests)
        segments = getattr(requests, "segments", None)  # a trace's token identities (sim/workload/tokens.py)
        if self.system.prefix_caching:
            streams = self._streams(rows, segments)
            prompts = {r.request_id: streams[r.request_id][:r.prompt_len] for r in rows}
            self._run(rows, prompts, sampling, time_fn or self.time_fn, streams)
            return self.records
        prompts = self._segment_prompts(rows, segments) if segments is not None else self._random_prompts(rows)
        self._run(rows, prompts, sampling, time_fn or self.time_fn)
        return self.records

    # --- prompts -----------------------------------------------------------------------
    def _given_prompts(self, prompts: list[list[int]]) -> dict[int, list[int]]:
        vocab = self.spec.vocab_size
        for i, prompt in enumerate(prompts):
            if not prompt:
                raise ValueError(f"prompt {i} is empty")
            if not all(isinstance(t, (int, np.integer)) and 0 <= t < vocab for t in prompt):
                raise ValueError(f"prompt {i} holds a token id outside the vocabulary 0..{vocab - 1}")
        return {i: [int(t) for t in p] for i, p in enumerate(prompts)}

    def _random_prompts(self, rows: list[Request]) -> dict[int, list[int]]:
        """Random token ids from the engine's seed; a request with a shared prefix starts with the same
        prefix_len tokens as every other one (drawn from their own stream, so a trace without a prefix
        gets the prompts it always got)."""
        if self.runner is None:
            return {}
        rng = np.random.default_rng(self.seed)
        longest_prefix = max((r.prefix_len for r in rows), default=0)
        prefix = np.random.default_rng([self.seed, 1]).integers(0, self.spec.vocab_size, longest_prefix).tolist()
        return {r.request_id: prefix[:r.prefix_len] + rng.integers(0, self.spec.vocab_size,
                                                                   r.prompt_len - r.prefix_len).tolist()
                for r in rows}

    def _segment_prompts(self, rows: list[Request], segments) -> dict[int, list[int]]:
        """Token ids from a trace's token identities: requests that share a segment share its tokens."""
        if self.runner is None:
            return {}
        return {r.request_id: segment_token_ids(segments.request(i), self.spec.vocab_size, self.seed, r.prompt_len)
                for i, r in enumerate(rows)}

    def _streams(self, rows: list[Request], segments) -> dict[int, list[int]]:
        """A replay with prefix caching: every request's whole token stream, prompt and output, made even
        without the model (the block keys come from it). From the trace's token identities where it has them
        (a later chat round's prompt then holds an earlier round's output), else a random prompt as without
        the cache and a random output of its own. A request of one sequence is made to generate exactly its
        output (each token it feeds back is the stream's, not the one sampled: the work is the same), so its
        generated blocks are the blocks the stream's keys name, as the simulator assumes."""
        vocab, seed = self.spec.vocab_size, self.seed
        if segments is not None:
            return {r.request_id: segment_token_ids(segments.request(i), vocab, seed, r.prompt_len + r.output_len)
                    for i, r in enumerate(rows)}
        rng = np.random.default_rng(seed)
        longest_prefix = max((r.prefix_len for r in rows), default=0)
        prefix = np.random.default_rng([seed, 1]).integers(0, vocab, longest_prefix).tolist()
        return {r.request_id: prefix[:r.prefix_len] + rng.integers(0, vocab, r.prompt_len - r.prefix_len).tolist()
                + np.random.default_rng([seed, 3, r.request_id]).integers(0, vocab, r.output_len).tolist()
                for r in rows}

    # --- the serving loop: the control plane's step, timed by the runner ------------------
    def _run(self, requests: list[Request], prompts, sampling, time_fn,
             streams: dict[int, list[int]] | None = None) -> ServingRun:
        """streams (a replay with prefix caching, _streams): each request's prompt and the output it generates."""
        for request in requests:
            check_request(request, self.spec.max_seq_len, self.system)
        if self.system.prefix_caching:  # full blocks keyed by their token ids: the prompt's, or the whole stream's
            bs, streams = self.system.block_size, streams or {}
            requests = [replace(r, block_keys=token_block_keys(streams.get(r.request_id, prompts[r.request_id]), bs))
                        for r in requests]
        if len({r.request_id for r in requests}) != len(requests):
            raise ValueError("request ids must be unique")
        if self.runner is not None:
            self.runner.reset_sampler(self.seed)  # each run samples the same way
        if self.draft is not None:
            self.draft.reset(self.seed)
        if self.head is not None:
            self.head.reset()
        scheduler = make_scheduler(self.system, self.spec, self.num_gpu_blocks, self.num_cpu_blocks)
        pending = deque(sorted(requests, key=lambda r: (r.arrival_s, r.request_id)))
        run = ServingRun(ServingCore(scheduler), pending, prompts, streams=streams or {})
        run.core.records.speculating = self.system.speculative is not None  # proposed and accepted, per request
        while self._step(run, sampling, time_fn):
            pass
        run.core.close()
        self.records = ReplayResult.of(run.core.records, run.host_s, run.device_s)
        return run

    def _step(self, run: ServingRun, sampling: SamplingParams, time_fn) -> bool:
        """One iteration; False when every request is done."""
        started = time.perf_counter()
        self._admit_arrivals(run)
        step = run.core.start_step(run.clock)
        if step is None:
            self._apply_plans_only(run, run.core.idle_batch)
            if run.core.idle_preempted:  # what it preempted runs at the next schedule(), now
                return True
            if run.pending:  # idle: jump to the next arrival (the last completion's host work fits in the gap)
                run.clock = max(run.clock, run.pending[0].arrival_s)
                run.carried_host_s = 0.0
                return True
            run.core.check_schedulable()
            return False
        proposals, draft_probs, proposer_s = self._propose(run, step.batch, sampling)
        sampled, measured = self._execute(run, step.batch, sampling, proposals, draft_probs)
        self.last_proposer_s = proposer_s + self._follow(run, proposals, sampled)
        measured += self.last_proposer_s  # the proposer's forwards are the iteration's device work too
        forks = run.beam.take_forks() if step.batch.beam_groups else None  # the beam searches' choice
        # host work charged to this iteration: its admission, scheduling and inputs, and the previous
        # iteration's completion and records, which ran between the two forwards
        self.last_host_s = time.perf_counter() - started - measured + run.carried_host_s
        if time_fn is not None:
            run.clock += time_fn(step.batch)
        else:
            run.clock += measured + (self.last_host_s if self.clock == "step" else 0.0)
        answered = time.perf_counter()  # a time_fn may probe the machine: not the engine's work, not counted
        self._admit_arrivals(run)  # those arriving during the iteration wait, as in the simulator
        if forks:  # a child beam continues its parent's tokens, as the control plane gives it the parent's KV
            run.tokens.update({child: list(run.tokens[parent]) for child, parent in forks.items()})
        accepted = self._accepted(step.batch, proposals, run)
        if self.draft is not None:
            self.draft.kept(step.batch, accepted)
        for seq_id, token in sampled.items():
            forced = run.forced.get(seq_id)
            run.tokens[seq_id].append(token if forced is None else forced[len(run.tokens[seq_id])])
        for group in run.core.end_step(step, run.clock, forks, accepted):
            self._finish(run, group)
        run.host_s.append(self.last_host_s)
        run.device_s.append(self.runner.last_timing.device_s if self.runner is not None else 0.0)
        run.carried_host_s = time.perf_counter() - answered
        return True

    def _admit_arrivals(self, run: ServingRun) -> None:
        while run.pending and run.pending[0].arrival_s <= run.clock:
            group = run.core.admit(run.pending.popleft())
            if self.runner is not None:
                for seq in group.seqs:
                    run.tokens[seq.seq_id] = list(run.prompts[group.request_id])
                stream = run.streams.get(group.request_id)
                if stream is not None and group.num_seqs == 1:  # it generates its stream's output (_streams)
                    run.forced[group.seqs[0].seq_id] = stream
                if group.is_beam:
                    run.beam.start(s.seq_id for s in group.seqs)

    def _propose(self, run: ServingRun, batch: Batch, sampling: SamplingParams
                 ) -> tuple[dict[int, list[int]], dict[int, torch.Tensor] | None, float]:
        """Each speculating decode's proposals, the draft's distributions of them (a draft sampling at random) and
        the seconds the proposer took. A draft or a head runs every iteration: it moves its KV with the target's
        (and a draft computes its KV of whatever the target does)."""
        if self.draft is not None:
            drafted = self.draft.propose(batch, run.tokens, run.core.scheduler.block_table, sampling, run.forced)
            return drafted.tokens, drafted.probs, drafted.seconds
        if self.head is not None:
            headed = self.head.propose(batch, run.core.scheduler.block_table, run.tokens, run.forced)
            return headed.tokens, None, headed.seconds
        if self.runner is not None and any(batch.decode_proposed):
            return ngram_proposals(batch, run.tokens, run.forced), None, 0.0
        return {}, None, 0.0

    def _follow(self, run: ServingRun, proposals: dict[int, list[int]], sampled: dict[int, int]) -> float:
        """An EAGLE or MTP head's forward over what the target just computed and kept (its seconds): each
        sequence's tokens then are its kept proposals and its sampled token (its stream's, when made to generate
        one) after the ones it had; a prompt's chunk that samples nothing has its prompt's."""
        if self.head is None or self.runner is None:
            return 0.0
        kept = self.runner.last_accepted

        def tokens_of(seq_id: int) -> list[int]:
            tokens = run.tokens[seq_id]
            if seq_id not in sampled:
                return tokens
            tokens = tokens + proposals.get(seq_id, [])[:kept.get(seq_id, 0)]
            forced = run.forced.get(seq_id)
            return tokens + [sampled[seq_id] if forced is None else forced[len(tokens)]]
        return self.head.follow(self.runner.last_inputs, self.runner.last_hidden, tokens_of, kept,
                                run.core.scheduler.block_table)

    def _execute(self, run: ServingRun, batch: Batch, sampling, proposals: dict[int, list[int]],
                 draft_probs: dict[int, torch.Tensor] | None = None) -> tuple[dict[int, int], float]:
        if self.runner is None:  # control plane only: every beam continues itself
            return {}, 0.0
        extra: dict = {"beam": run.beam} if batch.beam_groups else {}
        if proposals:
            extra.update(proposals=proposals, draft_probs=draft_probs)
        return self.runner.execute(batch, run.tokens, run.core.scheduler.block_table, sampling, **extra)

    def _accepted(self, batch: Batch, proposals: dict[int, list[int]], run: ServingRun) -> list[int] | None:
        """Each decode's proposals the verify kept (decode_seq_ids' order), now the sequence's tokens (before its
        own sampled token); None where nothing was proposed, or nothing measured (no model: none kept)."""
        if not proposals:
            return None
        kept = self.runner.last_accepted if self.runner is not None else {}
        for seq_id, proposal in proposals.items():
            run.tokens[seq_id].extend(proposal[:kept[seq_id]])
        return [kept.get(seq_id, 0) for seq_id in batch.decode_seq_ids]

    def _apply_plans_only(self, run: ServingRun, batch: Batch | None) -> None:
        # a batch can preempt by swapping and run nothing; the KV must still move, or the
        # later swap-in brings back garbage. Untimed, as the simulator charges it nothing.
        if self.runner is None or batch is None:
            return
        if batch.blocks_to_swap_out or batch.blocks_to_swap_in or batch.blocks_to_copy:
            self.runner.execute(batch, run.tokens, run.core.scheduler.block_table)
            if self.draft is not None:  # the draft's KV moves with the target's
                self.draft.apply_block_plans(batch)
            if self.head is not None:  # and so does a head's
                self.head.apply_block_plans(batch)

    def _finish(self, run: ServingRun, group: SequenceGroup) -> None:
        if self.runner is None:
            return
        run.outputs[group.request_id] = [run.tokens.pop(s.seq_id)[group.prompt_len:] for s in group.seqs]
        for seq in group.seqs:
            run.forced.pop(seq.seq_id, None)
        if self.head is not None:
            self.head.forget(s.seq_id for s in group.seqs)
        if group.is_beam:
            run.beam_scores[group.request_id] = run.beam.pop_scores(s.seq_id for s in group.seqs)
