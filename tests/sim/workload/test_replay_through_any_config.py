"""`--set workload.trace=PATH` replays a trace through any config, as documented: the keys that shape a generated
workload's draws (dataset, arrival, cv, duration_s, new_conversation_prob) stand aside, and the text a config
puts before every prompt (prefix_tokens, a system prompt) goes before every replayed prompt too."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from engine.errors import SpecError
from sim.experiment.config import load_experiment
from sim.workload.config import WorkloadConfig, build_trace
from tests.helpers.plans import shipped_experiment

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE_TRACE = ROOT / "sim/workload/traces/example_bursty.csv"
SHIPPED = sorted([ROOT / "configs/quickstart.yaml", *(ROOT / "configs/paper").glob("*.yaml"),
                  *(ROOT / "configs/examples").glob("*.yaml")])


def write_trace(tmp_path: Path, rows: str, prefix: int = 0) -> Path:
    path = tmp_path / "t.csv"
    line = f"# prefix_tokens: {prefix}\n" if prefix else ""
    path.write_text(f"{line}arrived_at,num_prefill_tokens,num_decode_tokens\n{rows}")
    return path


def replay(tmp_path: Path, rows: str, max_seq_len: int = 2048, seed: int = 0, prefix: int = 0, **keys):
    cfg = WorkloadConfig.from_dict({"trace": str(write_trace(tmp_path, rows, prefix)), **keys}, "exp.yaml")
    return build_trace(cfg, None, max_seq_len, np.random.default_rng(seed))


@pytest.mark.parametrize("config", SHIPPED, ids=lambda p: p.stem)
def test_every_shipped_config_replays_a_trace_set_over_it(config):
    # warm-up 1 s: the example trace, rescaled to a config's highest rate, may end before a minute of warm-up
    exp = shipped_experiment(config, [f"workload.trace={EXAMPLE_TRACE}", "warmup_s=1"])
    assert exp.workload.is_replay


def test_a_shared_prefix_goes_before_every_replayed_prompt(tmp_path):
    trace = replay(tmp_path, "0,10,5\n1,20,6\n", prefix_tokens=16)
    assert trace.prompt_len.tolist() == [26, 36] and trace.output_len.tolist() == [5, 6]
    assert trace.prefix_len == 16 and "a shared prefix of 16 tokens before every prompt" in trace.source


def test_a_prefix_before_the_traces_own_is_one_longer_shared_prefix(tmp_path):
    trace = replay(tmp_path, "0,10,5\n1,20,6\n", prefix=4, prefix_tokens=16)
    assert trace.prompt_len.tolist() == [26, 36] and trace.prefix_len == 20


def test_a_request_that_cannot_fit_with_the_prefix_is_dropped_as_a_generated_one_is(tmp_path):
    trace = replay(tmp_path, "0,10,5\n1,40,20\n", max_seq_len=64, prefix_tokens=8)  # 8 + 40 + 20 >= 64
    assert trace.prompt_len.tolist() == [18] and "dropped 1 of 2 with prompt+output >= 56" in trace.source
    with pytest.raises(SpecError, match=r"workload\.trace: every request of t\.csv \(2\) has prompt \+ output >= 6 "
                                        r"tokens, the model's max_seq_len 64 less the 58 put before every prompt"):
        replay(tmp_path, "0,10,5\n1,40,20\n", max_seq_len=64, prefix_tokens=58)


def test_system_prompts_go_before_every_replayed_prompt_picked_by_the_seed(tmp_path):
    rows = "".join(f"{i},{10 + i},5\n" for i in range(40))
    trace = replay(tmp_path, rows, system_prompt={"tokens": 32, "count": 4})
    assert (trace.prompt_len == np.arange(40) + 42).all() and trace.prefix_len == 0
    picks = [trace.segments.request(i)[0] for i in range(40)]
    assert {k for k, _, tokens in picks} == {0, 1, 2, 3} and {tokens for _, _, tokens in picks} == {32}
    again = replay(tmp_path, rows, system_prompt={"tokens": 32, "count": 4})
    assert [again.segments.request(i)[0] for i in range(40)] == picks  # the same seed, the same system prompts
    assert "a system prompt of 32 tokens before every prompt, one of 4" in trace.source


def test_a_system_prompt_before_a_traces_own_shared_prefix_is_refused(tmp_path):
    with pytest.raises(SpecError, match=r"workload\.system_prompt: t\.csv's prompts start with a shared prefix of "
                                        r"4 tokens .* with workload\.prefix_tokens"):
        replay(tmp_path, "0,10,5\n", prefix=4, system_prompt={"tokens": 32})


def test_a_conversation_option_stands_aside_with_its_dataset(tmp_path):
    path = write_trace(tmp_path, "0,10,5\n1,20,6\n")
    cfg = WorkloadConfig.from_dict({"dataset": "chatbot", "new_conversation_prob": 0.5, "trace": str(path)}, "e")
    assert cfg.is_replay and not cfg.is_chatbot
    with pytest.raises(SpecError, match=r"workload\.new_conversation_prob: must be"):  # still a probability
        WorkloadConfig.from_dict({"new_conversation_prob": 2, "trace": str(path)}, "e")


def test_a_replay_with_system_prompts_hits_the_prefix_cache(tmp_path):
    from sim.experiment.run import run_one

    path = write_trace(tmp_path, "".join(f"{i / 2},{20 + i},10\n" for i in range(30)))
    exp = load_experiment(ROOT / "configs/examples/prefix_caching.yaml", [f"workload.trace={path}", "warmup_s=1"])
    caching = next(s for s in exp.systems if s.prefix_caching)
    summary = run_one(exp, caching, exp.rates[0], 0).summary
    assert "a system prompt of 512 tokens" in summary["workload"] and summary["prefix_hit_rate"] > 0.5
