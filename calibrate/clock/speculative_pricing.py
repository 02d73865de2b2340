"""What a speculating iteration costs (docs/speculative-decoding.md): the target's verify forward, priced by the
clock on a shape it already knows, and the proposer's work, priced by the same clock on the proposer's spec.

- The verify step. A decode that proposed k tokens feeds the target k + 1 tokens (its last sampled one and the
  proposals) that attend over its context: exactly a prefill chunk of k + 1 tokens over c - 1 cached ones (c: the
  decode's context, its fed token included), which the clock prices as chunked prefill's chunks are priced. A
  decode that proposed nothing stays a decode. Unlike a prefill chunk, whose last position alone is sampled, each
  of the k + 1 verified positions needs its logits: the shape carries the k proposals' rows beside the chunk's one
  (BatchShape.extra_logit_rows), and the clock prices the LM head on all of them (vocab x hidden each: about 1.5%
  of a token's linear work for Llama-3-70B).
- The proposer. `draft`: k decode forwards of the draft model over the speculating sequences (the j-th over each
  context + j), and its forward over the iteration's prefills (the draft keeps its own KV of every prompt);
  `eagle` / `mtp`: the same over one decoder layer of the target (the head EAGLE or MTP adds); `ngram`: a lookup on
  the host for each speculating sequence, NGRAM_SECONDS_PER_SEQUENCE each. Each of those forwards is a decode of
  the speculating sequences, so its LM head runs one row per proposal it makes.
"""
from __future__ import annotations

from collections.abc import Sequence

from calibrate.clock.breakdown import IterationTime
from calibrate.clock.costmodel import BatchLike, CostModel, PricedOnBase
from calibrate.clock.engine_clock import EngineCostModel
from calibrate.clock.roofline import RooflineCostModel
from calibrate.clock.speculating_terms import MAX_PROPOSALS, EngineTerms, SpeculatingTerms
from engine.core.batch import Batch, BatchShape

# A stated assumption, not a measurement of this code: vLLM's n-gram (prompt lookup) proposer after its Numba
# rewrite spent 1.9 s over a ShareGPT run of 5,000 requests (vllm-project/vllm pull request 13365), about
# 600,000 sequence-steps of proposals at two tokens a step: some 3 microseconds a speculating sequence a step.
NGRAM_SECONDS_PER_SEQUENCE = 3e-6
PROPOSER_KIND = "proposer"  # the breakdown's device kind for the proposer's forwards and lookups


