"""Executes one Batch against the paged KV cache, samples, and times it.

An iteration reads the device once: its inputs go up without a sync (engine/runtime/inputs.py upload),
the forward (a CUDA graph's replay for a batch of decodes, engine/runtime/graphs.py; eager otherwise),
the sampling and the beam scores run on the device, and every chosen token id (and beam score) comes
back in one copy. Its time is kept three ways (engine/runtime/timing.py): the timed step, the span of
its device work, and its wall time; `last_timing` holds the last iteration's.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from engine.core.batch import Batch
from engine.core.blocks import blocks_for
from engine.core.spec import ModelSpec
from engine.kernels.backend import BACKENDS, resolve_backend
from engine.runtime.beam import BeamBatch, BeamSearch
from engine.runtime.cache import (
    DEFAULT_MEMORY_FRACTION,
    PagedKVCache,
    default_swap_blocks,
    kv_pool_blocks_that_fit,
)
from engine.runtime.graphs import MAX_GRAPH_BATCH, DecodeGraphs, resolve_cuda_graphs
from engine.runtime.inputs import BlockTableFn, HostInputs, PoolLimits, build_inputs, upload
from engine.runtime.model import Decoder, build_decoder
from engine.runtime.sampler import Sampler, SamplingParams
from engine.runtime.timing import DeviceSpan, IterationTimer, IterationTiming

DTYPES = {"float32": torch.float32, "fp32": torch.float32, "float16": torch.float16,
          "fp16": torch.float16, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16}
LogitsHook = Callable[[list[tuple[int, ...]], torch.Tensor], None]


def resolve_device(device: torch.device | str) -> torch.device:
    device = torch.device(device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {device} requested but CUDA is not available; use device='cpu'")
    if device.type == "cuda" and device.index is None:  # tensors report cuda:0, not cuda
        device = torch.device("cuda", torch.cuda.current_device())
    if device.type not in ("cpu", "cuda"):
        raise ValueError(f"unsupported device {device}; use 'cpu' or 'cuda[:i]'")
    return device


def resolve_dtype(dtype: torch.dtype | str | None, device: torch.device) -> torch.dtype:
    """fp32 on CPU, fp16 on CUDA unless told otherwise."""
    if dtype is None:
        return torch.float16 if device.type == "cuda" else torch.float32
    if isinstance(dtype, str):
        if dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {dtype!r}")
        return DTYPES[dtype]
    if dtype not in DTYPES.values():
        raise ValueError(f"dtype must be float32, float16 or bfloat16, got {dtype}")
    return dtype


def check_model_placement(model: Decoder, spec: ModelSpec, device: torch.device, dtype: torch.dtype) -> None:
    if model.spec != spec:
        raise ValueError(f"model is {model.spec.name} but the runner was given spec {spec.name}")
    if model.dtype != dtype:
        raise ValueError(f"mismatched dtypes: model weights are {model.dtype}, runner dtype is {dtype}")
    if model.device != device:
        raise ValueError(f"mismatched devices: model weights on {model.device}, runner device is {device}")


@dataclass
class SamplePlan:
    """Who is sampled how in one iteration, planned on the host before the forward."""

    ids: list[int]  # sequences chosen by the sampling parameters, in order
    rows: list[int]  # the logits row of each
    beams: list[BeamBatch]  # the beam searches' groups
    beam_rows: list[int]
    beam_scores: list[float]
    verify_ids: list[int]  # speculating decodes, verified (their logits rows follow the sampled ones')
    verify_proposed: list[int]


@dataclass
class StagedStep:
    """An iteration's inputs on the device (uploaded without a sync) and the forward that reads them."""

    forward: Callable[[], torch.Tensor]  # -> logits of every sampled row
    rows: torch.Tensor
    beam_rows: torch.Tensor
    beam_scores: torch.Tensor
    verify: VerifyInputs | None  # speculating decodes: their rows, proposals and counts, padded to the widest


