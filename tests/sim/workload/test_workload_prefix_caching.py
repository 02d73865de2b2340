"""Workloads that show prefix caching: token identities (sim/workload/tokens.py), the system-prompt
workload (workload.system_prompt), the chatbot's rounds that hold their earlier rounds, and the
simulator with the cache on: step by step and fast-forwarded give the same bytes, and the summary's
prefix_hit_rate is the requests' cached prompt tokens over their prompt tokens."""
import dataclasses
import math

import numpy as np
import pytest

from calibrate.clock.roofline import RooflineCostModel
from calibrate.hardware.hardware import load_hardware
from engine.core.system import PAPER_SYSTEMS
from engine.errors import SpecError
from engine.specs.loader import load_model_spec
from sim.core.simulate import simulate
from sim.executors.replica_pool import ProcessReplicaPool
from sim.experiment.metrics import summarize
from sim.workload.chatbot import chatbot_requests
from sim.workload.config import WorkloadConfig, build_trace
from sim.workload.conversations import Conversations
from sim.workload.tokens import block_keys, system_prompt_segments
from sim.workload.trace import TokenSegments, Trace

SPEC = load_model_spec("opt-13b")


def parse(raw):
    return WorkloadConfig.from_dict(raw, "exp.yaml")


def test_block_keys_depend_on_the_tokens_alone():
    keys = block_keys([(1, 0, 10), (2, 0, 10)], 4, 20)
    assert block_keys([(1, 0, 4), (1, 4, 6), (2, 0, 10)], 4, 20) == keys  # the same tokens, cut otherwise
    assert len(keys) == 5 and block_keys([(1, 0, 10), (2, 0, 10)], 4, 17) == keys[:4]
    other = block_keys([(1, 0, 10), (3, 0, 10)], 4, 20)
    assert other[:2] == keys[:2] and other[2] != keys[2], "they part in block 2 (tokens 8-11 hold segment 2 or 3)"
    assert block_keys([(1, 1, 10)], 4, 10)[0] != block_keys([(1, 0, 10)], 4, 10)[0]


@pytest.mark.parametrize("raw, key, words", [
    ({"system_prompt": {"tokens": 0}}, "system_prompt.tokens", "positive"),
    ({"system_prompt": {"tokens": 8, "count": 0}}, "system_prompt.count", "positive"),
    ({"system_prompt": {"tokens": 8, "pick": 1}}, "system_prompt.pick", "unknown key"),
    ({"system_prompt": {"count": 2}}, "system_prompt.tokens", "missing"),
    ({"system_prompt": 512}, "system_prompt", "mapping"),
    ({"system_prompt": {"tokens": 8}, "prefix_tokens": 4}, "system_prompt", "prefix_tokens"),
    ({"system_prompt": {"tokens": 8}, "dataset": "chatbot"}, "system_prompt", "conversation"),
])
def test_system_prompt_errors_name_the_key(raw, key, words):
    with pytest.raises(SpecError) as err:
        parse(raw)
    assert err.value.key == f"workload.{key}" and words in str(err.value)


def test_system_prompt_workload_puts_one_of_k_prompts_before_the_same_draws():
    cfg = parse({"dataset": "sharegpt-standin", "duration_s": 60, "system_prompt": {"tokens": 300, "count": 3}})
    plain = build_trace(parse({"dataset": "sharegpt-standin", "duration_s": 60}), 2.0, 2048, np.random.default_rng(1))
    trace = build_trace(cfg, 2.0, 2048, np.random.default_rng(1))
    assert len(trace) == len(plain) and (trace.arrival_s == plain.arrival_s).all()
    assert (trace.prompt_len + trace.output_len < 2048).all() and trace.prompt_len.min() > 300
    firsts = [trace.segments.request(i)[0] for i in range(len(trace))]
    assert {f[0] for f in firsts} == {0, 1, 2} and {f[1:] for f in firsts} == {(0, 300)}
    assert (trace.segments.num_tokens() == trace.prompt_len + trace.output_len).all()
    assert "a system prompt of 300 tokens" in trace.source


