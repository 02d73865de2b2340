"""Speculative decoding on the real engine: the n-gram proposer's, a draft model's or an EAGLE or MTP head's
proposals verified in one chunk through the paged cache. Greedy output is the target's own, token for token, on
every tiny family, whatever is proposed; a draft that is the target itself has every proposal kept, greedy or
sampled, through preemptions; the kept counts reach the control plane and the records; the block tables stay sound
every step. (The heads' own proposals: test_runtime_heads.py.)"""
from __future__ import annotations

import dataclasses

import pytest

pytest.importorskip("torch")

from engine.core.blocks import blocks_for  # noqa: E402
from engine.core.sequence import SeqStatus  # noqa: E402
from engine.core.speculative import SpeculativeSpec  # noqa: E402
from engine.core.system import SystemSpec  # noqa: E402
from engine.errors import SpecError  # noqa: E402
from engine.runtime import engine as engine_module  # noqa: E402
from engine.runtime.engine import Engine  # noqa: E402
from tests.helpers.core_harness import check_block_manager  # noqa: E402

PLAIN = SystemSpec("vLLM", "vllm", block_size=4)
PROMPTS = [[1, 2, 3, 4, 1, 2, 3, 4, 1, 2], [5, 6, 7, 5, 6, 7, 5], [9, 10, 11, 12, 13]]
NEW_TOKENS = 14


def speculating(method: str = "ngram", k: int = 3, draft=None) -> SystemSpec:
    name = draft.name if draft is not None else None
    return dataclasses.replace(PLAIN, speculative=SpeculativeSpec(method, k, (0.5,) * k, name, draft))


def smaller(spec):
    """A one-layer draft of the target's family and vocabulary."""
    return dataclasses.replace(spec, name=f"{spec.name}-draft", num_layers=1)


def engine(spec, system: SystemSpec) -> Engine:
    return Engine(spec, system, num_gpu_blocks=64, attention_backend="torch")


@pytest.mark.parametrize("method", ["ngram", "draft", "eagle", "mtp"])
def test_greedy_speculation_is_the_targets_greedy_output(spec, method):
    system = speculating(method, draft=smaller(spec) if method == "draft" else None)
    assert engine(spec, system).generate(PROMPTS, NEW_TOKENS) == engine(spec, PLAIN).generate(PROMPTS, NEW_TOKENS)


def oracle(reference: dict[int, list[int]], wrong_at: int):
    """Proposals from the target's own greedy output, the one at index wrong_at of each step's made wrong: every
    step keeps some and rejects the rest, so the KV written for kept proposals is what the next steps read."""
    def propose(batch, tokens, forced):
        proposals = {}
        for seq_id, count in zip(batch.decode_seq_ids, batch.decode_proposed):
            if count:
                done = len(tokens[seq_id])
                proposal = list(reference[seq_id][done:done + count])
                if wrong_at < count:
                    proposal[wrong_at] = (proposal[wrong_at] + 1) % 7
                proposals[seq_id] = proposal
        return proposals
    return propose


@pytest.mark.parametrize("wrong_at", [0, 2, 4])
def test_kept_proposals_leave_the_output_the_targets(spec, monkeypatch, wrong_at):
    plain = engine(spec, PLAIN).generate(PROMPTS, NEW_TOKENS)
    reference = {i: prompt + out for i, (prompt, out) in enumerate(zip(PROMPTS, plain))}  # seq ids = request ids
    monkeypatch.setattr(engine_module, "ngram_proposals", oracle(reference, wrong_at))
    speculative = engine(spec, speculating(k=4))
    assert speculative.generate(PROMPTS, NEW_TOKENS) == plain
    accepted = sum(r.accepted_tokens for r in speculative.records.requests)
    assert accepted == sum(pair[1] for pair in speculative.records.speculation)
    assert accepted > 0 if wrong_at else accepted == 0


def test_the_records_count_each_requests_proposals_and_acceptances(opt_tiny):
    run = engine(opt_tiny, speculating())
    run.generate(PROMPTS, NEW_TOKENS)
    records = run.records
    requests, iterations = records.request_columns(), records.iteration_columns()
    assert sum(requests["proposed_tokens"]) == sum(iterations["proposed_tokens"]) > 0
    assert sum(requests["accepted_tokens"]) == sum(iterations["accepted_tokens"])
    assert len(iterations["proposed_tokens"]) == len(records.iterations)


