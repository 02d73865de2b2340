"""Beam search over log-probabilities: the real data plane's choice of each beam's parent.

Temperature 0, as the paper's beam runs: a beam's score is the sum of its tokens' log-probabilities,
and every step keeps the group's k best continuations. The output length is the request's (EOS
ignored), so every beam of a group has the same length and scores compare directly.

The first step samples from the prompt's one row of logits: the k best tokens, one per beam. Later
steps score every beam's every token (score + log-prob, k x vocab candidates) and keep the k best;
engine.core.beam puts them into the group's sequence slots (a surviving beam keeps its slot) and the
forks go to the control plane, which shares or copies the parent's KV.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from engine.core.beam import continue_beams


@dataclass
class BeamSearch:
    """Every beam in flight: its cumulative log-probability, by sequence id; and the last step's forks."""

    scores: dict[int, float] = field(default_factory=dict)
    forks: dict[int, int] = field(default_factory=dict)  # the last step's {child seq id: parent seq id}

    def start(self, seq_ids) -> None:
        for seq_id in seq_ids:
            self.scores[seq_id] = 0.0

    def pop_scores(self, seq_ids) -> list[float]:
        return [self.scores.pop(seq_id) for seq_id in seq_ids]

    def take_forks(self) -> dict[int, int]:
        forks, self.forks = self.forks, {}
        return forks

    def step(self, logits: torch.Tensor, sample_ids: list[tuple[int, ...]],
             beam_groups: list[tuple[int, ...]]) -> dict[int, int]:
        """The next token of every beam of `beam_groups`; row r of logits is shared by sample_ids[r].
        Records the step's forks (take_forks) and the beams' new scores."""
        row_of = {seq_id: r for r, ids in enumerate(sample_ids) for seq_id in ids}
        tokens: dict[int, int] = {}
        self.forks = {}
        for seq_ids in beam_groups:
            rows = [row_of[seq_id] for seq_id in seq_ids]
            if len(set(rows)) == 1:  # the prompt's prefill: every beam is the same so far
                tokens.update(self._first_step(logits[rows[0]], seq_ids))
            else:
                tokens.update(self._next_step(logits[rows], seq_ids))
        return tokens

    def _first_step(self, logits: torch.Tensor, seq_ids: tuple[int, ...]) -> dict[int, int]:
        scores, chosen = best(torch.log_softmax(logits.double(), dim=-1), len(seq_ids))
        for seq_id, score in zip(seq_ids, scores):
            self.scores[seq_id] = score
        return dict(zip(seq_ids, chosen))

    def _next_step(self, logits: torch.Tensor, seq_ids: tuple[int, ...]) -> dict[int, int]:
        k, vocab = logits.shape
        totals = torch.log_softmax(logits.double(), dim=-1)
        totals += torch.tensor([self.scores[s] for s in seq_ids], dtype=torch.float64,
                               device=logits.device).unsqueeze(1)
        scores, flat = best(totals.reshape(-1), k)
        parents = [seq_ids[i // vocab] for i in flat]
        tokens = {}
        for seq_id, i in zip(seq_ids, continue_beams(seq_ids, parents)):
            tokens[seq_id] = flat[i] % vocab
            self.scores[seq_id] = scores[i]
            if parents[i] != seq_id:
                self.forks[seq_id] = parents[i]
        return tokens


def best(values: torch.Tensor, k: int) -> tuple[list[float], list[int]]:
    """The k largest values of a 1-D tensor and their indices, best first; ties go to the lower index."""
    # stable sort, not topk: topk leaves the order of equal values unspecified
    ordered, index = torch.sort(values, descending=True, stable=True)
    return ordered[:k].tolist(), index[:k].tolist()
