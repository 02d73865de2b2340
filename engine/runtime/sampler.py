"""Next-token choice: greedy, or random at a temperature from a seeded torch.Generator."""
from __future__ import annotations

from dataclasses import dataclass

import torch

SAMPLING_METHODS = ("greedy", "random")


@dataclass(frozen=True)
class SamplingParams:
    method: str = "greedy"
    temperature: float = 1.0  # random sampling only

    def __post_init__(self) -> None:
        if self.method not in SAMPLING_METHODS:
            raise ValueError(f"sampling must be one of {SAMPLING_METHODS}, got {self.method!r}")
        if not self.temperature > 0:
            raise ValueError(f"temperature must be > 0, got {self.temperature!r}")


class Sampler:
    def __init__(self, device: torch.device, seed: int):
        self.generator = torch.Generator(device=device).manual_seed(seed)

    def sample(self, logits: torch.Tensor, sample_ids: list[tuple[int, ...]],
               params: SamplingParams) -> dict[int, int]:
        """Row r of logits is shared by the sequences sample_ids[r]; one token for each."""
        rows = torch.tensor([r for r, ids in enumerate(sample_ids) for _ in ids], device=logits.device)
        if params.method == "greedy":
            chosen = logits.argmax(dim=-1)[rows]
        else:
            # each fork draws its own token from the shared distribution
            probs = torch.softmax(logits[rows].float() / params.temperature, dim=-1)
            chosen = torch.multinomial(probs, 1, generator=self.generator).squeeze(1)
        flat_ids = [s for ids in sample_ids for s in ids]
        return dict(zip(flat_ids, chosen.tolist()))
