"""The verify's choice: which proposals the target keeps, and its own token after them (speculative sampling,
Leviathan et al. 2023; Chen et al. 2023), on the device, no sync.

Proposal i is kept with probability min(1, p_i(x_i) / q_i(x_i)), p the target's distribution at that position and
q the proposer's; the first one rejected is replaced by a draw from normalize(max(0, p_i - q_i)) (the residual),
and when all are kept the target adds a bonus token drawn from p at the position after the last. The output then
follows the target's distribution exactly, whatever q is. A deterministic proposer (n-gram, an EAGLE or MTP head)
has q one-hot on its proposal. Greedy (temperature 0) is its limit: keep while the target's argmax is the
proposal, then the argmax.

Here the random draws are made from the run's generator (a uniform per proposal, an Exp(1) draw per token of the
vocabulary for the one token drawn after the kept run); the choice given them is engine/kernels/rejection.py's,
the Triton kernel where the runner's kernels are Triton (CUDA), else its torch reference.

Shapes: B sequences, K proposal positions (a sequence proposing fewer has num_proposed < K; the positions past it
are never kept), V tokens. target: [B, K + 1, V]; proposals: [B, K]; draft_probs: [B, K, V] or None (one-hot).
Returns (accepted [B], the target's token after them [B]).
"""
from __future__ import annotations

import torch

from engine.kernels.rejection import rejection_sample, rejection_sample_greedy


def verify_greedy(target_logits: torch.Tensor, proposals: torch.Tensor, num_proposed: torch.Tensor,
                  backend: str = "auto") -> tuple[torch.Tensor, torch.Tensor]:
    """Keep while the target's argmax is the proposal; the target's argmax after the run is its own token."""
    # the proposals are the batch's tokens, checked on the host (engine/runtime/inputs.py)
    return rejection_sample_greedy(target_logits.argmax(dim=-1), proposals, num_proposed, backend, check_bounds=False)


def verify_random(target_probs: torch.Tensor, proposals: torch.Tensor, num_proposed: torch.Tensor,
                  draft_probs: torch.Tensor | None, generator: torch.Generator,
                  backend: str = "auto") -> tuple[torch.Tensor, torch.Tensor]:
    """Speculative sampling over normalized target distributions (draft_probs None: a deterministic proposer)."""
    num_seqs, k = proposals.shape
    like = dict(device=target_probs.device, dtype=target_probs.dtype)
    uniforms = torch.rand(num_seqs, k, generator=generator, **like)
    exponentials = torch.empty(num_seqs, target_probs.shape[-1], **like).exponential_(generator=generator)
    inv_exponentials = exponentials.clamp_(min=torch.finfo(exponentials.dtype).tiny).reciprocal_()
    return rejection_sample(target_probs, proposals, num_proposed, draft_probs, uniforms, inv_exponentials, backend,
                            check_bounds=False)