class SpeculativeCostModel(PricedOnBase):
    """`base` prices the target's verify (verify_shape); `proposer` the draft model's or the head's forwards
    (None for ngram, which costs ngram_s_per_sequence on the host a speculating sequence)."""

    def __init__(self, base: CostModel, method: str, proposer: CostModel | None,
                 ngram_s_per_sequence: float = NGRAM_SECONDS_PER_SEQUENCE):
        if (proposer is None) != (method == "ngram"):
            raise ValueError(f"method {method!r}: a proposer's cost model is for draft, eagle and mtp, not ngram")
        self.base, self.method, self.proposer = base, method, proposer
        self.ngram_s_per_sequence = ngram_s_per_sequence
        self.prices_ahead = base.prices_ahead
        self.source = f"{base.source}; speculative decoding ({method}) priced on it"
        self.label = base.label
        self._written_out: SpeculatingTerms | None = None  # terms()

    def iteration_time(self, batch: BatchLike) -> float:
        """The target's verify as its own clock combines its parts (an engine's may overlap host and device work),
        then the proposer's forwards on the device after it."""
        terms = self.terms()
        if terms is not None and isinstance(batch, Batch) and terms.prices(batch):
            return terms.iteration_time(batch)
        return self.base.iteration_time(verify_shape(batch)) + self.proposer_time(batch)

    def terms(self) -> SpeculatingTerms | None:
        """The commonest speculating iteration's arithmetic written out (calibrate/clock/speculating_terms.py) where
        the target and the proposer are rooflines, under engine models or not; None elsewhere. Kept, with what it
        prices once for each count of decodes and proposals, while the rooflines keep their terms: a roofline binds
        them afresh when one changes (RooflineCostModel.charge_host), and forgets what it knew with them."""
        target = _roofline_under(self.base)
        proposer = _roofline_under(self.proposer) if self.proposer is not None else None
        if target is None or (proposer is None) != (self.proposer is None):
            return None
        proposer_terms = proposer.terms if proposer is not None else None
        known = self._written_out
        if (known is not None and known.verify is target.terms and known.proposer is proposer_terms
                and known.ngram_s_per_sequence == self.ngram_s_per_sequence):
            return known
        known = SpeculatingTerms(target.terms, _engine_terms(self.base), proposer_terms,
                                 _engine_terms(self.proposer) if self.proposer is not None else None,
                                 proposer.block_size if proposer is not None else 0, self.ngram_s_per_sequence)
        self._written_out = known
        return known

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_written_out"] = None  # a compiled object holding bound methods: bound again where it is used
        return state

    def device_time(self, batch: BatchLike) -> float:
        return self.base.device_time(verify_shape(batch)) + self.proposer_time(batch)

    def host_time(self, batch: BatchLike) -> float:
        return self.base.host_time(verify_shape(batch))

    def swap_time(self, num_blocks: int) -> float:
        return self.base.swap_time(num_blocks)

    def breakdown(self, batch: BatchLike) -> IterationTime:
        verify = self.base.breakdown(verify_shape(batch))
        proposer = self.proposer_time(batch)
        if not proposer:
            return verify
        return IterationTime({**verify.device, PROPOSER_KIND: proposer}, dict(verify.host),
                             verify.device_s + proposer, verify.host_s, verify.swap_s, parts_exact=False)

    def step_time_list(self, batches: Sequence[BatchLike]) -> list[float]:
        """A speculating stretch's iterations (decode-only, nothing moved) priced together: every verify through the
        base's iteration_time_list and every proposer forward through the proposer's decode_step_time_lists, summed
        as step_time sums them (adding 0.0 for the swaps, as it does), so the same floats."""
        terms = self.terms()
        if terms is not None:  # the iterations it prices written out, any other as a call
            return [terms.iteration_time(batch) + 0.0 if isinstance(batch, Batch) and terms.prices(batch)
                    else self.step_time(batch) for batch in batches]
        if any(batch.prefill_lens or batch.num_swap_blocks for batch in batches):
            return super().step_time_list(batches)
        verify = self.base.iteration_time_list([verify_shape(batch) for batch in batches])
        return [v + p + 0.0 for v, p in zip(verify, self.proposer_time_list(batches))]

    def proposer_time_list(self, batches: Sequence[BatchLike]) -> list[float]:
        """proposer_time of each decode-only batch: its forwards' stretches priced together, then added up per batch
        in proposer_time's order."""
        if self.proposer is None:
            return [self.proposer_time(batch) for batch in batches]
        per_batch = [proposer_stretches(batch.decode_context_lens, proposals(batch)) for batch in batches]
        every = [stretch for stretches in per_batch for stretch in stretches]
        times = iter(self.proposer.decode_step_time_lists(every))
        seconds_each = []
        for stretches in per_batch:
            seconds = 0.0
            for _ in stretches:
                for step_s in next(times):
                    seconds += step_s
            seconds_each.append(seconds)
        return seconds_each

    def proposer_time(self, batch: BatchLike) -> float:
        """The proposals' cost: the draft's or head's forwards, or the n-gram lookups (module docstring)."""
        proposed = proposals(batch)
        if self.proposer is None:
            return self.ngram_s_per_sequence * sum(1 for k in proposed if k)
        seconds = 0.0
        if batch.prefill_lens:  # the proposer computes the prompts' KV too, whether or not a decode proposes
            seconds += self.proposer.iteration_time(BatchShape(tuple(batch.prefill_lens), (),
                                                               prefill_cached_lens=_cached(batch)))
        terms = self.terms()
        if terms is not None and proposed and max(proposed) <= MAX_PROPOSALS:  # its forwards written out
            return terms.forwards_after(seconds, batch.decode_context_lens, proposed)
        for shape, num_steps in proposer_stretches(batch.decode_context_lens, proposed):
            for step_s in self.proposer.decode_step_time_list(shape, num_steps):
                seconds += step_s
        return seconds


