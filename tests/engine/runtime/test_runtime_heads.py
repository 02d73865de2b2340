"""The EAGLE and MTP heads on the real engine (engine/runtime/head_model.py, head_proposer.py): every proposal's
logits are the head's over the sequence's whole history recomputed densely (no cache), through prefill chunks,
kept and rejected proposals, swaps and recomputes, so its paged KV and the hidden states it follows are the
right ones; its time is the iteration's; its KV takes its share of the pool."""
from __future__ import annotations

import dataclasses

import pytest

torch = pytest.importorskip("torch")

from engine.core.speculative import SpeculativeSpec  # noqa: E402
from engine.core.system import SystemSpec  # noqa: E402
from engine.runtime import head_proposer  # noqa: E402
from engine.runtime.engine import Engine  # noqa: E402
from engine.runtime.model import AttentionMetadata  # noqa: E402
from engine.specs.loader import load_model_spec  # noqa: E402

PROMPTS = [[1, 2, 3, 4, 1, 2, 3, 4, 1, 2], [5, 6, 7, 5, 6, 7, 5], [0, 1, 3, 2, 7]]
NEW_TOKENS = 14
ATOL = 1e-4  # fp32 paged vs dense: only summation order differs


def head_system(method: str, k: int = 4, preemption: str = "recompute") -> SystemSpec:
    return SystemSpec("vLLM", "vllm", block_size=4, preemption=preemption,
                      speculative=SpeculativeSpec(method, k, (0.5,) * k))


class ProposalRecorder:
    """Wraps an engine's head: for every speculating decode of every step, its tokens then, and the logits each
    of its proposals was the argmax of (round j's rows are the decodes proposing more than j, in batch order)."""

    def __init__(self, engine: Engine, monkeypatch):
        self.proposals: list[tuple[list[int], list[int], torch.Tensor]] = []  # (history, proposals, logits)
        head = engine.head
        propose, logits = head.propose, head.head.logits
        rounds: list[torch.Tensor] = []

        def recording_logits(target, outputs):
            out = logits(target, outputs)
            rounds.append(out.float().cpu())
            return out

        def recording_propose(batch, block_table_fn, tokens, forced):
            rounds.clear()
            made = propose(batch, block_table_fn, tokens, forced)
            order = [s for s, n in zip(batch.decode_seq_ids, batch.decode_proposed or []) if n]
            for seq_id in order:
                count = len(made.tokens[seq_id])
                rows = [rounds[j][[s for s in order if len(made.tokens[s]) > j].index(seq_id)] for j in range(count)]
                self.proposals.append((list(tokens[seq_id]), made.tokens[seq_id], torch.stack(rows)))
            return made

        monkeypatch.setattr(head.head, "logits", recording_logits)
        monkeypatch.setattr(head, "propose", recording_propose)


@torch.inference_mode()
def dense_head_logits(engine: Engine, history: list[int], proposals: list[int]) -> torch.Tensor:
    """The head's logits at each proposal, recomputed from nothing: the target's hidden states over the history
    but its last token, the head's rows over them (each the token after), then one row a proposal, chained."""
    target, head = engine.runner.model, engine.head.head
    context = len(history)
    hidden = target(torch.tensor(history[:-1]), torch.arange(context - 1), AttentionMetadata.dense(context - 1))
    ids, positions, logits = list(history[1:]), list(range(context - 1)), []
    for j, proposal in enumerate(proposals):
        outputs = head(target, torch.tensor(ids), torch.tensor(positions), hidden, AttentionMetadata.dense(len(ids)),
                       None)
        logits.append(head.logits(target, outputs[-1:]).squeeze(0))
        ids.append(proposal)
        positions.append(context - 1 + j)
        hidden = torch.cat([hidden, outputs[-1:]])
    return torch.stack(logits).float()