def test_a_later_chat_round_starts_with_the_rounds_before_it():
    conversations = Conversations(np.arange(2), np.array([0, 3, 5]), np.array([10, 7, 5, 9, 9]),
                                  np.array([20, 30, 6, 8, 8]), "test conversations")
    chat = chatbot_requests(conversations, 40, 0.3, 2048, np.random.default_rng(0))
    streams = {int(row): chat.segments.request(i) for i, row in enumerate(chat.row)}
    assert streams[0] == [(0, 0, 10), (1, 0, 20)]
    assert streams[2] == [(0, 0, 10), (1, 0, 20), (2, 0, 7), (3, 0, 30), (4, 0, 5), (5, 0, 6)]
    first, third = block_keys(streams[0], 4, 30), block_keys(streams[2], 4, 78)
    assert third[:7] == first[:7], "round 3 holds round 1's prompt and answer, block for block"
    cut = chatbot_requests(conversations, 40, 0.3, 64, np.random.default_rng(0))  # prompts cut to 32 tokens
    late = next(i for i, row in enumerate(cut.row) if row == 2)
    # the last 32 of its 72 tokens: round 2's answer from its 4th token, then its own query
    assert cut.segments.request(late)[:2] == [(3, 3, 27), (4, 0, 5)]


def records_cost():
    return RooflineCostModel(SPEC, load_hardware("a100-40gb"), 1, 2, 16)


def both_ways(trace, system, blocks=(400, 200)):
    out = []
    for fast in (False, True):
        records = simulate(trace, SPEC, system, records_cost(), *blocks, horizon_s=1e9, fast_forward=fast)
        out.append((records.iteration_columns, records.request_values))
    assert out[0] == out[1], "fast-forward and step by step part"
    return records


@pytest.mark.parametrize("workload", [
    {"dataset": "sharegpt-standin", "duration_s": 120, "system_prompt": {"tokens": 200, "count": 2}},
    {"dataset": "chatbot", "duration_s": 240},
])
def test_cached_runs_are_the_same_bytes_fast_forwarded_and_report_their_hit_rate(workload):
    trace = build_trace(parse(workload), 1.5, 2048, np.random.default_rng(0))
    system = dataclasses.replace(PAPER_SYSTEMS["vllm"], prefix_caching=True)
    records = both_ways(trace, system)
    requests, iterations = records.requests_frame(), records.iterations_frame()
    served = requests[requests["first_token_s"].notna()]
    assert (served["cached_tokens"] % system.block_size == 0).all() and served["cached_tokens"].sum() > 0
    summary = summarize(requests, iterations, pool_slots=400 * 16, warmup_s=0, horizon_s=1e9)
    assert summary["prefix_hit_rate"] == served["cached_tokens"].sum() / served["prompt_len"].sum()
    plain = simulate(trace, SPEC, PAPER_SYSTEMS["vllm"], records_cost(), 400, 200, horizon_s=1e9)
    assert math.isnan(summarize(plain.requests_frame(), plain.iterations_frame(), pool_slots=400 * 16, warmup_s=0,
                                horizon_s=1e9)["prefix_hit_rate"])
    assert "cached_tokens" not in plain.requests_frame()


@pytest.mark.parametrize("policy", ["chunked", "separate"])
def test_cached_runs_under_the_later_policies_are_the_same_bytes_fast_forwarded(policy):
    # a long system prompt: under chunked, prompts split into chunks whose blocks are keyed as computed
    workload = {"dataset": "sharegpt-standin", "duration_s": 120, "system_prompt": {"tokens": 600, "count": 2}}
    trace = build_trace(parse(workload), 1.5, 2048, np.random.default_rng(0))
    budget = {"max_num_batched_tokens": 512} if policy == "chunked" else {}
    system = dataclasses.replace(PAPER_SYSTEMS["vllm"], prefix_caching=True, prefill_policy=policy, **budget)
    records = both_ways(trace, system)
    served = records.requests_frame().dropna(subset=["first_token_s"])
    assert served["cached_tokens"].sum() > 0
    if policy == "chunked":
        iterations = records.iterations_frame()
        assert (iterations["num_prefill_tokens"] + iterations["num_decodes"] <= 512).all()


