"""A mixture's layer (Mixtral's, and Qwen3-MoE's with norm_topk_prob): its grouped-by-expert forward equals an
explicit loop over each token's top-k experts."""
import pytest

torch = pytest.importorskip("torch")

from engine.runtime.model import build_decoder  # noqa: E402
from engine.specs.loader import load_model_spec  # noqa: E402


@pytest.fixture(params=["mixtral-tiny", "qwen3-moe-tiny"])
def moe(request):
    return build_decoder(load_model_spec(request.param), "cpu", torch.float32, 0).layers[0].mlp


def per_token(moe, x):
    """Hugging Face's routing, one token at a time: softmax over all logits, top k, renormalized."""
    rows = []
    for token in x:
        probs = torch.softmax(moe.gate(token).double(), dim=-1)
        top = probs.topk(moe.top_k).indices.tolist()
        total = sum(float(probs[e]) for e in top)
        rows.append(sum(float(probs[e]) / total * moe.experts[e](token[None])[0] for e in top))
    return torch.stack(rows)


def test_the_layer_is_the_weighted_sum_of_each_tokens_top_experts(moe):
    x = torch.randn(37, 64, generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(moe(x), per_token(moe, x), atol=1e-6, rtol=1e-5)


def test_routing_picks_the_k_most_likely_experts_and_weights_them_to_one(moe):
    x = torch.randn(11, 64, generator=torch.Generator().manual_seed(2))
    experts, weights = moe.route(x)
    assert experts.shape == weights.shape == (11, 2)
    torch.testing.assert_close(weights.sum(-1), torch.ones(11))
    probs = torch.softmax(moe.gate(x), dim=-1)
    assert torch.equal(experts, probs.topk(2).indices)
    assert len(set(experts.flatten().tolist())) > 2, "the tokens should spread over more than two experts"


def test_an_expert_no_token_picked_adds_nothing(moe):
    x = torch.randn(1, 64, generator=torch.Generator().manual_seed(3))
    picked = set(moe.route(x)[0].flatten().tolist())
    with torch.no_grad():
        for e in set(range(4)) - picked:  # an idle expert's weights, poisoned: the output must not read them
            moe.experts[e].w_out.weight.fill_(float("nan"))
    torch.testing.assert_close(moe(x), per_token(moe, x), atol=1e-6, rtol=1e-5)
