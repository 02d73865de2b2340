"""Speculative decoding on the real engine: which methods it runs, and each speculating decode's proposals
(docs/speculative-decoding.md). The verify is the runner's (a chunk of k + 1 tokens through the paged cache) and
the choice the sampler's (engine/runtime/rejection.py)."""
from __future__ import annotations

import torch

from engine.core.batch import Batch
from engine.core.spec import ModelSpec
from engine.core.speculative import SpeculativeSpec
from engine.core.system import SystemSpec
from engine.errors import SpecError
from engine.runtime.cache import kv_block_bytes
from engine.runtime.ngram import padded, propose_ngram
from engine.specs.loader import load_model_spec

ENGINE_METHODS = ("ngram", "draft")
DRAFT_KEY = "system.speculative.draft_model"


def check_speculation(system: SystemSpec, source: str = "Engine") -> None:
    """The engine runs the n-gram and draft-model proposers; EAGLE and MTP are the simulator's alone (one line
    naming the key)."""
    spec = system.speculative
    if spec is not None and spec.method not in ENGINE_METHODS:
        raise SpecError(source, "system.speculative.method",
                        f"{spec.method!r} is simulator-only; the real engine speculates with {list(ENGINE_METHODS)} "
                        "(the simulator runs every method: docs/speculative-decoding.md)")


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


def target_pool_share(target: ModelSpec, draft: ModelSpec | None, block_size: int, dtype: torch.dtype) -> float:
    """The target's part of the KV memory: a block holds the draft's KV of its tokens beside the target's, in a pool
    of as many blocks (1 without a draft)."""
    if draft is None:
        return 1.0
    own = kv_block_bytes(target, block_size, dtype)
    return own / (own + kv_block_bytes(draft, block_size, dtype))
