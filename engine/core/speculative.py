"""Speculative decoding as the control plane sees it: how many tokens a sequence proposes, and how many of them
the target is expected to accept.

A decoding sequence that speculates proposes k tokens (a draft model, an n-gram lookup, an EAGLE or MTP head)
and the target verifies k + 1 positions in one iteration: its last sampled token and the k proposals. It needs
k lookahead slots beyond its next token (vLLM's num_lookahead_slots), and advances by the tokens accepted plus
one (the target's own token at the first rejection, or after the last proposal).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

METHODS = ("draft", "ngram", "eagle", "mtp")


@dataclass(frozen=True)
class SpeculativeSpec:
    """A system's speculation: the proposer (`method`, and its `draft_model` for draft), k proposals a step,
    and the acceptance as per-position conditional rates: the target accepts proposal i with probability
    rates[i] when it accepted every one before it (a mean acceptance is turned into one rate for every
    position, the one whose expected accepted count is that mean)."""

    method: str
    num_speculative_tokens: int
    rates: tuple[float, ...]
    draft_model: str | None = None

    @property
    def expected_accepted(self) -> float:
        """The mean accepted count of k proposals: sum over i of rates[0] x ... x rates[i]."""
        return expected_accepted(self.rates)


def expected_accepted(rates: Sequence[float]) -> float:
    total, survive = 0.0, 1.0
    for rate in rates:
        survive *= rate
        total += survive
    return total


def lookahead_slots(length: int, final_len: int, k: int) -> int:
    """The proposals a sequence of `length` tokens makes this step: k, but no more than it can still use (a step
    adds at least one token, so a sequence one token short of its final length proposes nothing). So a request
    never needs more blocks than it would without speculation, and one that fits the pool alone still does."""
    left = final_len - length - 1
    return k if k < left else max(left, 0)
