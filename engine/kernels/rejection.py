"""Public speculative decoding choice (rejection sampling): validate, pick a backend, run.

B speculating sequences, K proposal positions (a sequence proposing fewer has num_proposed < K; the positions past
it are never kept), V tokens. Returns (accepted [B], the target's token after them [B]), int64, without reading
the device back (the engine fetches them with the iteration's other tokens).
"""
from __future__ import annotations

import torch

from engine.kernels import checks
from engine.kernels.backend import resolve_backend
from engine.kernels.rejection_ref import rejection_sample_greedy_ref, rejection_sample_ref

PROB_DTYPES = (torch.float32,)


def check_proposals(proposals, num_proposed) -> None:
    checks.require_rank("proposals", proposals, 2, "[num_seqs, K]")
    checks.require_rank("num_proposed", num_proposed, 1, "[num_seqs]")
    checks.require_dtype("proposals", proposals, (torch.int64,))
    checks.require_dtype("num_proposed", num_proposed, (torch.int64,))
    if num_proposed.shape[0] != proposals.shape[0]:
        raise ValueError(f"num_proposed has {num_proposed.shape[0]} rows but proposals has {proposals.shape[0]}")


def check_proposal_bounds(proposals: torch.Tensor, num_proposed: torch.Tensor, vocab: int | None = None) -> None:
    """One device sync: a count past K, or (vocab given) a proposal outside the vocabulary, would be read outside
    its row."""
    num_seqs, k = proposals.shape
    if num_seqs == 0:
        return
    ids = proposals if k and vocab is not None else proposals.new_zeros(1)
    low, high, fewest, most = torch.stack([ids.min(), ids.max(), num_proposed.min(), num_proposed.max()]).tolist()
    if vocab is not None and (low < 0 or high >= vocab):
        raise ValueError(f"proposals hold token id {low if low < 0 else high}, outside the vocabulary 0..{vocab - 1}")
    if fewest < 0 or most > k:
        raise ValueError(f"num_proposed holds {fewest if fewest < 0 else most}, outside 0..{k} (K)")


def rejection_sample_greedy(target_argmax: torch.Tensor, proposals: torch.Tensor, num_proposed: torch.Tensor,
                            backend: str = "auto", *, check_bounds: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """Greedy verify: keep while the target's argmax (target_argmax int64 [B, K + 1]) is the proposal (proposals
    int64 [B, K], num_proposed int64 [B] of them each); the target's argmax after the run is its token.
    `check_bounds` as in `rejection_sample`."""
    check_proposals(proposals, num_proposed)
    checks.require_rank("target_argmax", target_argmax, 2, "[num_seqs, K + 1]")
    checks.require_dtype("target_argmax", target_argmax, (torch.int64,))
    checks.require_same_device(target_argmax=target_argmax, proposals=proposals, num_proposed=num_proposed)
    if tuple(target_argmax.shape) != (proposals.shape[0], proposals.shape[1] + 1):
        raise ValueError(f"target_argmax is {tuple(target_argmax.shape)}, proposals {tuple(proposals.shape)}: "
                         "the target has one position more than the proposals")
    chosen = resolve_backend(backend, proposals.device)
    if check_bounds:
        check_proposal_bounds(proposals, num_proposed)
    if chosen == "torch":
        return rejection_sample_greedy_ref(target_argmax, proposals, num_proposed)
    from engine.kernels.rejection_sampler import rejection_sample_greedy_triton

    return rejection_sample_greedy_triton(target_argmax, proposals, num_proposed)


def check_random_inputs(target_probs, proposals, num_proposed, draft_probs, uniforms, inv_exponentials) -> None:
    """Ranks, dtypes, devices and sizes: metadata only, no device sync."""
    check_proposals(proposals, num_proposed)
    checks.require_rank("target_probs", target_probs, 3, "[num_seqs, K + 1, V]")
    checks.require_rank("uniforms", uniforms, 2, "[num_seqs, K]")
    checks.require_rank("inv_exponentials", inv_exponentials, 2, "[num_seqs, V]")
    checks.require_dtype("target_probs", target_probs, PROB_DTYPES)
    tensors = dict(target_probs=target_probs, uniforms=uniforms, inv_exponentials=inv_exponentials)
    if draft_probs is not None:
        checks.require_rank("draft_probs", draft_probs, 3, "[num_seqs, K, V]")
        tensors["draft_probs"] = draft_probs
    checks.require_same_dtype(**tensors)
    checks.require_same_device(proposals=proposals, num_proposed=num_proposed, **tensors)
    num_seqs, k = proposals.shape
    vocab = target_probs.shape[2]
    expected = dict(target_probs=(num_seqs, k + 1, vocab), uniforms=(num_seqs, k),
                    inv_exponentials=(num_seqs, vocab), draft_probs=(num_seqs, k, vocab))
    for name, tensor in tensors.items():
        if tuple(tensor.shape) != expected[name]:
            raise ValueError(f"{name} is {tuple(tensor.shape)}; with proposals {tuple(proposals.shape)} and "
                             f"{vocab} tokens it must be {expected[name]}")


def rejection_sample(target_probs: torch.Tensor, proposals: torch.Tensor, num_proposed: torch.Tensor,
                     draft_probs: torch.Tensor | None, uniforms: torch.Tensor, inv_exponentials: torch.Tensor,
                     backend: str = "auto", *, check_bounds: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """Speculative sampling (rejection_ref.py says the rule) over normalized distributions: target_probs float32
    [B, K + 1, V], draft_probs [B, K, V] the proposer's (None: a deterministic proposer, one-hot on each proposal),
    uniforms [B, K] in [0, 1) and inv_exponentials [B, V] the reciprocals of Exp(1) draws.

    `check_bounds` range-checks the proposals and counts at the cost of one device sync; a caller that built them
    on the host from checked tokens (the runner) may pass False."""
    check_random_inputs(target_probs, proposals, num_proposed, draft_probs, uniforms, inv_exponentials)
    chosen = resolve_backend(backend, target_probs.device)
    if check_bounds:
        check_proposal_bounds(proposals, num_proposed, target_probs.shape[2])
    if chosen == "torch":
        return rejection_sample_ref(target_probs, proposals, num_proposed, draft_probs, uniforms, inv_exponentials)
    from engine.kernels.rejection_sampler import rejection_sample_triton

    return rejection_sample_triton(target_probs, proposals, num_proposed, draft_probs, uniforms, inv_exponentials)
