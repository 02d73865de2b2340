"""Speculative decoding's choice: the Triton kernels against the torch reference, given the same draws (so the
same tokens, exactly), and bad inputs refused before anything launches."""

import pytest

torch = pytest.importorskip("torch")

from engine.kernels import (  # noqa: E402
    rejection_sample,
    rejection_sample_greedy,
    rejection_sample_greedy_ref,
    rejection_sample_ref,
)
from engine.kernels.backend import triton_available  # noqa: E402
from tests.helpers.kernel_checks import DEVICE, TRITON_RUNNABLE  # noqa: E402

needs_triton = pytest.mark.skipif(not (TRITON_RUNNABLE and triton_available()),
                                  reason="needs triton, and CUDA or TRITON_INTERPRET=1")


def random_case(num_seqs, k, vocab, seed, draft=True):
    """Distributions peaked enough that proposals are kept and rejected both."""
    gen = torch.Generator().manual_seed(seed)
    target = torch.softmax(3 * torch.randn(num_seqs, k + 1, vocab, generator=gen), dim=-1)
    draft_probs = None
    if draft:
        draft_probs = torch.softmax(torch.log(target[:, :k]) + 3 * torch.randn(num_seqs, k, vocab, generator=gen),
                                    dim=-1)
        proposals = torch.stack([torch.multinomial(draft_probs[:, i], 1, generator=gen).squeeze(1)
                                 for i in range(k)], dim=1)
    else:  # a deterministic proposer: the target's likeliest token, now and then another
        proposals = target[:, :k].argmax(dim=-1)
        proposals[::2, k // 2] = torch.randint(0, vocab, (proposals[::2].shape[0],), generator=gen)
    num_proposed = torch.randint(0, k + 1, (num_seqs,), generator=gen)
    num_proposed[:2] = torch.tensor([k, 0])[:num_seqs]
    uniforms = torch.rand(num_seqs, k, generator=gen)
    inv_exponentials = 1 / torch.empty(num_seqs, vocab).exponential_(generator=gen)
    args = (target, proposals, num_proposed, draft_probs, uniforms, inv_exponentials)
    return tuple(a.to(DEVICE) if a is not None else None for a in args)


@needs_triton
@pytest.mark.parametrize("num_seqs,k,vocab", [(24, 4, 300), (9, 1, 7), (16, 3, 2500)])  # one, several vocab tiles
@pytest.mark.parametrize("draft", [True, False], ids=["draft", "one-hot"])
def test_rejection_sample_triton_matches_reference(num_seqs, k, vocab, draft):
    args = random_case(num_seqs, k, vocab, seed=num_seqs + k, draft=draft)
    accepted, token = rejection_sample(*args, backend="triton")
    ref_accepted, ref_token = rejection_sample_ref(*args)
    assert accepted.tolist() == ref_accepted.tolist() and token.tolist() == ref_token.tolist()
    num_proposed = args[2]
    assert 0 < int((accepted < num_proposed).sum()) < int((num_proposed > 0).sum())  # kept and rejected both


@needs_triton
def test_rejection_sample_triton_takes_the_target_where_nothing_is_owed():
    """A draft over the target everywhere (rounding can make one) rejects with nothing owed: the race is p's."""
    target, proposals, num_proposed, draft, uniforms, inv = random_case(12, 3, 50, seed=1)
    args = (target, proposals, num_proposed, target[:, :3] * 1.5, torch.full_like(uniforms, 0.9), inv)
    accepted, token = rejection_sample(*args, backend="triton")
    ref_accepted, ref_token = rejection_sample_ref(*args)
    assert accepted.tolist() == ref_accepted.tolist() == [0] * 12
    assert token.tolist() == ref_token.tolist() == (target[:, 0] * inv).argmax(dim=-1).tolist()


@needs_triton
def test_rejection_sample_triton_rejects_a_draw_equal_to_the_ratio():
    """Kept while u < p / q: a draw exactly at the ratio rejects (one-hot q: u = p)."""
    target, proposals, num_proposed, _, uniforms, inv = random_case(10, 2, 30, seed=2, draft=False)
    num_proposed = torch.full_like(num_proposed, 2)
    uniforms = target[:, :2].gather(2, proposals.unsqueeze(2)).squeeze(2)
    args = (target, proposals, num_proposed, None, uniforms, inv)
    accepted, token = rejection_sample(*args, backend="triton")
    ref_accepted, ref_token = rejection_sample_ref(*args)
    assert accepted.tolist() == ref_accepted.tolist() == [0] * 10 and token.tolist() == ref_token.tolist()


@needs_triton
def test_rejection_sample_triton_reads_strided_rows():
    """The runner gathers the target's rows; a transposed draw or a sliced distribution must read the same."""
    target, proposals, num_proposed, draft, uniforms, inv = random_case(8, 3, 40, seed=3)
    wide = torch.cat([target, target], dim=2)[:, :, :40]
    args = (wide, proposals, num_proposed, draft, uniforms.t().contiguous().t(), inv)
    assert [t.tolist() for t in rejection_sample(*args, backend="triton")] == \
        [t.tolist() for t in rejection_sample_ref(target, proposals, num_proposed, draft, uniforms, inv)]


@needs_triton
@pytest.mark.parametrize("k", [1, 4])
def test_rejection_sample_greedy_triton_matches_reference(k):
    gen = torch.Generator().manual_seed(k)
    target_argmax = torch.randint(0, 3, (40, k + 1), generator=gen).to(DEVICE)
    proposals = torch.randint(0, 3, (40, k), generator=gen).to(DEVICE)
    num_proposed = torch.randint(0, k + 1, (40,), generator=gen).to(DEVICE)
    got = rejection_sample_greedy(target_argmax, proposals, num_proposed, backend="triton")
    expected = rejection_sample_greedy_ref(target_argmax, proposals, num_proposed)
    assert [t.tolist() for t in got] == [t.tolist() for t in expected]


@pytest.mark.parametrize("backend", [pytest.param("triton", marks=needs_triton), "torch"])
def test_no_speculating_sequence_chooses_nothing(backend):
    args = random_case(0, 2, 10, seed=0)
    assert all(t.shape == (0,) for t in rejection_sample(*args, backend=backend))


def valid_args(**overrides):
    target, proposals, num_proposed, draft, uniforms, inv = random_case(3, 2, 10, seed=0)
    args = dict(target_probs=target, proposals=proposals, num_proposed=num_proposed, draft_probs=draft,
                uniforms=uniforms, inv_exponentials=inv)
    args.update(overrides)
    return args


REJECTS = {
    "proposals_dtype": (dict(proposals=torch.zeros(3, 2, dtype=torch.int32)), "proposals must have dtype torch.int64"),
    "target_rank": (dict(target_probs=torch.rand(3, 10)), "target_probs must have shape"),
    "target_dtype": (dict(target_probs=torch.rand(3, 3, 10, dtype=torch.float16)), "target_probs must have dtype"),
    "positions": (dict(target_probs=torch.rand(3, 2, 10)), r"target_probs is \(3, 2, 10\).* must be \(3, 3, 10\)"),
    "draft_vocab": (dict(draft_probs=torch.rand(3, 2, 9)), r"draft_probs is \(3, 2, 9\)"),
    "rows": (dict(num_proposed=torch.tensor([1, 2])), "num_proposed has 2 rows but proposals has 3"),
    "token": (dict(proposals=torch.tensor([[1, 10], [0, 0], [0, 0]])), "token id 10, outside the vocabulary 0..9"),
    "count": (dict(num_proposed=torch.tensor([3, 0, 0])), r"num_proposed holds 3, outside 0..2 \(K\)"),
}


@pytest.mark.parametrize("case", REJECTS.keys())
def test_rejection_sample_rejects(case):
    overrides, message = REJECTS[case]
    overrides = {name: value.to(DEVICE) for name, value in overrides.items()}
    with pytest.raises(ValueError, match=message):
        rejection_sample(**valid_args(**overrides), backend="torch")


def test_rejection_sample_greedy_rejects_a_target_of_other_positions():
    with pytest.raises(ValueError, match="the target has one position more than the proposals"):
        rejection_sample_greedy(torch.zeros(2, 2, dtype=torch.int64), torch.zeros(2, 2, dtype=torch.int64),
                                torch.zeros(2, dtype=torch.int64))
