"""The real engine as a split fleet (engine/runtime/split_engine.py): a prefill engine and a decode engine of one
model, each request's prompt KV copied from one cache to the other. It generates the colocated engine's greedy
tokens, the decode engine reads the KV the copy moved (a corrupted copy changes them), every request ends once
with every block back, and fed the engines' times the simulator's split fleet takes the same decisions. Its decode
engine may speculate by n-gram lookup, and still generates the colocated engine's greedy tokens."""
import dataclasses

import pytest

torch = pytest.importorskip("torch")

from runtime_reference import BACKEND  # noqa: E402

from engine.core.speculative import SpeculativeSpec  # noqa: E402
from engine.core.system import SystemSpec  # noqa: E402
from engine.runtime import split_engine  # noqa: E402
from engine.runtime.engine import Engine  # noqa: E402
from engine.runtime.kv_transfer import copy_prompt_kv  # noqa: E402
from engine.runtime.split_engine import SplitEngine  # noqa: E402
from engine.specs.loader import load_model_spec  # noqa: E402

VLLM4 = SystemSpec("vLLM", "vllm", block_size=4)
# lengths inside one block, exactly one, just over, several (block_size 4)
PROMPTS = [[3], [5, 9, 2, 7], list(range(10, 15)), list(range(40, 53)), [11, 400, 77] * 7]
NEW_TOKENS = 8


def split_of(spec, prefill_blocks=64, decode_blocks=64, **kw) -> SplitEngine:
    return SplitEngine.build(spec, VLLM4, prefill_blocks, decode_blocks, attention_backend=BACKEND, **kw)


def colocated(spec, prompts=PROMPTS, new_tokens=NEW_TOKENS):
    engine = Engine(spec, VLLM4, "cpu", seed=0, num_gpu_blocks=64, num_cpu_blocks=0, attention_backend=BACKEND)
    return engine.generate(prompts, max_new_tokens=new_tokens)


@pytest.mark.parametrize("decode_blocks", [64, 14], ids=["roomy", "tight"])
def test_split_engine_generates_the_colocated_engines_greedy_tokens(attention_spec, decode_blocks):
    # tight: 14 decode blocks (watermark 1%: 13 usable) fit two or three requests at a time, so the rest
    # wait with their KV held on the prefill engine and go over as decodes finish
    split = split_of(attention_spec, decode_blocks=decode_blocks, copy_time_fn=lambda num_tokens: 0.0)
    assert split.generate(PROMPTS, NEW_TOKENS) == colocated(attention_spec)
    # copies cost nothing: one that started after its request's first token waited for decode blocks (hold)
    held = [start > prefilled for _, _, _, prefilled, start, *_ in split.result.transfers]
    assert len(held) == len(PROMPTS) and any(held) == (decode_blocks == 14)


def test_a_corrupted_copy_changes_the_tokens(monkeypatch):
    """The decode engine decodes from the KV the copy moved, not from anything of its own: the copy with its
    first block lost (zeros where it would go) changes the tokens. On llama-tiny, whose random weights read the
    context (opt-tiny's mostly repeat one token whatever they attend to)."""
    spec = load_model_spec("llama-tiny")
    expected = colocated(spec)

    def losing_the_first_block(src, src_blocks, dst, dst_blocks, num_tokens):
        seconds = copy_prompt_kv(src, src_blocks, dst, dst_blocks, num_tokens)
        for layer in dst.layers:
            layer.key[dst_blocks[0]] = 0
            layer.value[dst_blocks[0]] = 0
        return seconds

    monkeypatch.setattr(split_engine, "copy_prompt_kv", losing_the_first_block)
    corrupted = split_of(spec).generate(PROMPTS, NEW_TOKENS)
    assert [c[0] for c in corrupted] == [e[0] for e in expected]  # the first token is the prefill engine's
    # the last prompt repeats 3 tokens 7 times: its first block says little that its other blocks don't
    assert [c != e for c, e in zip(corrupted, expected)] == [True, True, True, True, False]


