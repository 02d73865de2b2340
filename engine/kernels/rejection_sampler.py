"""Triton speculative decoding's choice: one program per speculating sequence (vLLM's rejection sampler kernels).

The program walks its proposals, keeping each while the target accepts it, then races the vocabulary in tiles of
BLOCK_V tokens for the token after the kept run (rejection_ref.py says the rule). Both of the race's candidates,
the residual's and the target's own, are kept through the one pass over the vocabulary, so no row is read twice.

Imported lazily (triton is optional), and only after TRITON_INTERPRET is settled.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

_MAX_BLOCK_V = 1024


@triton.jit
def _greedy_kernel(argmax_ptr, proposals_ptr, num_proposed_ptr, accepted_ptr, token_ptr, K,
                   stride_ab, stride_ak, stride_pb, stride_pk):
    b = tl.program_id(0).to(tl.int64)
    n = tl.load(num_proposed_ptr + b)
    still = 1
    accepted = 0
    for i in range(0, K):
        best = tl.load(argmax_ptr + b * stride_ab + i * stride_ak)
        proposal = tl.load(proposals_ptr + b * stride_pb + i * stride_pk)
        still = tl.where((best == proposal) & (i < n), still, 0)
        accepted += still
    tl.store(accepted_ptr + b, accepted)
    tl.store(token_ptr + b, tl.load(argmax_ptr + b * stride_ab + accepted * stride_ak))


@triton.jit
def _random_kernel(target_ptr, draft_ptr, proposals_ptr, num_proposed_ptr, uniforms_ptr, inv_exp_ptr,
                   accepted_ptr, token_ptr, K, V,
                   stride_tb, stride_tk, stride_tv, stride_db, stride_dk, stride_dv,
                   stride_pb, stride_pk, stride_ub, stride_uk, stride_eb, stride_ev,
                   HAS_DRAFT: tl.constexpr, BLOCK_V: tl.constexpr):
    b = tl.program_id(0).to(tl.int64)
    n = tl.load(num_proposed_ptr + b)
    still = 1
    accepted = 0
    for i in range(0, K):
        proposal = tl.load(proposals_ptr + b * stride_pb + i * stride_pk).to(tl.int64)
        p = tl.load(target_ptr + b * stride_tb + i * stride_tk + proposal * stride_tv)
        q = 1.0
        if HAS_DRAFT:
            q = tl.load(draft_ptr + b * stride_db + i * stride_dk + proposal * stride_dv)
        u = tl.load(uniforms_ptr + b * stride_ub + i * stride_uk)
        still = tl.where((u * q < p) & (i < n), still, 0)
        accepted += still
    tl.store(accepted_ptr + b, accepted)

    # the race for the token after the kept run: the residual's weights where a proposal was rejected
    rejected = accepted < n
    proposed_at = tl.load(proposals_ptr + b * stride_pb + accepted * stride_pk, mask=rejected, other=-1)
    target_row = target_ptr + b * stride_tb + accepted * stride_tk
    draft_row = draft_ptr + b * stride_db + accepted * stride_dk
    owed_best, owed_index, p_best, p_index, owed_any = -1.0, 0, -1.0, 0, 0.0
    for start in range(0, V, BLOCK_V):
        v = start + tl.arange(0, BLOCK_V)
        live = v < V
        p = tl.load(target_row + v * stride_tv, mask=live, other=0.0)
        if HAS_DRAFT:
            q = tl.load(draft_row + v * stride_dv, mask=live & (v < tl.where(rejected, V, 0)), other=0.0)
        else:
            q = tl.where(v == proposed_at, 1.0, 0.0)
        inv = tl.load(inv_exp_ptr + b * stride_eb + v * stride_ev, mask=live, other=0.0)
        owed = tl.maximum(p - q, 0.0)
        owed_any = tl.maximum(owed_any, tl.max(owed, axis=0))
        owed_best, owed_index = _race(owed * inv, live, v, owed_best, owed_index)
        p_best, p_index = _race(p * inv, live, v, p_best, p_index)
    use_owed = rejected & (owed_any > 0.0)
    tl.store(token_ptr + b, tl.where(use_owed, owed_index, p_index))


@triton.jit
def _race(score, live, v, best, best_index):
    """The running race: this tile's highest score (its first on a tie) against the tiles before, which keep
    a tie (so the first token wins, as torch.argmax picks it)."""
    score = tl.where(live, score, -1.0)
    tile_best = tl.max(score, axis=0)
    tile_index = tl.min(tl.where(score == tile_best, v, 2147483647), axis=0)
    better = tile_best > best
    return tl.where(better, tile_best, best), tl.where(better, tile_index, best_index)


def rejection_sample_greedy_triton(target_argmax: torch.Tensor, proposals: torch.Tensor,
                                   num_proposed: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Launcher; inputs are assumed validated (see `rejection.rejection_sample_greedy`)."""
    num_seqs, k = proposals.shape
    accepted = torch.empty(num_seqs, dtype=torch.int64, device=proposals.device)
    token = torch.empty(num_seqs, dtype=torch.int64, device=proposals.device)
    if num_seqs:
        _greedy_kernel[(num_seqs,)](target_argmax, proposals, num_proposed, accepted, token, k,
                                    *target_argmax.stride(), *proposals.stride())
    return accepted, token


def rejection_sample_triton(target_probs: torch.Tensor, proposals: torch.Tensor, num_proposed: torch.Tensor,
                            draft_probs: torch.Tensor | None, uniforms: torch.Tensor,
                            inv_exponentials: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Launcher; inputs are assumed validated (see `rejection.rejection_sample`)."""
    num_seqs, k = proposals.shape
    vocab = target_probs.shape[-1]
    accepted = torch.empty(num_seqs, dtype=torch.int64, device=proposals.device)
    token = torch.empty(num_seqs, dtype=torch.int64, device=proposals.device)
    if not num_seqs:
        return accepted, token
    draft = draft_probs if draft_probs is not None else target_probs  # never read without a draft
    draft_strides = draft_probs.stride() if draft_probs is not None else (0, 0, 0)
    _random_kernel[(num_seqs,)](
        target_probs, draft, proposals, num_proposed, uniforms, inv_exponentials, accepted, token, k, vocab,
        *target_probs.stride(), *draft_strides, *proposals.stride(), *uniforms.stride(),
        *inv_exponentials.stride(),
        HAS_DRAFT=draft_probs is not None, BLOCK_V=min(triton.next_power_of_2(vocab), _MAX_BLOCK_V))
    return accepted, token
