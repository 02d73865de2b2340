"""Next-token choice on the device: greedy, or random at a temperature (and top-p) from a seeded torch.Generator.

`choose` only launches kernels: it returns the chosen token ids as a device tensor and never reads
the device, so the runner can fetch every sampled token of an iteration, beams included, in one copy
(the iteration's one host-device sync; engine/runtime/runner.py).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from engine.runtime.rejection import verify_greedy, verify_random

SAMPLING_METHODS = ("greedy", "random")


@dataclass(frozen=True)
class SamplingParams:
    method: str = "greedy"
    temperature: float = 1.0  # random sampling only
    top_p: float = 1.0  # random sampling only: draw from the smallest set of tokens holding this much probability

    def __post_init__(self) -> None:
        if self.method not in SAMPLING_METHODS:
            raise ValueError(f"sampling must be one of {SAMPLING_METHODS}, got {self.method!r}")
        if not self.temperature > 0:
            raise ValueError(f"temperature must be > 0, got {self.temperature!r}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p!r}")


def sample_rows(sample_ids: list[tuple[int, ...]]) -> list[int]:
    """The logits row of every sampled sequence, in order: a prefill's row once per fork it samples for."""
    return [r for r, ids in enumerate(sample_ids) for _ in ids]


def top_p_filter(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """Zero every token outside the smallest set, most probable first, whose probability reaches top_p
    (the most probable token always stays). Rows need not be renormalized: multinomial takes weights."""
    ordered, order = torch.sort(probs, dim=-1, descending=True)
    before = ordered.cumsum(dim=-1) - ordered  # probability of the tokens ranked above each one
    ordered = ordered.masked_fill(before >= top_p, 0.0)
    return torch.zeros_like(probs).scatter_(-1, order, ordered)


class Sampler:
    def __init__(self, device: torch.device, seed: int):
        self.generator = torch.Generator(device=device).manual_seed(seed)

    def choose(self, logits: torch.Tensor, rows: torch.Tensor, params: SamplingParams) -> torch.Tensor:
        """Token ids (int64, on the device) drawn from logits[rows], one per entry of `rows`; no sync."""
        if params.method == "greedy":
            return logits.argmax(dim=-1)[rows]
        # each fork draws its own token from the shared distribution
        probs = torch.softmax(logits[rows].float() / params.temperature, dim=-1)
        if params.top_p < 1:
            probs = top_p_filter(probs, params.top_p)
        return torch.multinomial(probs, 1, generator=self.generator).squeeze(1)

    def probs(self, logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
        """The distribution random sampling draws from (temperature, then top-p), normalized."""
        probs = torch.softmax(logits.float() / params.temperature, dim=-1)
        if params.top_p < 1:
            probs = top_p_filter(probs, params.top_p)
            probs = probs / probs.sum(dim=-1, keepdim=True)
        return probs

    def verify(self, target_logits: torch.Tensor, proposals: torch.Tensor, num_proposed: torch.Tensor,
               params: SamplingParams, draft_probs: torch.Tensor | None = None,
               backend: str = "auto") -> tuple[torch.Tensor, torch.Tensor]:
        """Speculative decoding's verify (engine/runtime/rejection.py): the proposals kept of each sequence, and the
        target's token after them, drawn from what `choose` draws from; no sync. backend: the kernels' (auto |
        torch | triton), as the runner's attention and cache kernels choose theirs."""
        if params.method == "greedy":
            return verify_greedy(target_logits, proposals, num_proposed, backend)
        return verify_random(self.probs(target_logits, params), proposals, num_proposed, draft_probs, self.generator,
                             backend)

    def sample(self, logits: torch.Tensor, sample_ids: list[tuple[int, ...]],
               params: SamplingParams) -> dict[int, int]:
        """Row r of logits is shared by the sequences sample_ids[r]; one token for each (one copy to the host)."""
        rows = torch.tensor(sample_rows(sample_ids), dtype=torch.int64).to(logits.device)
        chosen = self.choose(logits, rows, params)
        return dict(zip((s for ids in sample_ids for s in ids), chosen.tolist()))
