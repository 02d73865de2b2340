"""Beam search over log-probabilities: the real data plane's choice of each beam's parent.

Temperature 0, as the paper's beam runs: a beam's score is the sum of its tokens' log-probabilities,
and every step keeps the group's k best continuations. The output length is the request's (EOS
ignored), so every beam of a group has the same length and scores compare directly.

The first step samples from the prompt's one row of logits: the k best tokens, one per beam. Later
steps score every beam's every token (score + log-prob, k x vocab candidates) and keep the k best;
engine.core.beam puts them into the group's sequence slots (a surviving beam keeps its slot) and the
forks go to the control plane, which shares or copies the parent's KV.

A step runs in three parts so that an iteration reads the device once: `plan` (host: which logits
rows, which scores), `launch` (device: the k best of every group, groups of one width and kind batched
into one sort; nothing read back) and `finish` (host: the values the runner fetched, in the one copy
of the iteration, become tokens, scores and forks).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from engine.core.beam import continue_beams


@dataclass(frozen=True)
class BeamStep:
    """One beam group's part of an iteration: its sequences and the logits row each reads."""

    seq_ids: tuple[int, ...]
    rows: tuple[int, ...]

    @property
    def first(self) -> bool:
        """The prompt's prefill: every beam reads the same row (every beam is the same so far)."""
        return len(set(self.rows)) == 1

    @property
    def width(self) -> int:
        return len(self.seq_ids)


@dataclass(frozen=True)
class BeamBatch:
    """Groups of one kind (first step or not) and one width, scored in one sort on the device."""

    first: bool
    width: int
    steps: tuple[BeamStep, ...]

    @property
    def rows(self) -> list[int]:
        """The logits rows it reads: one per group on a first step, one per beam after."""
        return [s.rows[0] for s in self.steps] if self.first else [r for s in self.steps for r in s.rows]


def batch_steps(steps: list[BeamStep]) -> list[BeamBatch]:
    """The steps by (first, width), in the order each kind first occurs: a deterministic order that the
    uploaded rows and scores, the device's output and `finish` all follow."""
    kinds: dict[tuple[bool, int], list[BeamStep]] = {}
    for step in steps:
        kinds.setdefault((step.first, step.width), []).append(step)
    return [BeamBatch(first, width, tuple(group)) for (first, width), group in kinds.items()]


@dataclass
class BeamSearch:
    """Every beam in flight: its cumulative log-probability, by sequence id; and the last step's forks."""

    scores: dict[int, float] = field(default_factory=dict)
    forks: dict[int, int] = field(default_factory=dict)  # the last step's {child seq id: parent seq id}
    _launched: list[BeamBatch] = field(default_factory=list, repr=False)
    _vocab: int = 0

    def start(self, seq_ids) -> None:
        for seq_id in seq_ids:
            self.scores[seq_id] = 0.0

    def pop_scores(self, seq_ids) -> list[float]:
        return [self.scores.pop(seq_id) for seq_id in seq_ids]

    def take_forks(self) -> dict[int, int]:
        forks, self.forks = self.forks, {}
        return forks

    # --- host: what the device needs ----------------------------------------------------
    def plan(self, sample_ids: list[tuple[int, ...]], beam_groups: list[tuple[int, ...]]
             ) -> tuple[list[BeamBatch], list[int], list[float]]:
        """The batches of this iteration's beam groups, the logits rows they read and the scores of the
        beams that continue (both in batch order: upload them with the iteration's inputs)."""
        row_of = {seq_id: r for r, ids in enumerate(sample_ids) for seq_id in ids}
        steps = [BeamStep(tuple(ids), tuple(row_of[s] for s in ids)) for ids in beam_groups]
        batches = batch_steps(steps)
        rows = [r for b in batches for r in b.rows]
        scores = [self.scores[s] for b in batches if not b.first for step in b.steps for s in step.seq_ids]
        return batches, rows, scores

    # --- device: the k best of every group, nothing read back --------------------------------
    def launch(self, logits: torch.Tensor, batches: list[BeamBatch], rows: torch.Tensor,
               scores: torch.Tensor) -> torch.Tensor:
        """float64 on the device: for each batch, its groups' k best scores, then their flat indices
        (exact in float64: k x vocab < 2**53). `finish` reads them back in this order."""
        parts, row_at, score_at = [], 0, 0
        for batch in batches:
            count = len(batch.rows)
            logprobs = torch.log_softmax(logits[rows[row_at:row_at + count]].double(), dim=-1)
            row_at += count
            groups = len(batch.steps)
            if batch.first:
                totals = logprobs
            else:
                beams = scores[score_at:score_at + count].view(groups, batch.width, 1)
                totals = (logprobs.view(groups, batch.width, -1) + beams).view(groups, -1)
                score_at += count
            # stable sort, not topk: topk leaves the order of equal values unspecified
            ordered, index = torch.sort(totals, dim=-1, descending=True, stable=True)
            parts += [ordered[:, :batch.width].reshape(-1), index[:, :batch.width].reshape(-1).double()]
        self._launched, self._vocab = batches, logits.shape[-1]
        return torch.cat(parts) if parts else logits.new_zeros(0, dtype=torch.float64)

    # --- host: tokens, scores and forks from the values fetched ------------------------------
    def finish(self, values: list[float]) -> dict[int, int]:
        """The next token of every beam launched; records the step's forks (take_forks) and new scores."""
        tokens: dict[int, int] = {}
        self.forks = {}
        at = 0
        for batch in self._launched:
            count = len(batch.steps) * batch.width
            best_scores, best_index = values[at:at + count], [int(i) for i in values[at + count:at + 2 * count]]
            at += 2 * count
            for g, step in enumerate(batch.steps):
                span = slice(g * batch.width, (g + 1) * batch.width)
                tokens.update(self._choose(step, best_scores[span], best_index[span], batch.first))
        self._launched = []
        return tokens

    def _choose(self, step: BeamStep, scores: list[float], flat: list[int], first: bool) -> dict[int, int]:
        if first:
            for seq_id, score in zip(step.seq_ids, scores):
                self.scores[seq_id] = score
            return dict(zip(step.seq_ids, flat))
        vocab = self._vocab
        parents = [step.seq_ids[i // vocab] for i in flat]
        tokens = {}
        for seq_id, i in zip(step.seq_ids, continue_beams(step.seq_ids, parents)):
            tokens[seq_id] = flat[i] % vocab
            self.scores[seq_id] = scores[i]
            if parents[i] != seq_id:
                self.forks[seq_id] = parents[i]
        return tokens

    def step(self, logits: torch.Tensor, sample_ids: list[tuple[int, ...]],
             beam_groups: list[tuple[int, ...]]) -> dict[int, int]:
        """plan, launch and finish in one call (one copy back): the next token of every beam of
        `beam_groups`; row r of logits is shared by sample_ids[r]."""
        batches, rows, scores = self.plan(sample_ids, beam_groups)
        device = logits.device
        values = self.launch(logits, batches, torch.tensor(rows, dtype=torch.int64).to(device),
                             torch.tensor(scores, dtype=torch.float64).to(device))
        return self.finish(values.tolist())
