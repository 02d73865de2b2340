"""A speculating iteration's seconds on floats, for the commonest iteration of a speculating run: decodes alone, every
one proposing, nothing moved. Compiled by mypyc with the roofline's arithmetic (setup.py), so that a speculating
stretch's iterations, and its steps, cost C arithmetic rather than the interpreter's.

The arithmetic is calibrate/clock/speculative_pricing.py's on a roofline, written out: the target's verify forward
(each decode a prefill chunk of k + 1 tokens over its context less one, with a logit row for each proposal:
RooflineTerms.chunks_times' operations), the proposer's k forwards (decode stretches, RooflineTerms.stretches_times'
operations), each under its engine model (EngineTerms: calibrate/clock/engine_clock.py's combination), added in the
same order on the same doubles, so the same floats (tests/calibrate/test_speculating_terms.py). What depends only on
the number of decodes and their proposals is priced once for each count met, and kept while the rooflines keep their
terms (SpeculativeCostModel.terms). Every other step's proposer forwards are priced here too (forwards_after).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

from calibrate.clock.costmodel import SCALAR_STEPS
from calibrate.clock.roofline_terms import RooflineTerms, stretch_block_list
from engine.core.batch import Batch, BatchShape, ShapeMetrics

# a proposer's forwards longer than this a roofline prices on arrays (the same floats, but not these operations)
MAX_PROPOSALS = SCALAR_STEPS


class EngineTerms:
    """An engine model over a roofline (EngineCostModel): its host work, padding and serial host work of a shape
    (`parts`, the engine model's own, asked once for each count met), and how it combines them with the
    roofline's iteration (EngineCostModel._combine's operations on floats)."""

    def __init__(self, overlap: bool, parts: Callable[[ShapeMetrics], tuple[float, float, float]]) -> None:
        self.overlap = overlap
        self.parts = parts

    def combine(self, total: float, parts: tuple[float, float, float]) -> float:
        host, padding, serial = parts
        if not self.overlap:
            return total + padding if padding else total
        device = total - host if host else total
        if padding:
            device = device + padding
        overlapped = host - serial if serial else host
        longer = device if device >= overlapped else overlapped
        return longer + serial if serial else longer


class Shared:
    """A forward's terms that follow its tokens and sequences alone, priced once: the linear layers, the all-reduces,
    the expert dispatch, the kernels and the host work of the roofline, the attention of no decodes, the decode
    launch, and the engine model's parts."""

    def __init__(self, matmuls: float, comm: float, moved: float, kernels: float, host: float, no_decodes: float,
                 launch: tuple[int, int, float] | None, parts: tuple[float, float, float]) -> None:
        self.matmuls = matmuls
        self.comm = comm
        self.moved = moved
        self.kernels = kernels
        self.host = host
        self.no_decodes = no_decodes
        self.launch = launch
        self.parts = parts


def shared(terms: RooflineTerms, engine: EngineTerms | None, shape: ShapeMetrics, fitted_decodes: int) -> Shared:
    """The terms of `shape` every forward of its tokens, sequences and logit rows shares (fitted_decodes: its
    decodes, whose launch a fitted roofline's attention needs)."""
    tokens = shape.num_tokens
    return Shared(terms.matmul_time(tokens, shape.num_logit_rows),
                  terms.comm(tokens) if terms.has_comm else 0.0,
                  terms.dispatch_time(tokens) if terms.dispatch else 0.0,
                  terms.kernel_time(tokens) if terms.kernels else 0.0,
                  terms.host_time(shape.num_seqs, shape.num_prefill_tokens) if terms.charge_host else 0.0,
                  terms.launched_decode(0, 0, None),
                  terms.launch_of(fitted_decodes) if terms.fitted else None,
                  engine.parts(shape) if engine is not None else (0.0, 0.0, 0.0))


