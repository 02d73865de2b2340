"""Torch reference for speculative decoding's choice (engine/kernels/rejection.py), given its random draws.

Proposal i is kept while u_i * q_i(x_i) < p_i(x_i) (u_i < p / q, without dividing by q = 0). The token after the
kept run is the argmax of w_v / E_v over the vocabulary, E_v independent Exp(1) draws, w the residual
max(0, p - q) at a rejection (p where nothing is owed) and p after the last proposal (the bonus token): the race
picks v with probability w_v / sum(w), so w needs no normalizing. The draws come in as 1 / E (`inv_exponentials`):
the race is then products alone, which a GPU rounds as the CPU does, so the Triton kernel chooses the same tokens.
"""
from __future__ import annotations

import torch


def kept_run(keep: torch.Tensor, num_proposed: torch.Tensor) -> torch.Tensor:
    """The length of each row's leading run of kept proposals, never past its num_proposed."""
    positions = torch.arange(keep.shape[1], device=keep.device)
    keep = keep & (positions < num_proposed.unsqueeze(1))
    return keep.long().cumprod(dim=1).sum(dim=1)


def rejection_sample_greedy_ref(target_argmax: torch.Tensor, proposals: torch.Tensor,
                                num_proposed: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Keep while the target's argmax is the proposal; the target's argmax after the run is its own token."""
    accepted = kept_run(target_argmax[:, :-1] == proposals, num_proposed)
    return accepted, target_argmax.gather(1, accepted.unsqueeze(1)).squeeze(1)


def residual(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """max(0, p - q), unnormalized: what the target still owes after a rejected proposal. Where nothing is owed
    (p = q) a rejection cannot happen; p is returned so the row still weighs some token."""
    owed = (p - q).clamp(min=0)
    return torch.where((owed > 0).any(dim=-1, keepdim=True), owed, p)


def one_hot_proposals(proposals: torch.Tensor, vocab: int, like: torch.Tensor) -> torch.Tensor:
    """A deterministic proposer's q: one-hot on each proposal ([B, K, V])."""
    q = torch.zeros(*proposals.shape, vocab, dtype=like.dtype, device=like.device)
    return q.scatter_(2, proposals.unsqueeze(2), 1.0)


def rejection_sample_ref(target_probs: torch.Tensor, proposals: torch.Tensor, num_proposed: torch.Tensor,
                         draft_probs: torch.Tensor | None, uniforms: torch.Tensor,
                         inv_exponentials: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Same contract as `rejection_sample`; inputs are assumed already validated."""
    (num_seqs, k), vocab = proposals.shape, target_probs.shape[-1]
    q = draft_probs if draft_probs is not None else one_hot_proposals(proposals, vocab, target_probs)
    index = proposals.unsqueeze(2)
    p_proposed = target_probs[:, :k].gather(2, index).squeeze(2)
    q_proposed = q.gather(2, index).squeeze(2)
    accepted = kept_run(uniforms * q_proposed < p_proposed, num_proposed)
    at = accepted.view(num_seqs, 1, 1).expand(num_seqs, 1, vocab)
    p_at = target_probs.gather(1, at).squeeze(1)
    q_at = torch.cat([q, torch.zeros_like(q[:, :1])], dim=1).gather(1, at).squeeze(1)
    rejected = (accepted < num_proposed).unsqueeze(1)
    weights = torch.where(rejected, residual(p_at, q_at), p_at)
    return accepted, (weights * inv_exponentials).argmax(dim=-1)