@dataclass
class VerifyInputs:
    """The verify's tensors: rows[b, i] is the logits row of sequence b's position i (its last row repeated past
    its own proposals), proposals[b] its proposals (padded), proposed[b] how many; draft_probs[b, i] the
    distribution a draft model drew proposal i from (zeros past its own; None: a deterministic proposer)."""

    rows: torch.Tensor
    proposals: torch.Tensor
    proposed: torch.Tensor
    draft_probs: torch.Tensor | None = None


def verify_inputs(host: HostInputs, proposals: dict[int, list[int]], device: torch.device,
                  draft_probs: dict[int, torch.Tensor] | None = None) -> VerifyInputs | None:
    if not host.verify_ids:
        return None
    widest = max(host.verify_proposed)
    rows, padded, first = [], [], len(host.sample_ids)
    for seq_id, count in zip(host.verify_ids, host.verify_proposed):
        rows.append([first + min(i, count) for i in range(widest + 1)])
        padded.append(proposals[seq_id] + [0] * (widest - count))
        first += count + 1
    return VerifyInputs(upload(rows, torch.int64, device), upload(padded, torch.int64, device),
                        upload(host.verify_proposed, torch.int64, device),
                        _padded_probs([draft_probs[s] for s in host.verify_ids], widest) if draft_probs else None)


def _padded_probs(probs: list[torch.Tensor], widest: int) -> torch.Tensor:
    """[B, widest, V]: each sequence's draft distributions, zeros past its own (never kept, never read)."""
    out = probs[0].new_zeros(len(probs), widest, probs[0].shape[-1])
    for b, rows in enumerate(probs):
        out[b, :rows.shape[0]] = rows
    return out