class SpeculatingTerms:
    """The verify's roofline and engine model, and the proposer's (None, None for n-gram lookups, which cost
    ngram_s_per_sequence each on the host); block_size: the proposer's pool's, where its paged kernel charges a
    term per block."""

    def __init__(self, verify: RooflineTerms, verify_engine: EngineTerms | None, proposer: RooflineTerms | None,
                 proposer_engine: EngineTerms | None, block_size: int, ngram_s_per_sequence: float) -> None:
        self.verify = verify
        self.verify_engine = verify_engine
        self.proposer = proposer
        self.proposer_engine = proposer_engine
        self.block_size = block_size
        self.ngram_s_per_sequence = ngram_s_per_sequence
        self.verifies: dict[tuple[int, int], Shared] = {}  # by the decodes and their proposals
        self.forwards: dict[int, Shared] = {}  # by the decodes

    def prices(self, batch: Batch) -> bool:
        """Whether `batch` is the iteration priced here: decodes alone, each proposing, nothing moved."""
        if batch.prefill_lens or batch.blocks_to_swap_in or batch.blocks_to_swap_out or batch.blocks_to_copy:
            return False
        proposed = batch.decode_proposed
        return (len(proposed) == len(batch.decode_context_lens) > 0 and min(proposed) > 0
                and max(proposed) <= MAX_PROPOSALS)

    def iteration_time(self, batch: Batch) -> float:
        """SpeculativeCostModel.iteration_time of a batch this prices: the verify, then the proposer's forwards."""
        contexts, proposed = batch.decode_context_lens, batch.decode_proposed
        context_sum = sum(contexts)
        k = proposed[0]
        alike = proposed.count(k) == len(proposed)  # the common case: every decode proposes as many
        return self.verify_time(batch, context_sum, k if alike else 0) + self.proposer_time(batch, context_sum,
                                                                                             k if alike else 0)

    def verify_time(self, batch: Batch, context_sum: int, alike: int) -> float:
        """The target's verify forward under its engine model (each decode a prefill chunk: verify_shape); alike:
        the proposals of each decode where all propose as many, else 0."""
        terms = self.verify
        contexts, proposed = batch.decode_context_lens, batch.decode_proposed
        num_decodes = len(contexts)
        # each decode a chunk of k + 1 tokens over c - 1 cached ones: (k + 1)(k + c) pairs and, on a plain prompt's
        # scale, (k + 1)(k + 1 + 2(c - 1)) of causal work (ShapeMetrics.sum_prefill_sq)
        cached = context_sum - num_decodes
        if alike:
            proposals = alike * num_decodes
            pairs = (alike + 1) * (proposals + context_sum)
            prefill_sq = (alike + 1) * ((alike - 1) * num_decodes + 2 * context_sum)
        else:
            proposals, pairs, prefill_sq = 0, 0, 0
            for i in range(num_decodes):
                k, c = proposed[i], contexts[i]
                proposals += k
                pairs += (k + 1) * (k + c)
                prefill_sq += (k + 1) * (k + 2 * c - 1)
        known = self.verifies.get((num_decodes, proposals))
        if known is None:
            known = shared(terms, self.verify_engine, verify_shape(batch), 0)
            self.verifies[(num_decodes, proposals)] = known
        tokens = num_decodes + proposals
        if terms.fitted:
            attention = known.no_decodes + (pairs * terms.s_per_prefill_pair
                                            + (tokens + cached) * terms.s_per_prefill_kv_token
                                            + tokens * terms.s_per_prefill_token + terms.prefill_latency)
        else:
            attention = cached * terms.s_per_context_token
            if prefill_sq:
                attention = prefill_sq * terms.s_per_prompt_sq + attention
        t = terms.finish(known.matmuls + attention, known.comm, known.moved, 0.0, known.kernels, known.host)
        engine = self.verify_engine
        return engine.combine(t, known.parts) if engine is not None else t

    def proposer_time(self, batch: Batch, context_sum: int, alike: int) -> float:
        """The proposals' seconds: the proposer's forwards (the j-th over the decodes proposing more than j tokens,
        each over its context + j: proposer_stretches), each step added in order, or the n-gram lookups."""
        contexts, proposed = batch.decode_context_lens, batch.decode_proposed
        if self.proposer is None:
            return self.ngram_s_per_sequence * len(proposed)
        if alike:
            return self.forwards_time(contexts, context_sum, alike, 0.0)
        return self.forwards_after(0.0, contexts, proposed)

    def forwards_after(self, seconds: float, contexts: Sequence[int], proposed: Sequence[int]) -> float:
        """`seconds` with the proposer's forwards for decodes over `contexts` proposing `proposed` added, each step
        in order: the j-th over the decodes proposing more than j tokens, each over its context + j, so run by run
        between two of the distinct proposal counts (proposer_stretches). Any batch's decodes: a proposer of a
        roofline, none proposing more than MAX_PROPOSALS."""
        start = 0
        for end in sorted(set(proposed)):
            if end > start:  # none run for the decodes proposing nothing
                running = [contexts[i] + start for i in range(len(contexts)) if proposed[i] > start]
                seconds = self.forwards_time(running, sum(running), end - start, seconds)
                start = end
        return seconds

    def forwards_time(self, contexts: Sequence[int], context_sum: int, num_steps: int, seconds: float) -> float:
        """`seconds` with each of the proposer's num_steps forwards over `contexts` (summing to context_sum) added,
        every context one longer a forward (RooflineTerms.stretches_times' step, under the engine model)."""
        terms = self.proposer
        assert terms is not None
        num_decodes = len(contexts)
        known = self.forwards.get(num_decodes)
        if known is None:
            known = shared(terms, self.proposer_engine, BatchShape((), tuple(contexts)), num_decodes)
            self.forwards[num_decodes] = known
        paged = bool(terms.s_per_decode_block)
        blocks = stretch_block_list(contexts, num_steps, self.block_size) if paged else []
        engine = self.proposer_engine
        context = context_sum
        for s in range(num_steps):
            if terms.fitted:
                attention = terms.launched_decode(context, num_decodes, known.launch)
            else:
                attention = context * terms.s_per_context_token
            if paged:
                attention = attention + blocks[s] * terms.s_per_decode_block
            t = terms.finish(known.matmuls + attention, known.comm, known.moved, 0.0, known.kernels, known.host)
            seconds += engine.combine(t, known.parts) if engine is not None else t
            context += num_decodes
        return seconds


def verify_shape(batch: Batch) -> BatchShape:
    """speculative_pricing.verify_shape of a batch SpeculatingTerms prices: each decode a chunk of its proposals and
    its token over its context less one, with a logit row for each proposal."""
    proposed = batch.decode_proposed
    chunks = tuple([context - 1 for context in batch.decode_context_lens])
    return BatchShape(tuple([k + 1 for k in proposed]), (), 0, 0, batch.num_running_groups,
                      chunks if any(chunks) else (), sum(proposed))
