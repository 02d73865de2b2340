"""The verify's choice (engine/runtime/rejection.py) and the n-gram proposer (engine/runtime/ngram.py), on fixed
distributions: greedy keeps the target's argmax run, and speculative sampling's tokens follow the target's
distribution, which they do not once the residual correction is taken away. On the torch reference (BACKEND): the
Triton kernel chooses the same tokens from the same draws (tests/engine/kernels/test_rejection_kernel.py), and tens
of thousands of draws would take the interpreter minutes."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from engine.kernels import rejection_ref  # noqa: E402
from engine.runtime.ngram import padded, propose_ngram  # noqa: E402
from engine.runtime.rejection import verify_greedy, verify_random  # noqa: E402

BACKEND = "torch"
DRAWS = 40_000
CHI2_DF4_999 = 18.47  # the chi-square's 99.9% quantile at 4 degrees of freedom (5 tokens)
TARGET = torch.tensor([[0.40, 0.25, 0.15, 0.12, 0.08], [0.05, 0.10, 0.20, 0.30, 0.35], [0.2] * 5])
DRAFT = torch.tensor([[0.10, 0.50, 0.30, 0.05, 0.05], [0.30, 0.30, 0.20, 0.10, 0.10]])


def test_ngram_proposes_what_followed_the_longest_suffix_first_seen():
    history = [1, 2, 3, 9, 2, 3, 7, 8, 1, 2, 3]
    assert propose_ngram(history, 2) == [9, 2]  # "1 2 3" at 0 (not the shorter "2 3", nor its later match)
    assert propose_ngram([5, 6, 5, 6], 3) == [5, 6]  # "5 6" at 0, and only two tokens follow it
    assert propose_ngram([1, 2, 3], 2) == []  # nothing recurs
    assert propose_ngram([4, 4], 5) == [4]


def test_a_short_proposal_is_padded_to_k():
    assert padded([9, 2], 4, [1]) == [9, 2, 2, 2]
    assert padded([], 2, [7, 3]) == [3, 3]


def test_greedy_keeps_the_argmax_run_and_adds_the_targets_token():
    logits = torch.log(TARGET[[0, 1, 2]]).unsqueeze(0).repeat(3, 1, 1)  # argmax 0, then 4, then 0 (ties: first)
    proposals = torch.tensor([[0, 4], [0, 3], [1, 4]])
    accepted, token = verify_greedy(logits, proposals, torch.tensor([2, 2, 2]), BACKEND)
    assert accepted.tolist() == [2, 1, 0] and token.tolist() == [0, 4, 0]
    fewer = torch.tensor([1, 2, 0])  # fewer proposed: kept no further
    accepted, token = verify_greedy(logits, proposals, fewer, BACKEND)
    assert accepted.tolist() == [1, 1, 0] and token.tolist() == [4, 4, 0]


def _tokens(proposer, generator):
    """Each draw's first two tokens (the second where the first was a kept proposal: the verify produced it).
    proposer: "draft" draws its proposals from DRAFT and hands the verify DRAFT; "one-hot" draws them alike and
    hands none (an n-gram lookup's proposals vary, q one-hot); "argmax" proposes DRAFT's likeliest tokens every
    time, q one-hot (an EAGLE or MTP head proposes greedily)."""
    if proposer == "argmax":
        proposals = DRAFT.argmax(dim=-1).unsqueeze(0).repeat(DRAWS, 1)
    else:
        proposals = torch.stack([torch.multinomial(DRAFT[i], DRAWS, replacement=True, generator=generator)
                                 for i in range(2)], dim=1)
    target = TARGET.unsqueeze(0).expand(DRAWS, 3, 5)
    draft = DRAFT.unsqueeze(0).expand(DRAWS, 2, 5) if proposer == "draft" else None
    accepted, token = verify_random(target, proposals, torch.full((DRAWS,), 2), draft, generator, BACKEND)
    first = torch.where(accepted > 0, proposals[:, 0], token)
    second = torch.where(accepted > 1, proposals[:, 1], token)[accepted > 0]
    return first, second


def _chi2(tokens, probs) -> float:
    observed = torch.bincount(tokens, minlength=5).double()
    expected = probs.double() * len(tokens)
    return float(((observed - expected) ** 2 / expected).sum())


@pytest.mark.parametrize("proposer", ["draft", "one-hot", "argmax"])
def test_speculative_sampling_follows_the_targets_distribution(proposer):
    first, second = _tokens(proposer, torch.Generator().manual_seed(0))
    assert _chi2(first, TARGET[0]) < CHI2_DF4_999
    assert _chi2(second, TARGET[1]) < CHI2_DF4_999


def test_without_the_residual_the_tokens_do_not_follow_the_target(monkeypatch):
    monkeypatch.setattr(rejection_ref, "residual", lambda p, q: p)  # a rejection redrawn from p itself
    first, second = _tokens("draft", torch.Generator().manual_seed(0))
    assert _chi2(first, TARGET[0]) > 10 * CHI2_DF4_999


def test_a_bonus_token_is_drawn_from_the_target_after_every_proposal_kept():
    target = torch.tensor([[[0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]])  # proposal 1 is certain; then token 2
    accepted, token = verify_random(target, torch.tensor([[1]]), torch.tensor([1]), None, torch.Generator(),
                                  BACKEND)
    assert accepted.tolist() == [1] and token.tolist() == [2]


@pytest.mark.parametrize("sampling", ["greedy", "random"])
def test_on_a_cpu_the_engine_verifies_with_the_torch_reference(monkeypatch, sampling):
    """auto picks the kernels' backend as the attention's: Triton on CUDA (tests/engine/runtime/test_runtime_triton.py),
    the reference on a CPU unless the interpreter is asked for."""
    from engine.kernels import rejection
    from engine.runtime.sampler import Sampler, SamplingParams

    monkeypatch.setenv("TRITON_INTERPRET", "0")
    called = []
    for name in ("rejection_sample_ref", "rejection_sample_greedy_ref"):
        original = getattr(rejection, name)
        monkeypatch.setattr(rejection, name, lambda *a, _f=original, _n=name: called.append(_n) or _f(*a))
    logits = torch.log(TARGET).unsqueeze(0)
    Sampler(torch.device("cpu"), 0).verify(logits, torch.tensor([[0, 4]]), torch.tensor([2]),
                                           SamplingParams(sampling), backend="auto")
    assert called == ["rejection_sample_greedy_ref" if sampling == "greedy" else "rejection_sample_ref"]
