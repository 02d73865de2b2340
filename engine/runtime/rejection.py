"""The verify's choice: which proposals the target keeps, and its own token after them (speculative sampling,
Leviathan et al. 2023; Chen et al. 2023). A torch reference on the device, no sync.

Proposal i is kept with probability min(1, p_i(x_i) / q_i(x_i)), p the target's distribution at that position and
q the proposer's; the first one rejected is replaced by a draw from normalize(max(0, p_i - q_i)) (the residual),
and when all are kept the target adds a bonus token drawn from p at the position after the last. The output then
follows the target's distribution exactly, whatever q is. A deterministic proposer (n-gram) has q one-hot on its
proposal. Greedy (temperature 0) is its limit: keep while the target's argmax is the proposal, then the argmax.

Shapes: B sequences, K proposal positions (a sequence proposing fewer has num_proposed < K; the positions past it
are never kept), V tokens. target: [B, K + 1, V]; proposals: [B, K]; draft_probs: [B, K, V] or None (one-hot).
Returns (accepted [B], the target's token after them [B]).
"""
from __future__ import annotations

import torch


def kept_run(keep: torch.Tensor, num_proposed: torch.Tensor) -> torch.Tensor:
    """The length of each row's leading run of kept proposals, never past its num_proposed."""
    positions = torch.arange(keep.shape[1], device=keep.device)
    keep = keep & (positions < num_proposed.unsqueeze(1))
    return keep.long().cumprod(dim=1).sum(dim=1)


def verify_greedy(target_logits: torch.Tensor, proposals: torch.Tensor,
                  num_proposed: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Keep while the target's argmax is the proposal; the target's argmax after the run is its own token."""
    best = target_logits.argmax(dim=-1)  # [B, K + 1]
    accepted = kept_run(best[:, :-1] == proposals, num_proposed)
    return accepted, best.gather(1, accepted.unsqueeze(1)).squeeze(1)


def residual(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """normalize(max(0, p - q)): what the target still owes after a rejected proposal. Where p <= q everywhere
    (p = q) a rejection cannot happen; p is returned so the row stays a distribution."""
    owed = (p - q).clamp(min=0)
    total = owed.sum(dim=-1, keepdim=True)
    return torch.where(total > 0, owed / total.clamp(min=torch.finfo(owed.dtype).tiny), p)


def verify_random(target_probs: torch.Tensor, proposals: torch.Tensor, num_proposed: torch.Tensor,
                  draft_probs: torch.Tensor | None, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Speculative sampling over normalized target distributions (draft_probs None: a deterministic proposer)."""
    num_seqs, k, vocab = proposals.shape[0], proposals.shape[1], target_probs.shape[-1]
    if draft_probs is None:
        draft_probs = torch.zeros(num_seqs, k, vocab, dtype=target_probs.dtype, device=target_probs.device)
        draft_probs.scatter_(2, proposals.unsqueeze(2), 1.0)
    index = proposals.unsqueeze(2)
    p_proposed = target_probs[:, :k].gather(2, index).squeeze(2)
    q_proposed = draft_probs.gather(2, index).squeeze(2)
    draws = torch.rand(num_seqs, k, generator=generator, device=target_probs.device, dtype=target_probs.dtype)
    accepted = kept_run(draws * q_proposed < p_proposed, num_proposed)  # u < p / q, without dividing by q = 0
    at = accepted.view(num_seqs, 1, 1).expand(num_seqs, 1, vocab)
    p_at = target_probs.gather(1, at).squeeze(1)
    padded_q = torch.cat([draft_probs, torch.zeros_like(draft_probs[:, :1])], dim=1)
    q_at = padded_q.gather(1, at).squeeze(1)
    rejected = (accepted < num_proposed).unsqueeze(1)
    final = torch.where(rejected, residual(p_at, q_at), p_at)  # a bonus token where every proposal was kept
    return accepted, torch.multinomial(final, 1, generator=generator).squeeze(1)
