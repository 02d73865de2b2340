"""The n-gram (prompt lookup) proposer: a sequence proposes what followed the last n tokens of its own history the
first time they occurred in it, as vLLM's NgramProposer does (the longest n from NGRAM_MAX down to NGRAM_MIN
that occurs earlier; the earliest occurrence of it). Host work on token lists: no model, no device."""
from __future__ import annotations

from collections.abc import Sequence

NGRAM_MAX = 4  # vLLM's prompt_lookup_max: the longest suffix looked up
NGRAM_MIN = 1  # vLLM's prompt_lookup_min: the shortest


def propose_ngram(history: Sequence[int], k: int, ngram_max: int = NGRAM_MAX, ngram_min: int = NGRAM_MIN) -> list[int]:
    """At most k tokens: those that followed the earliest earlier occurrence of the history's last n tokens, for
    the longest n in [ngram_min, ngram_max] that occurs; fewer where the history ends first, none where no n does."""
    if k < 1:
        return []
    length = len(history)
    for n in range(min(ngram_max, length - 1), ngram_min - 1, -1):
        suffix = list(history[length - n:])
        for start in range(length - n):  # an occurrence that ends before the suffix's own
            if list(history[start:start + n]) == suffix:
                follow = start + n
                return [int(t) for t in history[follow:follow + k]]
    return []


def padded(proposal: list[int], k: int, history: Sequence[int]) -> list[int]:
    """Exactly k proposals: a short one is continued with its own last token (or the history's). The verify
    accepts a padded token only as it would accept any proposal of a deterministic proposer (with the target's
    probability of it), so the output is the target's still; the control plane counted k slots, and gets k."""
    last = proposal[-1] if proposal else int(history[-1])
    return proposal + [last] * (k - len(proposal))