def test_block_tables_stay_sound_through_speculating_steps(monkeypatch):
    from engine.specs.loader import load_model_spec
    llama = load_model_spec("llama-tiny")
    plain = engine(llama, PLAIN).generate(PROMPTS, NEW_TOKENS)
    reference = {i: prompt + out for i, (prompt, out) in enumerate(zip(PROMPTS, plain))}
    monkeypatch.setattr(engine_module, "ngram_proposals", oracle(reference, 2))
    run = Engine(llama, speculating(k=4), num_gpu_blocks=12, num_cpu_blocks=16, attention_backend="torch")
    step, checked = run._step, []

    def checked_step(serving, sampling, time_fn):
        more = step(serving, sampling, time_fn)
        scheduler = serving.core.scheduler
        blocks = scheduler.allocator
        check_block_manager(blocks, lambda seq_id: scheduler._seqs[seq_id].status)
        for seq_id, seq in scheduler._seqs.items():  # the rejected proposals' blocks were given back
            if seq.status is SeqStatus.RUNNING and seq_id in blocks.block_tables and seq.length > seq.prompt_len:
                assert len(blocks.block_tables[seq_id]) == blocks_for(seq.length - 1, blocks.block_size)
        checked.append(True)
        return more
    monkeypatch.setattr(run, "_step", checked_step)
    assert run.generate(PROMPTS, NEW_TOKENS) == plain
    assert checked


@pytest.mark.parametrize("sampling", ["greedy", "random"])
@pytest.mark.parametrize("preemption", ["recompute", "swap"])
def test_a_draft_that_is_the_target_has_every_proposal_kept(sampling, preemption):
    """Its KV, kept in its own pool over the target's block tables, follows every step, swap and recompute: a
    stale or misplaced draft KV would propose otherwise than the target (greedy), or draw from another
    distribution than the one the verify divides by (sampled), and lose proposals."""
    from engine.specs.loader import load_model_spec
    llama = load_model_spec("llama-tiny")
    system = dataclasses.replace(speculating("draft", k=4, draft=llama), preemption=preemption)
    run = Engine(llama, system, num_gpu_blocks=12, num_cpu_blocks=16, attention_backend="torch")
    out = run.generate(PROMPTS, NEW_TOKENS, sampling=sampling)
    requests = run.records.requests
    assert sum(r.num_preemptions for r in requests) > 0
    assert all(r.accepted_tokens == r.proposed_tokens > 0 for r in requests)
    if sampling == "greedy":
        assert out == engine(llama, PLAIN).generate(PROMPTS, NEW_TOKENS)


def test_sampled_speculation_runs_and_repeats_itself(opt_tiny):
    for system in (speculating(), speculating("draft", draft=smaller(opt_tiny)), speculating("eagle"),
                   speculating("mtp")):
        run = engine(opt_tiny, system)
        first = run.generate(PROMPTS, NEW_TOKENS, sampling="random")
        assert first == run.generate(PROMPTS, NEW_TOKENS, sampling="random")
        assert all(len(out) == NEW_TOKENS and all(0 <= t < opt_tiny.vocab_size for t in out) for out in first)


def test_a_draft_of_another_vocabulary_is_refused(opt_tiny):
    other = dataclasses.replace(smaller(opt_tiny), vocab_size=256)
    with pytest.raises(SpecError, match="system.speculative.draft_model: opt-tiny-draft has a vocabulary of 256"):
        engine(opt_tiny, speculating("draft", draft=other))


def test_an_unknown_draft_model_is_refused_naming_the_key(opt_tiny):
    system = dataclasses.replace(PLAIN, speculative=SpeculativeSpec("draft", 2, (0.5, 0.5), "no-such-model"))
    with pytest.raises(SpecError, match="Engine: system.speculative.draft_model: unknown model 'no-such-model'"):
        engine(opt_tiny, system)


def test_samples_and_beams_are_refused_when_speculating(opt_tiny):
    run = engine(opt_tiny, speculating())
    with pytest.raises(ValueError, match="request 0: n=2, but vLLM speculates"):
        run.generate(PROMPTS[:1], 4, n=2)
    with pytest.raises(ValueError, match="request 0: beam_width=2, but vLLM speculates"):
        run.beam_search(PROMPTS[:1], 4, beam_width=2)


@pytest.mark.parametrize("method", ["ngram", "draft", "eagle", "mtp"])
def test_a_prefix_cached_replay_speculates_over_its_streams(opt_tiny, method):
    """Its sequences generate their streams' outputs and propose the streams' next tokens: the records carry the
    cached prompt tokens and the proposals both."""
    system = dataclasses.replace(speculating(method, draft=smaller(opt_tiny) if method == "draft" else None),
                                 prefix_caching=True)
    rows = [dict(arrival_s=0.0, prompt_len=12, output_len=9, n=1, prefix_len=8),
            dict(arrival_s=0.3, prompt_len=14, output_len=6, n=1, prefix_len=8)]
    result = Engine(opt_tiny, system, num_gpu_blocks=20, attention_backend="torch").replay(rows,
                                                                                          time_fn=lambda b: 0.01)
    columns = result.request_columns()
    assert columns["cached_tokens"] == [0, 8]
    assert all(p > 0 for p in columns["proposed_tokens"]) and columns["output_len"] == [9, 6]