class ModelRunner:
    """A decoder, its paged KV cache and a sampler on one device.

    Block ids in batches and block tables are the scheduler's; the cache has exactly
    num_gpu_blocks device blocks and num_cpu_blocks host blocks. num_gpu_blocks=None sizes
    the pool to the free device memory left after the weights are loaded; num_cpu_blocks=None
    gives the host swap pool engine.runtime.cache.default_swap_blocks.

    cuda_graphs: decode batches of up to max_graph_batch sequences replay a CUDA graph captured per
    batch-size bucket (on first use, or all at once with capture_graphs); None: on where it can run
    (CUDA with the Triton kernels). `cuda_graphs_note` says which mode runs and why.

    keep_hidden: every forward keeps its tokens' last hidden states (`last_hidden`, rows as
    `last_inputs` lays them out) for an EAGLE or MTP head; decodes then run eagerly (a graph's replay
    keeps none).
    """

    def __init__(self, spec: ModelSpec, device: torch.device | str = "cpu",
                 dtype: torch.dtype | str | None = None, seed: int = 0,
                 num_gpu_blocks: int | None = None, num_cpu_blocks: int | None = 0, block_size: int = 16, *,
                 attention_backend: str = "auto", cpu_budget_bytes: int | None = None,
                 memory_fraction: float = DEFAULT_MEMORY_FRACTION, model: Decoder | None = None,
                 cuda_graphs: bool | None = None, max_graph_batch: int = MAX_GRAPH_BATCH, keep_hidden: bool = False):
        self.spec = spec
        self.device = resolve_device(device)
        self.dtype = resolve_dtype(dtype, self.device)
        if attention_backend not in BACKENDS:
            raise ValueError(f"attention_backend must be one of {BACKENDS}, got {attention_backend!r}")
        kernels = resolve_backend(attention_backend, self.device)  # fails now if Triton cannot run here
        self.attention_backend = attention_backend
        if not isinstance(max_graph_batch, int) or max_graph_batch < 1:
            raise ValueError(f"max_graph_batch must be a positive integer, got {max_graph_batch!r}")
        graphs_on, self.cuda_graphs_note = resolve_cuda_graphs(cuda_graphs, self.device, kernels, moe=spec.is_moe,
                                                               keeps_hidden=keep_hidden)
        if model is None:
            model = build_decoder(spec, self.device, self.dtype, seed)
        check_model_placement(model, spec, self.device, self.dtype)
        self.model = model
        if num_gpu_blocks is None:
            num_gpu_blocks = kv_pool_blocks_that_fit(spec, block_size, self.dtype, self.device,
                                                     memory_fraction=memory_fraction,
                                                     cpu_budget_bytes=cpu_budget_bytes)
        if num_cpu_blocks is None:
            num_cpu_blocks = default_swap_blocks(spec, block_size, self.dtype, num_gpu_blocks)
        self.cache = PagedKVCache(spec, num_gpu_blocks, num_cpu_blocks, block_size, self.device,
                                  self.dtype, cpu_budget_bytes=cpu_budget_bytes, backend=attention_backend)
        self.sampler = Sampler(self.device, seed)
        self.limits = PoolLimits(spec.vocab_size, spec.max_seq_len, block_size, num_gpu_blocks)
        self.logits_hook: LogitsHook | None = None  # sees (sample_ids, logits) before sampling
        self.graphs: DecodeGraphs | None = None
        if graphs_on:
            width = blocks_for(spec.max_seq_len, block_size)
            self.graphs = DecodeGraphs(self.model, self.cache.layers, max_graph_batch, width, attention_backend)
        self.last_timing = IterationTiming(0.0, 0.0, 0.0)
        self.last_accepted: dict[int, int] = {}  # the last iteration's speculating decodes: proposals kept
        self.keep_hidden = keep_hidden
        self.last_inputs: HostInputs | None = None  # the last iteration's inputs
        self.last_hidden: torch.Tensor | None = None  # with keep_hidden, its forward's hidden states

    @property
    def cuda_graphs(self) -> bool:
        """Whether batches of decodes replay CUDA graphs here."""
        return self.graphs is not None

    def capture_graphs(self) -> None:
        """Capture every bucket's decode graph now (a server does it at start-up), not on first use."""
        if self.graphs is not None:
            self.graphs.capture_all()

    def reset_sampler(self, seed: int) -> None:
        """Restart the random-sampling stream: a run that starts here draws the same tokens."""
        self.sampler = Sampler(self.device, seed)

    @property
    def block_size(self) -> int:
        return self.cache.block_size

    @property
    def num_gpu_blocks(self) -> int:
        return self.cache.num_gpu_blocks

    @property
    def num_cpu_blocks(self) -> int:
        return self.cache.num_cpu_blocks

    # --- one iteration ------------------------------------------------------------
    def execute(self, batch: Batch, tokens: dict[int, list[int]], block_table_fn: BlockTableFn,
                sampling: SamplingParams | str = "greedy", *, beam: BeamSearch | None = None,
                proposals: dict[int, list[int]] | None = None,
                draft_probs: dict[int, torch.Tensor] | None = None) -> tuple[dict[int, int], float]:
        """Run `batch`; returns the sampled token of every sampled sequence and the seconds it took.

        tokens[seq_id] is the sequence's whole token list (prompt + generated), as long as
        the batch says. Everything is validated before any block plan or cache write runs.
        Timed: the inputs copied to the device, block plans, forward and sampling (not the host-side checks); the
        iteration's device span and wall time are kept in `last_timing`.
        The batch's beam searches (batch.beam_groups) choose their tokens in `beam`, which then
        holds their forks; `sampling` does not apply to them (beam search is temperature 0).
        proposals: speculative decoding, the tokens each speculating decode proposes (batch.decode_proposed of
        them); the target verifies them, its token after those it keeps is the sequence's sampled token, and how
        many it kept is in `last_accepted`. draft_probs: a draft model's distributions of them (random sampling;
        None: the proposer is deterministic).
        """
        started = time.perf_counter()
        if isinstance(sampling, str):
            sampling = SamplingParams(sampling)
        if batch.beam_groups and beam is None:
            raise ValueError("the batch holds beam searches (beam_groups): pass the run's BeamSearch")
        host = build_inputs(batch, tokens, block_table_fn, self.limits, proposals)
        self.last_inputs, self.last_hidden = host, None
        self.cache.check_block_plans(batch.blocks_to_swap_out, batch.blocks_to_swap_in, batch.blocks_to_copy)
        plan = self._plan(host, batch.beam_groups, beam)
        span = DeviceSpan(self.device)
        with IterationTimer(self.device) as timer:
            with torch.inference_mode():
                # None: block plans alone
                staged = self._stage(host, plan, proposals or {}, draft_probs) if host.input_ids else None
                span.start()
                self._apply_block_plans(batch)
                chosen = self._forward_and_choose(host, staged, plan, sampling, beam) if staged else None
                span.stop()
            values = chosen.tolist() if chosen is not None else []  # the iteration's one read of the device
        sampled = self._sampled(plan, values, beam)
        self.last_timing = IterationTiming(timer.seconds, span.seconds, time.perf_counter() - started)
        return sampled, timer.seconds

    def _apply_block_plans(self, batch: Batch) -> None:
        # out before in: a block freed by a swap-out may be the target of a swap-in
        self.cache.swap_out(batch.blocks_to_swap_out)
        self.cache.swap_in(batch.blocks_to_swap_in)
        self.cache.copy(batch.blocks_to_copy)

    def _plan(self, host: HostInputs, beam_groups: list[tuple[int, ...]], beam: BeamSearch | None) -> SamplePlan:
        in_beams = {seq_id for ids in beam_groups for seq_id in ids} if beam is not None else set()
        ids, rows = [], []
        for r, group in enumerate(host.sample_ids):
            for seq_id in group:
                if seq_id not in in_beams:
                    ids.append(seq_id)
                    rows.append(r)
        beams, beam_rows, beam_scores = beam.plan(host.sample_ids, beam_groups) if in_beams else ([], [], [])
        return SamplePlan(ids, rows, beams, beam_rows, beam_scores, host.verify_ids, host.verify_proposed)

    def _stage(self, host: HostInputs, plan: SamplePlan, proposals: dict[int, list[int]],
               draft_probs: dict[int, torch.Tensor] | None = None) -> StagedStep:
        """Host work and uploads, before the device span starts: the inputs, and the forward that reads them."""
        device = self.device
        if self.graphs is not None and self.graphs.serves(host):
            bucket = self.graphs.prepare(host)
            num = len(host.context_lens)

            def forward() -> torch.Tensor:
                return self.graphs.replay(bucket)[:num]
        else:
            input_ids, positions, meta, logit_rows = host.to_device(device, self.attention_backend)

            def forward() -> torch.Tensor:
                hidden = self.model(input_ids, positions, meta, self.cache.layers)
                if self.keep_hidden:
                    self.last_hidden = hidden
                return self.model.logits(hidden[logit_rows])
        return StagedStep(forward, upload(plan.rows, torch.int64, device), upload(plan.beam_rows, torch.int64, device),
                          upload(plan.beam_scores, torch.float64, device),
                          verify_inputs(host, proposals, device, draft_probs))

    def _forward_and_choose(self, host: HostInputs, staged: StagedStep, plan: SamplePlan,
                            sampling: SamplingParams, beam: BeamSearch | None) -> torch.Tensor:
        """Device work only: the forward, then every token (and beam score) chosen, in one tensor."""
        logits = staged.forward()
        if self.logits_hook is not None:  # a copy: a graph's logits are its static output, rewritten next replay
            self.logits_hook(host.sample_ids, logits.clone())
        # no draw at all when only beams are sampled: the random stream stays where it was
        chosen = (self.sampler.choose(logits, staged.rows, sampling) if plan.ids
                  else torch.zeros(0, dtype=torch.int64, device=logits.device))
        if staged.verify is not None:  # each speculating decode's kept count and its token after them
            verify = staged.verify
            accepted, token = self.sampler.verify(logits[verify.rows], verify.proposals, verify.proposed, sampling,
                                                  verify.draft_probs, self.attention_backend)
            chosen = torch.cat([chosen, accepted, token])
        if not plan.beams or beam is None:
            return chosen
        # token ids are exact in float64 (< 2**53): one tensor, one copy back
        return torch.cat([chosen.double(), beam.launch(logits, plan.beams, staged.beam_rows, staged.beam_scores)])

    def _sampled(self, plan: SamplePlan, values: list, beam: BeamSearch | None) -> dict[int, int]:
        sampled = {seq_id: int(v) for seq_id, v in zip(plan.ids, values)}
        done, verified = len(plan.ids), len(plan.verify_ids)
        kept, tokens = values[done:done + verified], values[done + verified:done + 2 * verified]
        self.last_accepted = {seq_id: int(v) for seq_id, v in zip(plan.verify_ids, kept)}
        sampled.update({seq_id: int(v) for seq_id, v in zip(plan.verify_ids, tokens)})
        if plan.beams and beam is not None:
            sampled.update(beam.finish(values[done + 2 * verified:]))
        return sampled

    # --- synthetic batches, for the profiler --------------------------------------
    def time_batch(self, prefill_lens: list[int], decode_context_lens: list[int], repeats: int = 3, *,
                   warmup: int = 1, num_swap_blocks: int = 0, scattered_swaps: bool = False) -> list[float]:
        """Seconds per run of a batch of these shapes (fake tokens, disjoint block tables).

        num_swap_blocks adds that many blocks swapped out and as many swapped in: neighbours moved to
        neighbours (one copy per layer's K and V), or with `scattered_swaps` in reversed order, so that
        every block is a copy of its own, as a swap of blocks scattered over the pools is.
        """
        return [t.seconds for t in self.time_batch_split(prefill_lens, decode_context_lens, repeats, warmup=warmup,
                                                         num_swap_blocks=num_swap_blocks,
                                                         scattered_swaps=scattered_swaps)]

    def time_batch_split(self, prefill_lens: list[int], decode_context_lens: list[int], repeats: int = 3, *,
                         warmup: int = 1, num_swap_blocks: int = 0,
                         scattered_swaps: bool = False) -> list[IterationTiming]:
        """time_batch, each run's time kept three ways: the timed step, its device span and its wall time."""
        batch, tokens, tables = self.synthetic_batch(prefill_lens, decode_context_lens, num_swap_blocks,
                                                     scattered_swaps)
        timings = []
        for i in range(warmup + repeats):
            self.execute(batch, tokens, tables.__getitem__)
            if i >= warmup:
                timings.append(self.last_timing)
        return timings

    def synthetic_batch(self, prefill_lens: list[int], decode_context_lens: list[int],
                        num_swap_blocks: int = 0, scattered_swaps: bool = False
                        ) -> tuple[Batch, dict[int, list[int]], dict[int, list[int]]]:
        lengths = list(prefill_lens) + list(decode_context_lens)
        needed = [blocks_for(n, self.block_size) for n in lengths]
        if sum(needed) > self.num_gpu_blocks:
            raise ValueError(f"the batch needs {sum(needed)} KV blocks but the pool has {self.num_gpu_blocks}")
        if num_swap_blocks > min(self.num_gpu_blocks, self.num_cpu_blocks):
            raise ValueError(f"num_swap_blocks {num_swap_blocks} exceeds the device pool "
                             f"({self.num_gpu_blocks}) or the host pool ({self.num_cpu_blocks})")
        tables, next_block = {}, 0
        for seq_id, n in enumerate(needed):
            tables[seq_id] = list(range(next_block, next_block + n))
            next_block += n
        # token values do not change the cost; any in-vocabulary pattern will do
        tokens = {s: [(s + j) % self.spec.vocab_size for j in range(n)] for s, n in enumerate(lengths)}
        num_prefills = len(prefill_lens)
        last = num_swap_blocks - 1
        swaps = [(last - b if scattered_swaps else b, b) for b in range(num_swap_blocks)]
        batch = Batch(prefill_seq_ids=list(range(num_prefills)), prefill_lens=list(prefill_lens),
                      prefill_sample_ids=[(s,) for s in range(num_prefills)],
                      decode_seq_ids=list(range(num_prefills, len(lengths))),
                      decode_context_lens=list(decode_context_lens),
                      blocks_to_swap_out=swaps, blocks_to_swap_in=swaps,
                      num_running_groups=len(lengths))
        return batch, tokens, tables