@pytest.mark.parametrize("policy", ["chunked", "separate"])
@pytest.mark.parametrize("kind", ["beams", "samples"])
def test_beams_and_samples_with_the_cache_under_the_later_policies(policy, kind):
    # groups of several sequences share only their prompt's keys: step by step and fast-forwarded agree
    rng = np.random.default_rng(3)
    count = 120
    arrival = np.floor(np.cumsum(rng.exponential(1 / 8.0, count)) * 100) / 100
    prompt, output = rng.integers(40, 260, count), rng.integers(1, 200, count)
    segments = system_prompt_segments(rng.integers(0, 3, count), 32, prompt, output)
    several = rng.choice([1, 3], count)
    ones = np.ones(count, dtype=np.int64)
    trace = (Trace(arrival, prompt, output, ones, beam_width=several, segments=segments) if kind == "beams"
             else Trace(arrival, prompt, output, several, segments=segments))
    budget = {"max_num_batched_tokens": 256} if policy == "chunked" else {}
    system = dataclasses.replace(PAPER_SYSTEMS["vllm"], prefix_caching=True, prefill_policy=policy, **budget)
    runs = [simulate(trace, SPEC, system, records_cost(), 160, 512, horizon_s=1e9, fast_forward=fast,
                     rng=np.random.default_rng(9)) for fast in (False, True)]
    assert runs[0].iteration_columns == runs[1].iteration_columns
    assert runs[0].request_values == runs[1].request_values
    assert runs[0].requests_frame()["cached_tokens"].sum() > 0


def test_segments_do_not_change_a_run_without_the_cache():
    rng = np.random.default_rng(2)
    prompt, output = rng.integers(5, 300, 60), rng.integers(5, 300, 60)
    arrival = np.sort(rng.uniform(0, 30, 60))
    segments = TokenSegments.of([[(0, 0, 4), (-2 - i, 0, int(p + o) - 4)] for i, (p, o) in enumerate(zip(prompt,
                                                                                                       output))])
    runs = [simulate(Trace(arrival, prompt, output, segments=s), SPEC, PAPER_SYSTEMS["vllm"], records_cost(), 300, 100,
                     horizon_s=1e9) for s in (None, segments)]
    assert runs[0].iteration_columns == runs[1].iteration_columns and runs[0].request_values == runs[1].request_values


def test_a_system_prompt_too_long_for_the_model_is_refused_with_the_room_left():
    from pathlib import Path

    from sim.experiment.config import load_experiment

    config = Path(__file__).resolve().parents[3] / "configs" / "examples" / "prefix_caching.yaml"
    with pytest.raises(SpecError) as err:
        load_experiment(config, ["workload.system_prompt.tokens=2047"])
    assert err.value.key == "workload.system_prompt.tokens" and "at most 2045" in str(err.value)
    assert load_experiment(config).workload.system_prompt.count == 4


def test_a_fleet_served_apart_keeps_the_cached_tokens_column():
    trace = build_trace(parse({"dataset": "sharegpt-standin", "duration_s": 60,
                               "system_prompt": {"tokens": 200, "count": 2}}), 4.0, 2048, np.random.default_rng(0))
    system = dataclasses.replace(PAPER_SYSTEMS["vllm"], prefix_caching=True)
    runs = [simulate(trace, SPEC, system, records_cost(), 400, 200, replicas=2, horizon_s=1e9, replica_pool=pool)
            for pool in (None, ProcessReplicaPool(2))]
    assert runs[0].request_values == runs[1].request_values
    assert runs[0].iteration_columns == runs[1].iteration_columns
    assert list(runs[1].requests_frame().columns)[-1] == "cached_tokens"
