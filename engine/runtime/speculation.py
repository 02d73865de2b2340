"""Speculative decoding on the real engine: which methods it runs, and each speculating decode's proposals
(docs/speculative-decoding.md). The verify is the runner's (a chunk of k + 1 tokens through the paged cache) and
the choice the sampler's (engine/runtime/rejection.py)."""
from __future__ import annotations

from engine.core.batch import Batch
from engine.core.system import SystemSpec
from engine.errors import SpecError
from engine.runtime.ngram import padded, propose_ngram

ENGINE_METHODS = ("ngram",)


def check_speculation(system: SystemSpec, source: str = "Engine") -> None:
    """The engine runs the n-gram proposer; the others are the simulator's alone (one line naming the key)."""
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