def test_every_request_ends_once_and_every_block_comes_back(opt_tiny):
    """Conservation: a trace with staggered arrivals, a one-token request and a decode pool that makes the
    rest wait (hold): each request is copied once (the one-token one never), finished once with all its
    tokens, and at the end both pools are whole and the prefill engine holds nothing."""
    trace = [(0.0, 9, 6), (0.0, 13, 1), (0.001, 17, 5), (0.002, 5, 7), (0.002, 21, 4), (0.003, 3, 6)]
    split = split_of(opt_tiny, prefill_blocks=40, decode_blocks=12, copy_time_fn=lambda n: 0.0)
    result = split.replay(trace)
    assert sorted(result.outputs) == list(range(len(trace)))
    assert [len(result.outputs[i]) for i in range(len(trace))] == [row[2] for row in trace]
    assert result.finished_on_prefill == [1]
    copied = [row[0] for row in result.transfers]
    assert sorted(copied) == [0, 2, 3, 4, 5] and len(result.copy_s) == len(copied)
    assert sorted(r.request_id for r in result.decode.requests) == [0, 2, 3, 4, 5]
    assert not result.prefill.requests  # a prefill engine's requests are the decode engine's to record
    # copies cost nothing here: a copy that started after its first token waited for decode blocks (hold)
    assert any(start > prefilled for _, _, _, prefilled, start, *_ in result.transfers)
    for core in (split.prefill_core, split.decode_core):
        scheduler = core.scheduler
        assert scheduler.allocator.num_free_blocks == scheduler.num_gpu_blocks
        assert not scheduler.held_kv and not scheduler.has_unfinished() and core.outstanding == 0
    # time to first token is the prefill engine's: the decode records keep it
    firsts = {r.request_id: r.first_token_s for r in result.decode.requests}
    assert all(firsts[row[0]] == row[3] for row in result.transfers)


def test_the_engines_refuse_what_the_split_fleet_does_not_serve(opt_tiny):
    split = split_of(opt_tiny)
    with pytest.raises(ValueError, match="one sequence per request"):
        split.replay([(0.0, 5, 4, 2)])
    caching = dataclasses.replace(VLLM4, prefix_caching=True)
    with pytest.raises(ValueError, match="prefix caching"):
        SplitEngine.build(opt_tiny, caching, 16, 16, attention_backend=BACKEND)


@pytest.mark.parametrize("decode_blocks", [64, 14], ids=["roomy", "tight"])
def test_a_decode_engine_speculating_by_ngram_generates_the_colocated_engines_greedy_tokens(attention_spec,
                                                                                          decode_blocks):
    """The decode engine verifies its n-gram proposals from its first decode step on (the prefill engine proposes
    nothing): greedy output is the target's alone, as the plain colocated engine generates it; the kept counts
    reach the decode engine's records, each iteration's and each request's."""
    system = dataclasses.replace(VLLM4, speculative=SpeculativeSpec("ngram", 3, (0.5,) * 3))
    split = SplitEngine.build(attention_spec, system, 64, decode_blocks, attention_backend=BACKEND,
                              copy_time_fn=lambda num_tokens: 0.0)
    assert split.prefill.system.speculative is None and split.decode.system.speculative is not None
    assert split.generate(PROMPTS, NEW_TOKENS) == colocated(attention_spec)
    decode = split.result.decode
    proposed = sum(p for p, _ in decode.speculation)
    accepted = sum(a for _, a in decode.speculation)
    assert len(decode.speculation) == len(decode.iterations) and not split.result.prefill.speculation
    columns = decode.request_columns()
    assert (sum(columns["proposed_tokens"]), sum(columns["accepted_tokens"])) == (proposed, accepted)
    assert 0 < accepted < proposed  # the prompt of repeats has its proposals kept
    for core in (split.prefill_core, split.decode_core):
        assert core.scheduler.allocator.num_free_blocks == core.scheduler.num_gpu_blocks


def test_only_the_decode_engine_speculates(opt_tiny):
    ngram = dataclasses.replace(VLLM4, speculative=SpeculativeSpec("ngram", 2, (0.5, 0.5)))
    prefill = Engine(opt_tiny, ngram, num_gpu_blocks=16, attention_backend=BACKEND)
    decode = Engine(opt_tiny, VLLM4, num_gpu_blocks=16, attention_backend=BACKEND, model=prefill.runner.model)
    with pytest.raises(ValueError, match="prefill engine runs without speculative decoding"):
        SplitEngine(prefill, decode)


@pytest.mark.parametrize("method", ["draft", "eagle"])
def test_a_decode_engine_proposing_from_the_prompts_state_is_refused(opt_tiny, method):
    """A draft model or a head follows every token the target computes: on the decode engine it would lack the
    prompt's, which the prefill engine computed."""
    draft = dataclasses.replace(opt_tiny, name="opt-tiny-draft", num_layers=1) if method == "draft" else None
    spec = SpeculativeSpec(method, 2, (0.5, 0.5), draft.name if draft else None, draft)
    with pytest.raises(ValueError, match=f"decode engine speculates with 'ngram' alone, not '{method}': its proposer"):
        SplitEngine.build(opt_tiny, dataclasses.replace(VLLM4, speculative=spec), 16, 16, attention_backend=BACKEND)
