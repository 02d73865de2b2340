"""Speculative decoding on the real engine: the n-gram proposals, the draft model's spec, the KV pool's share
(docs/speculative-decoding.md). The proposers are engine/runtime/ngram.py, draft.py and head_proposer.py (EAGLE
and MTP); the verify is the runner's (a chunk of k + 1 tokens through the paged cache) and the choice the
sampler's (engine/runtime/rejection.py)."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from engine.core.batch import Batch
from engine.core.spec import ModelSpec
from engine.core.speculative import SpeculativeSpec
from engine.errors import SpecError
from engine.runtime.cache import kv_block_bytes
from engine.runtime.ngram import padded, propose_ngram
from engine.specs.loader import load_model_spec

DRAFT_KEY = "system.speculative.draft_model"


@dataclass
class Round:
    """The speculating decodes of an iteration: who, at what context, proposing how many (batch order)."""

    seq_ids: list[int]
    contexts: list[int]
    counts: list[int]

    @classmethod
    def of(cls, batch: Batch) -> Round:
        proposed = batch.decode_proposed or [0] * len(batch.decode_seq_ids)
        speculating = [(s, c, n) for s, c, n in zip(batch.decode_seq_ids, batch.decode_context_lens, proposed) if n]
        return cls(*(list(column) for column in zip(*speculating))) if speculating else cls([], [], [])


def ngram_proposals(batch: Batch, tokens: dict[int, list[int]],
                    forced: dict[int, list[int]]) -> dict[int, list[int]]:
    """Each speculating decode's batch.decode_proposed tokens, looked up in its own history (padded where the
    lookup finds fewer). A sequence made to generate a given stream (forced) proposes the stream's next tokens:
    the KV the verify writes for those it keeps is then the stream's, as its block keys say."""
    proposals = {}
    for seq_id, count in zip(batch.decode_seq_ids, batch.decode_proposed):
        if not count:
            continue
        history = tokens[seq_id]
        stream = forced.get(seq_id)
        if stream is not None:
            proposal = [int(t) for t in stream[len(history):len(history) + count]]
        else:
            proposal = propose_ngram(history, count)
        proposals[seq_id] = padded(proposal, count, history)
    return proposals


def draft_spec(speculative: SpeculativeSpec | None, target: ModelSpec, source: str = "Engine") -> ModelSpec | None:
    """A draft system's draft model (its spec as an experiment found it, else loaded by its name): it must propose
    the target's tokens over every context the target serves."""
    if speculative is None or speculative.method != "draft":
        return None
    draft = speculative.draft
    if draft is None:
        try:
            draft = load_model_spec(speculative.draft_model or "")
        except SpecError as err:
            raise SpecError(source, DRAFT_KEY, err.message) from None
    if draft.vocab_size != target.vocab_size:
        raise SpecError(source, DRAFT_KEY, f"{draft.name} has a vocabulary of {draft.vocab_size} tokens, the target "
                                           f"{target.name} {target.vocab_size}; a draft proposes the target's tokens")
    if draft.max_seq_len < target.max_seq_len:
        raise SpecError(source, DRAFT_KEY, f"{draft.name} holds {draft.max_seq_len} tokens, fewer than the target "
                                           f"{target.name}'s {target.max_seq_len}; it could not propose over every "
                                           "context")
    return draft


def target_pool_share(target: ModelSpec, proposer: ModelSpec | None, block_size: int, dtype: torch.dtype) -> float:
    """The target's part of the KV memory: a block holds the proposer's KV of its tokens (a draft model's, or an
    EAGLE or MTP head's one layer) beside the target's, in a pool of as many blocks (1 without either)."""
    if proposer is None:
        return 1.0
    own = kv_block_bytes(target, block_size, dtype)
    return own / (own + kv_block_bytes(proposer, block_size, dtype))