def _roofline_under(model: CostModel) -> RooflineCostModel | None:
    """The roofline a model is, or runs under an engine model; None for any other kind (or a subclass of these,
    which may price otherwise)."""
    if type(model) is RooflineCostModel:
        return model
    if type(model) is EngineCostModel and type(model.base) is RooflineCostModel:
        return model.base
    return None


def _engine_terms(model: CostModel) -> EngineTerms | None:
    return EngineTerms(model.overlap, model.parts) if isinstance(model, EngineCostModel) else None


def proposer_stretches(contexts: list[int], proposed: list[int]) -> list[tuple[BatchShape, int]]:
    """The proposer's forwards as decode stretches: the j-th forward runs the decodes proposing more than j tokens,
    each over its context + j, so between two of the distinct proposal counts the same decodes run forward after
    forward with every context one longer, which a clock prices as one stretch (decode_step_time_list: the same
    floats as a call a forward, in the same order)."""
    counts = set(proposed)
    if len(counts) == 1:  # the common case: every decode proposes as many, so one stretch of them all
        return [(BatchShape((), tuple(contexts)), proposed[0])] if proposed[0] else []
    stretches = []
    start = 0
    for end in sorted(counts - {0}):
        shape = BatchShape((), tuple(c + start for c, k in zip(contexts, proposed) if k > start))
        stretches.append((shape, end - start))
        start = end
    return stretches


def proposals(batch: BatchLike) -> list[int]:
    """Each decode's proposals (Batch.decode_proposed); a shape kept after its batch proposed nothing."""
    return batch.decode_proposed if isinstance(batch, Batch) else []


def verify_shape(batch: BatchLike) -> BatchLike:
    """The iteration as the target runs it: each speculating decode a prefill chunk of k + 1 tokens over its context
    less one, with a logit row for each of them (module docstring); a batch that proposes nothing as it is."""
    proposed = proposals(batch)
    if not any(proposed):
        return batch
    rows = sum(proposed)  # the chunk's own row is its sequence's; each proposal adds one
    if not batch.prefill_lens and all(proposed):  # the commonest case: decodes alone, every one speculating
        chunks = tuple([context - 1 for context in batch.decode_context_lens])
        return BatchShape(tuple([k + 1 for k in proposed]), (), batch.num_swap_blocks, batch.num_copy_blocks,
                          batch.num_running_groups, chunks if any(chunks) else (), rows)
    prefills, cached = list(batch.prefill_lens), list(_cached(batch) or (0,) * len(batch.prefill_lens))
    decodes: list[int] = []
    if all(proposed):  # the common case: every decode speculates
        prefills += [k + 1 for k in proposed]
        cached += [context - 1 for context in batch.decode_context_lens]
        return BatchShape(tuple(prefills), (), batch.num_swap_blocks, batch.num_copy_blocks,
                          batch.num_running_groups, tuple(cached) if any(cached) else (), rows)
    for context, k in zip(batch.decode_context_lens, proposed):
        if k:
            prefills.append(k + 1)
            cached.append(context - 1)
        else:
            decodes.append(context)
    return BatchShape(tuple(prefills), tuple(decodes), batch.num_swap_blocks, batch.num_copy_blocks,
                      batch.num_running_groups, tuple(cached) if any(cached) else (), rows)


def _cached(batch: BatchLike) -> tuple[int, ...]:
    cached = tuple(batch.prefill_cached_lens)
    return cached if any(cached) else ()