@pytest.mark.parametrize("name", ["llama-tiny", "opt-tiny"])
@pytest.mark.parametrize("preemption", ["recompute", "swap"])
@pytest.mark.parametrize("method", ["eagle", "mtp"])
def test_every_proposal_is_the_heads_over_its_whole_history(monkeypatch, name, preemption, method):
    # eight tokens: a random head's proposals are kept now and then, so kept rows are followed too
    spec = dataclasses.replace(load_model_spec(name), vocab_size=8)
    engine = Engine(spec, head_system(method, preemption=preemption), num_gpu_blocks=12, num_cpu_blocks=16,
                    attention_backend="torch")
    recorder = ProposalRecorder(engine, monkeypatch)
    engine.generate(PROMPTS, NEW_TOKENS)
    requests = engine.records.requests
    assert sum(r.num_preemptions for r in requests) > 0 and sum(r.accepted_tokens for r in requests) > 0
    assert sum(len(proposals) for _, proposals, _ in recorder.proposals) == sum(r.proposed_tokens for r in requests)
    for history, proposals, logits in recorder.proposals:
        assert proposals == logits.argmax(dim=-1).tolist()
        torch.testing.assert_close(logits, dense_head_logits(engine, history, proposals), atol=ATOL, rtol=0)


@pytest.mark.parametrize("method", ["draft", "eagle", "mtp"])
def test_the_proposers_time_is_the_iterations(monkeypatch, method):
    """On the forward clock an iteration lasts the target's step and the proposer's work: a draft's forwards
    before the target's, a head's before and after it."""
    from engine.runtime import draft

    class FixedTimer:
        def __init__(self, device):
            self.seconds = 0.25

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            pass

    monkeypatch.setattr(head_proposer, "IterationTimer", FixedTimer)
    monkeypatch.setattr(draft, "IterationTimer", FixedTimer)
    spec = load_model_spec("llama-tiny")
    system = head_system(method, k=2)
    if method == "draft":
        smaller = dataclasses.replace(spec, name="llama-tiny-draft", num_layers=1)
        system = dataclasses.replace(system, speculative=SpeculativeSpec("draft", 2, (0.5, 0.5), smaller.name,
                                                                         smaller))
    engine = Engine(spec, system, num_gpu_blocks=64, attention_backend="torch")
    execute = engine.runner.execute
    monkeypatch.setattr(engine.runner, "execute", lambda *a, **kw: (execute(*a, **kw)[0], 0.0))  # the target: free
    engine.generate(PROMPTS, 6)
    proposer_s = 0.25 if method == "draft" else 0.5
    assert {it.duration_s for it in engine.records.iterations} == {proposer_s}
    # a time_fn (a measured clock's) reads it too
    engine.replay([(0.0, 5, 4, 1)], time_fn=lambda batch: engine.last_proposer_s)
    assert {it.duration_s for it in engine.records.iterations} == {proposer_s}


def test_a_heads_kv_takes_its_share_of_the_pool():
    """A block holds the head's one layer of KV beside the target's: the pool sized from memory has fewer blocks."""
    spec = load_model_spec("llama-tiny")
    budget = 1 << 20
    plain = Engine(spec, SystemSpec("vLLM", "vllm", block_size=4), cpu_budget_bytes=budget, attention_backend="torch")
    headed = Engine(spec, head_system("eagle"), cpu_budget_bytes=budget, attention_backend="torch")
    assert headed.num_gpu_blocks == pytest.approx(plain.num_gpu_blocks * spec.num_layers / (spec.num_layers + 1), abs=1)
    assert headed.head.cache.num_gpu_blocks == headed.num_gpu_blocks


def test_a_head_runs_decodes_eagerly_and_asking_for_graphs_says_why():
    """It reads every token's hidden state, which a decode graph does not keep."""
    from engine.runtime.graphs import resolve_cuda_graphs

    cuda = torch.device("cuda", 0)
    on, why = resolve_cuda_graphs(None, cuda, "triton", keeps_hidden=True)
    assert not on and "EAGLE or MTP head" in why
    with pytest.warns(RuntimeWarning, match="cuda_graphs: true is ignored .*EAGLE or MTP head"):
        assert resolve_cuda_graphs(True, cuda, "triton", keeps_hidden=True)[0] is False
    assert Engine(load_model_spec("llama-tiny"), head_system("mtp"), num_gpu_blocks=8,
                  attention_backend="torch").runner.keep_hidden
