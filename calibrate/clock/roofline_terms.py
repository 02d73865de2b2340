"""The roofline's arithmetic per iteration, on floats: what the simulator asks of its clock at every step.

RooflineCostModel (roofline.py) works out its constants once and binds them here; this module is compiled by
mypyc with the control plane (setup.py), so that pricing a step costs C arithmetic on doubles rather than
the interpreter's. Its operations are those of RooflineCostModel._time, in the same order, on the same IEEE
doubles, so compiled and pure Python give the same floats, and both the same as the array expression a long
decode stretch is priced with (tests/calibrate/test_iteration_time_fast_path.py).
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from engine.core.batch import ShapeMetrics

QUERY_ROWS_PER_BLOCK = 64  # calibrate/parts/attention_mixed.py's: the mixed launch's query rows a block


class MixedTerms:
    """A mixed step's decodes in its one launch (calibrate/parts/attention_mixed.py), all layers, on floats: the
    operations of calibrate/clock/mixed_pricing.reference_mixed_decode in the same order (a test holds them equal to
    the bit). s_per_reread_token 0: no rereads past the L2 are charged."""

    def __init__(self, latency: float, s_per_wave: float, s_per_empty_block: float, s_per_block_token: float,
                 s_per_reread_token: float, miss_tokens: float, q_heads: int, group: float, sm_count: int,
                 blocks_per_sm: int, floors: Sequence[float]):
        self.latency = latency
        self.s_per_wave = s_per_wave
        self.s_per_empty_block = s_per_empty_block
        self.s_per_block_token = s_per_block_token
        self.s_per_reread_token = s_per_reread_token
        self.miss_tokens = miss_tokens
        self.q_heads = q_heads
        self.group = group
        self.sm_count = sm_count
        self.blocks_per_sm = blocks_per_sm
        self.floors = list(floors)

    def launch(self, num_decodes: int, prefill_lens: Sequence[int]) -> tuple[float, float, float]:
        """(blocks' worth of stream, the launch's latencies, the group's rounds) of num_decodes decodes beside the
        prefills: what a decode stretch keeps from step to step."""
        slots = self.sm_count * self.blocks_per_sm
        blocks = num_decodes * self.q_heads
        waves = -(-blocks // slots)
        tail = blocks - (waves - 1) * slots
        busiest = min(-(-tail // self.sm_count), self.blocks_per_sm)
        equivalent = (waves - 1) * max(float(slots), self.floors[-1]) + max(float(tail), self.floors[busiest - 1])
        sequences = num_decodes + len(prefill_lens)
        query_blocks = -(-max(prefill_lens) // QUERY_ROWS_PER_BLOCK)
        used = sum([-(-n // QUERY_ROWS_PER_BLOCK) for n in prefill_lens]) + num_decodes
        empty = (query_blocks * sequences - used) * self.q_heads
        latency = self.latency + waves * self.s_per_wave + empty * self.s_per_empty_block
        rounds = min(max(self.group * sequences / slots, 1.0), self.group)
        return equivalent, latency, rounds

    def decode(self, sum_decode_context: int, num_decodes: int, launch: tuple[float, float, float]) -> float:
        """The decodes' seconds at this context sum, given their launch (MixedTerms.launch)."""
        equivalent, latency, rounds = launch
        mean = sum_decode_context / num_decodes
        t = equivalent * mean * self.s_per_block_token + latency
        if self.s_per_reread_token and mean > self.miss_tokens:
            t = t + sum_decode_context * (rounds - 1.0) * self.s_per_reread_token
        return t


def mixed_launch(num_decodes: int, prefill_lens: Sequence[int]) -> bool:
    """Whether an iteration's attention is a mixed launch: decodes beside a prefill of more than one token (a launch
    whose every query is one token long is the split decode kernel's, calibrate/parts/attention_waves.py)."""
    return num_decodes > 0 and len(prefill_lens) > 0 and max(prefill_lens) > 1


class RooflineTerms:
    """Seconds per token, per sequence, per block and per iteration of one roofline, and the sums over a batch."""

    def __init__(self, s_per_token_linear: float, s_per_logit_row: float, s_weights: float, ridge_p: float,
                 s_per_context_token: float, s_per_decode_block: float, s_per_prompt_sq: float,
                 s_per_copied_block: float, overhead_s: float, s_per_token_comm: float, s_comm_fixed: float,
                 comm_time: Callable[[int], float] | None,
                 kernels: bool, s_kernels_fixed: float, s_per_token_kernels: float, charge_host: bool,
                 host_per_iteration: float, host_per_sequence: float, host_per_prefill_token: float,
                 fitted: bool = False, decode_latency: float = 0.0, s_per_prefill_pair: float = 0.0,
                 s_per_prefill_kv_token: float = 0.0, s_per_prefill_token: float = 0.0, prefill_latency: float = 0.0,
                 wave_launch: Callable[[int], tuple[int, int, float]] | None = None, wave_heads: int = 0,
                 wave_tile: int = 0, wave_sm_count: int = 0, wave_blocks_per_sm: int = 0,
                 wave_floors: Sequence[float] = (), s_per_head_token: float = 0.0, num_experts: int = 1,
                 experts_per_token: int = 1, s_per_expert_read: float = 0.0, s_per_expert_kernels: float = 0.0,
                 gathered_ranks: int = 1, expert_degree: int = 1, dispatch: bool = False,
                 s_per_token_dispatch: float = 0.0, s_dispatch_fixed: float = 0.0,
                 fp8_gemms: Sequence[tuple[float, float, float, float]] = (), fp8_layers: int = 0,
                 fp8_latency: float = 0.0, fp8_ridge_p: float = math.inf, s_head_weights: float = 0.0,
                 mixed: MixedTerms | None = None):
        """The tensor-parallel all-reduces: comm_time(tokens), their measured seconds; else (None) the ring
        formula's tokens * s_per_token_comm + s_comm_fixed (0 on one GPU). `fitted`: attention as a measured
        fit prices it (calibrate/parts/attention_fit.py): the decodes' context at s_per_context_token plus
        decode_latency where there are decodes, each prefill's new-by-key pairs, K/V tokens and new tokens plus
        prefill_latency where there are prefills, and the per-block term where one is charged (s_per_decode_block).
        `wave_launch`: decode attention in waves (calibrate/parts/attention_waves.py) instead, its launch per batch size
        (splits, tiles per split, latencies) and the grid's numbers beside it. `num_experts` > 1: a mixture of
        experts, whose weights read add s_per_expert_read per distinct expert the batch is expected to route to
        (calibrate/work/expert_routing.py's formula, written out here as RooflineCostModel.weights_time computes
        it), and with measured kernels s_per_expert_kernels of their latencies per such expert
        (calibrate/parts/expert_ops.py). Under expert parallelism (calibrate/work/expert_parallel.py) those experts
        are this GPU's own of the gathered_ranks ranks' tokens, 1 / expert_degree of the group's; `dispatch`: the
        ranks' all-gather and reduce-scatter, tokens * s_per_token_dispatch + s_dispatch_fixed
        (calibrate/parts/expert_dispatch.py).
        `fp8_layers` > 0: the decoder's W8A8 matmuls GEMM by GEMM as
        calibrate/parts/fp8_decoder.Fp8Decoder.time prices them (each of `fp8_gemms` its compute per token, weight
        read, bytes per token and quantization per token; fp8_latency and fp8_ridge_p shared), and the LM head apart
        under the 16-bit roof (s_per_logit_row, s_head_weights, ridge_p). `mixed`: a mixed step's decodes as
        their one launch prices them, in place of their decode part (calibrate/parts/attention_mixed.py)."""
        self.s_per_token_linear = s_per_token_linear
        self.s_per_logit_row = s_per_logit_row
        self.s_weights = s_weights
        self.ridge_p = ridge_p
        self.s_per_context_token = s_per_context_token
        self.s_per_decode_block = s_per_decode_block
        self.s_per_prompt_sq = s_per_prompt_sq
        self.s_per_copied_block = s_per_copied_block
        self.overhead_s = overhead_s
        self.s_per_token_comm = s_per_token_comm
        self.s_comm_fixed = s_comm_fixed
        self.comm_time = comm_time
        # a measured all-reduce is a table lookup in Python: each token count a run meets is priced once, the same
        # float every later time (a batch's token count repeats across a run's thousands of iterations)
        self.comm_seconds: dict[int, float] = {}
        # whether an iteration pays for all-reduces at all (measured, or the ring formula with a term not 0)
        self.has_comm = comm_time is not None or bool(s_per_token_comm or s_comm_fixed)
        self.kernels = kernels
        self.s_kernels_fixed = s_kernels_fixed
        self.s_per_token_kernels = s_per_token_kernels
        self.charge_host = charge_host
        self.host_per_iteration = host_per_iteration
        self.host_per_sequence = host_per_sequence
        self.host_per_prefill_token = host_per_prefill_token
        self.fitted = fitted
        self.decode_latency = decode_latency
        self.s_per_prefill_pair = s_per_prefill_pair
        self.s_per_prefill_kv_token = s_per_prefill_kv_token
        self.s_per_prefill_token = s_per_prefill_token
        self.prefill_latency = prefill_latency
        self.wave_launch = wave_launch
        self.wave_heads = wave_heads
        self.wave_tile = wave_tile
        self.wave_sm_count = wave_sm_count
        self.wave_blocks_per_sm = wave_blocks_per_sm
        self.wave_floors = list(wave_floors)
        self.wave_equivalents: dict[int, float] = {}  # wave_tokens_float's, by the blocks of a launch
        self.s_per_head_token = s_per_head_token
        self.num_experts = num_experts
        self.experts_per_token = experts_per_token
        self.s_per_expert_read = s_per_expert_read
        self.s_per_expert_kernels = s_per_expert_kernels
        self.gathered_ranks = gathered_ranks
        self.expert_degree = expert_degree
        self.dispatch = dispatch
        self.s_per_token_dispatch = s_per_token_dispatch
        self.s_dispatch_fixed = s_dispatch_fixed
        self.fp8_gemms = list(fp8_gemms)
        self.fp8_layers = fp8_layers
        self.fp8_latency = fp8_latency
        self.fp8_ridge_p = fp8_ridge_p
        self.s_head_weights = s_head_weights
        self.mixed = mixed

    def expected_experts(self, tokens: int) -> float:
        """The distinct experts a layer is expected to run on this GPU for `tokens` tokens (RooflineCostModel.
        experts_run's float: expected_experts_read over every rank's tokens, this GPU's share of them; one rank
        of one share without expert parallelism, and x / 1 is x)."""
        unread = (1.0 - self.experts_per_token / self.num_experts) ** float(self.gathered_ranks * tokens)
        return self.num_experts * (1.0 - unread) / self.expert_degree

    def dispatch_time(self, tokens: int) -> float:
        """Expert parallelism's all-gather and reduce-scatter (DispatchCost.seconds' float)."""
        return tokens * self.s_per_token_dispatch + self.s_dispatch_fixed

    def kernel_time(self, tokens: int) -> float:
        """The measured kernels beyond the matmul term (RooflineCostModel.kernels_time's float)."""
        if self.s_per_expert_kernels:
            fixed = self.s_kernels_fixed + self.expected_experts(tokens) * self.s_per_expert_kernels
            return fixed + tokens * self.s_per_token_kernels
        return self.s_kernels_fixed + tokens * self.s_per_token_kernels

    def matmul_time(self, tokens: int, logit_rows: int) -> float:
        """The linear layers and the LM head (on logit_rows): their compute and their weights' reads under one bent
        roof (bent_roof, as _time computes it; the hard max at p = inf, both taking the larger then)."""
        if self.fp8_layers:
            return self.fp8_matmul_time(tokens, logit_rows)
        compute = tokens * self.s_per_token_linear + logit_rows * self.s_per_logit_row
        weights = self.s_weights
        if self.num_experts > 1:
            weights = weights + self.expected_experts(tokens) * self.s_per_expert_read
        if compute > weights:
            big, small = compute, weights
        else:
            big, small = weights, compute
        p = self.ridge_p
        return big if p == math.inf or small <= 0.0 else big * (1.0 + (small / big) ** p) ** (1.0 / p)

    def fp8_matmul_time(self, tokens: int, logit_rows: int) -> float:
        """The decoder's FP8 GEMMs and the 16-bit LM head (RooflineCostModel.matmul_time's float with FP8 GEMMs)."""
        head = logit_rows * self.s_per_logit_row
        layer = 0.0
        for per_token_compute, weights, per_token_bytes, per_token_quant in self.fp8_gemms:
            compute = tokens * per_token_compute
            memory = weights + tokens * per_token_bytes
            layer = layer + (self.fp8_latency + bent(compute, memory, self.fp8_ridge_p)) + tokens * per_token_quant
        return self.fp8_layers * layer + bent(head, self.s_head_weights, self.ridge_p)

    def iteration_time(self, batch: ShapeMetrics, num_copy_blocks: int, block_size: int) -> float:
        """One iteration's seconds (RooflineCostModel.reference_iteration_time's float); num_copy_blocks: the
        batch's (a Batch's property, a BatchShape's field)."""
        tokens = batch.num_tokens
        num_seqs = batch.num_seqs
        matmuls = self.matmul_time(tokens, batch.num_logit_rows)
        if self.fitted:
            attention = self.fitted_attention(batch)
            if self.s_per_decode_block and batch.num_decodes:
                attention = attention + batch.decode_blocks(block_size) * self.s_per_decode_block
        else:
            cached = batch.sum_prefill_cached
            sum_decode_context = batch.sum_decode_context
            kv_read = sum_decode_context + cached if cached else sum_decode_context
            attention = kv_read * self.s_per_context_token
            if self.s_per_decode_block and batch.num_decodes:
                attention = attention + batch.decode_blocks(block_size) * self.s_per_decode_block
            prefill_sq = batch.sum_prefill_sq
            if prefill_sq:
                attention = prefill_sq * self.s_per_prompt_sq + attention
        t = matmuls + attention
        if self.has_comm:
            comm = self.comm(tokens)
            if comm:
                t = t + comm
        if self.dispatch:
            moved = self.dispatch_time(tokens)
            if moved:
                t = t + moved
        if num_copy_blocks:
            copies = num_copy_blocks * self.s_per_copied_block
            if copies:
                t = t + copies
        if self.overhead_s:
            t = t + self.overhead_s
        if self.kernels:
            t += self.kernel_time(tokens)
        if self.charge_host:
            t += self.host_time(num_seqs, batch.num_prefill_tokens)
        return t

    def chunks_times(self, batch: ShapeMetrics, num_copy_blocks: int, batches: Sequence[ShapeMetrics]) -> list[float]:
        """iteration_time of prefill-only iterations alike but for their cached lengths (each of `batches`, every one
        with `batch`'s prefill lengths, logit rows and copies, and no decode: a speculating stretch's verify steps), the
        terms they
        share priced once, then each one's attention and the same additions in the same order, so the same floats."""
        tokens = batch.num_tokens
        matmuls = self.matmul_time(tokens, batch.num_logit_rows)
        prefill_tokens = batch.num_prefill_tokens
        comm = self.comm(tokens) if self.has_comm else 0.0
        moved = self.dispatch_time(tokens) if self.dispatch else 0.0
        copies = num_copy_blocks * self.s_per_copied_block
        kernels = self.kernel_time(tokens) if self.kernels else 0.0
        host = self.host_time(batch.num_seqs, prefill_tokens) if self.charge_host else 0.0
        fitted = self.fitted
        no_decodes = self.launched_decode(0, 0, None)  # fitted_decode of none, which fitted_attention starts from
        s_pair, s_kv, s_out = self.s_per_prefill_pair, self.s_per_prefill_kv_token, self.s_per_prefill_token
        s_context, s_prompt_sq = self.s_per_context_token, self.s_per_prompt_sq
        times: list[float] = []
        for chunk in batches:
            cached = chunk.sum_prefill_cached
            if fitted:
                pairs = prefill_pairs(chunk.prefill_lens, chunk.prefill_cached_lens)
                attention = no_decodes + (pairs * s_pair + (prefill_tokens + cached) * s_kv + prefill_tokens * s_out
                                          + self.prefill_latency)
            else:
                attention = cached * s_context
                prefill_sq = chunk.sum_prefill_sq
                if prefill_sq:
                    attention = prefill_sq * s_prompt_sq + attention
            times.append(self.finish(matmuls + attention, comm, moved, copies, kernels, host))
        return times

    def finish(self, t: float, comm: float, moved: float, copies: float, kernels: float, host: float) -> float:
        """An iteration's seconds from its linear layers' and attention's, t: what follows them added in
        iteration_time's order (all-reduces, expert dispatch, block copies, overhead, kernels, host work), each as
        priced for the iteration's tokens; a term that is 0.0 changes no bit of the sum, so it is skipped. A decode
        stretch's steps (stretches_times) add the same, written out there."""
        if comm:
            t = t + comm
        if moved:
            t = t + moved
        if copies:
            t = t + copies
        if self.overhead_s:
            t = t + self.overhead_s
        if self.kernels:
            t += kernels
        if self.charge_host:
            t += host
        return t

    def fitted_attention(self, batch: ShapeMetrics) -> float:
        """The decodes' part and the prefills' (RooflineCostModel._fitted_attention's float): a mixed step's decodes
        as their one launch prices them where the fit has that term."""
        mixed = self.mixed
        if mixed is not None and mixed_launch(batch.num_decodes, batch.prefill_lens):
            launch = mixed.launch(batch.num_decodes, batch.prefill_lens)
            return mixed.decode(batch.sum_decode_context, batch.num_decodes, launch) + self.fitted_prefill(batch)
        attention = self.fitted_decode(batch.sum_decode_context, batch.num_decodes)
        if batch.num_prefills:
            attention = attention + self.fitted_prefill(batch)
        return attention

    def fitted_decode(self, sum_decode_context: int, num_decodes: int) -> float:
        """The decodes' attention as a measured fit prices it: in waves where it has them (RooflineCostModel.
        _fitted_decode's operations on floats), else the context's bytes plus the latency."""
        return self.launched_decode(sum_decode_context, num_decodes, self.launch_of(num_decodes))

    def launch_of(self, num_decodes: int) -> tuple[int, int, float] | None:
        """The wave launch of num_decodes decodes (splits, tiles per split, latencies); None where decode attention
        is not counted in waves, or there are no decodes. A decode stretch keeps its decodes, so it asks once."""
        if self.wave_launch is not None and num_decodes:
            return self.wave_launch(num_decodes)
        return None

    def launched_decode(self, sum_decode_context: int, num_decodes: int,
                        launch: tuple[int, int, float] | None) -> float:
        """fitted_decode, given the launch of its num_decodes decodes (launch_of)."""
        if launch is not None:
            splits, per_split, latency = launch
            read = wave_tokens_float(sum_decode_context / num_decodes, num_decodes * self.wave_heads, self.wave_tile,
                                     splits, per_split, self.wave_sm_count, self.wave_blocks_per_sm, self.wave_floors,
                                     self.wave_equivalents)
            return read * self.s_per_head_token + latency
        attention = sum_decode_context * self.s_per_context_token
        if num_decodes:
            attention = attention + self.decode_latency
        return attention

    def fitted_prefill(self, batch: ShapeMetrics) -> float:
        """The prefills' attention as a measured fit prices it: pairs, K/V read, output reshaped, latency."""
        tokens = batch.num_prefill_tokens
        pairs = prefill_pairs(batch.prefill_lens, batch.prefill_cached_lens)
        return (pairs * self.s_per_prefill_pair + (tokens + batch.sum_prefill_cached) * self.s_per_prefill_kv_token
                + tokens * self.s_per_prefill_token + self.prefill_latency)

    def comm(self, tokens: int) -> float:
        if self.comm_time is not None:
            known = self.comm_seconds.get(tokens)
            if known is None:
                known = self.comm_time(tokens)
                self.comm_seconds[tokens] = known
            return known
        return tokens * self.s_per_token_comm + self.s_comm_fixed

    def host_time(self, num_seqs: int, num_prefill_tokens: int) -> float:
        return (self.host_per_iteration + self.host_per_sequence * num_seqs
                + self.host_per_prefill_token * num_prefill_tokens)

    def stretch_times(self, batch: ShapeMetrics, num_copy_blocks: int, num_steps: int,
                      blocks: list[int]) -> list[float]:
        """Each step's seconds of a decode stretch (`batch`, then every decode context one longer per step;
        `blocks`: each step's decode blocks where the paged kernel's per-block term applies, else empty): the terms that
        do not change along the stretch once, then per step the same additions in the same order as the
        array expression (numpy's float64 operations round as these do), so the same floats."""
        return self.stretches_times(batch, num_copy_blocks, [batch.sum_decode_context], num_steps,
                                    [blocks] if blocks else [])[0]

    def stretches_times(self, batch: ShapeMetrics, num_copy_blocks: int, firsts: list[int], num_steps: int,
                        blocks: list[list[int]]) -> list[list[float]]:
        """stretch_times of decode stretches alike but for their contexts: each `batch` with its decode contexts
        summing to firsts[i] at its first step (blocks[i]: each step's decode blocks where the per-block term applies,
        else `blocks` is empty), the terms they share priced once (a speculating stretch's proposer forwards)."""
        tokens = batch.num_tokens
        num_seqs = batch.num_seqs
        matmuls = self.matmul_time(tokens, batch.num_logit_rows)
        cached = batch.sum_prefill_cached
        step = batch.num_decodes
        paged = len(blocks) > 0
        prefill_sq = batch.sum_prefill_sq
        comm = self.comm(tokens) if self.has_comm else 0.0
        moved = self.dispatch_time(tokens) if self.dispatch else 0.0
        copies = num_copy_blocks * self.s_per_copied_block
        overhead = self.overhead_s
        kernels = self.kernel_time(tokens) if self.kernels else 0.0
        host = self.host_time(num_seqs, batch.num_prefill_tokens) if self.charge_host else 0.0
        s_context, s_block, s_prompt_sq = self.s_per_context_token, self.s_per_decode_block, self.s_per_prompt_sq
        fitted = self.fitted
        fitted_prefill = self.fitted_prefill(batch) if fitted and batch.num_prefills else 0.0
        launch = self.launch_of(step) if fitted else None  # the decodes, so their launch, are the same at every step
        mixed = self.mixed if fitted and mixed_launch(step, batch.prefill_lens) else None
        mixed_once = mixed.launch(step, batch.prefill_lens) if mixed is not None else (0.0, 0.0, 0.0)
        every: list[list[float]] = []
        no_blocks: list[int] = []
        for i in range(len(firsts)):
            first = firsts[i]
            stretch_blocks = blocks[i] if paged else no_blocks
            times: list[float] = []
            for s in range(num_steps):
                context = first + s * step
                if mixed is not None:
                    attention = mixed.decode(context, step, mixed_once) + fitted_prefill
                    if paged:
                        attention = attention + stretch_blocks[s] * s_block
                elif fitted:
                    attention = self.launched_decode(context, step, launch)
                    if fitted_prefill:
                        attention = attention + fitted_prefill
                    if paged:
                        attention = attention + stretch_blocks[s] * s_block
                else:
                    attention = (context + cached if cached else context) * s_context
                    if paged:
                        attention = attention + stretch_blocks[s] * s_block
                    if prefill_sq:
                        attention = prefill_sq * s_prompt_sq + attention
                # finish()'s additions written out: a plain decode stretch steps through here, and a call a step
                # costs its pure Python run 0.6% more instructions (compiled, nothing)
                t = matmuls + attention
                if comm:
                    t = t + comm
                if moved:
                    t = t + moved
                if copies:
                    t = t + copies
                if overhead:
                    t = t + overhead
                if self.kernels:
                    t += kernels
                if self.charge_host:
                    t += host
                times.append(t)
            every.append(times)
        return every


def bent(compute: float, memory: float, p: float) -> float:
    """calibrate.maths.ridge.bent_roof on floats, step for step."""
    if compute > memory:
        big, small = compute, memory
    else:
        big, small = memory, compute
    return big if p == math.inf or small <= 0.0 else big * (1.0 + (small / big) ** p) ** (1.0 / p)


def wave_tokens_float(mean_context: float, blocks_per_split: int, tile: int, splits: int, tiles_per_split: int,
                      sm_count: int, blocks_per_sm: int, floors: list[float],
                      known: dict[int, float] | None = None) -> float:
    """calibrate.parts.attention_waves.wave_tokens on floats, step for step (each step's value is a whole number or
    the same IEEE operation on the same doubles, so the same float). known: the equivalent blocks of each number of
    blocks already met, on this grid (they follow from it alone), kept there."""
    tiles = math.ceil(mean_context / tile)
    busy = max(min(math.ceil(tiles / tiles_per_split), splits), 1)
    blocks = blocks_per_split * busy
    equivalent = known.get(blocks) if known is not None else None
    if equivalent is None:
        slots = sm_count * blocks_per_sm
        waves = math.ceil(blocks / slots)
        tail = blocks - (waves - 1) * slots
        busiest = min(math.ceil(tail / sm_count), blocks_per_sm)
        equivalent = (waves - 1) * max(float(slots), floors[-1]) + max(float(tail), floors[busiest - 1])
        if known is not None:
            known[blocks] = equivalent
    per_block = max(min(mean_context, float(tiles_per_split * tile)), mean_context / splits)
    return equivalent * per_block


def prefill_pairs(prefill_lens: Sequence[int], prefill_cached_lens: Sequence[int]) -> int:
    """Every new token of each prefill against every key, cached and new: n (n + c) summed."""
    if not any(prefill_cached_lens):
        return sum([n * n for n in prefill_lens])
    return sum([n * (n + c) for n, c in zip(prefill_lens, prefill_cached_lens)])


def stretch_block_list(contexts: Sequence[int], num_steps: int, block_size: int) -> list[int]:
    """The KV blocks a decode stretch's contexts span at each of its num_steps steps, every context one longer
    per step (calibrate.clock.costmodel.stretch_block_sums, whose comment tells how): ceil(context / block_size)
    summed at the first step, then what the contexts crossing into a new block add at each next."""
    first, last = 0, block_size - 1
    crossing = [0] * block_size
    for c in contexts:
        first += (c + last) // block_size
        crossing[-c % block_size] += 1
    blocks = [first]
    for s in range(num_steps - 1):
        first += crossing[s % block_size]
        blocks.append(first)
    return blocks
