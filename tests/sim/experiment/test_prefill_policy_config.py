"""vLLM's prefill_policy and its keys in a config: bad values stop with one line naming the key and what is
valid; the example config comparing the three policies loads; and a too-long request is refused by the
paper-era policy and ignored, and recorded, by the later ones."""
from __future__ import annotations

from pathlib import Path

import pytest

from engine.core.scheduler.common import RequestTooLong
from engine.errors import SpecError
from sim.core.simulate import simulate
from sim.experiment.config import load_experiment
from sim.workload.trace import Trace
from tests.helpers.simulation import MODEL, ROOFLINE, random_trace

ROOT = Path(__file__).resolve().parents[3]
QUICKSTART = ROOT / "configs/quickstart.yaml"


@pytest.mark.parametrize("system, key, message", [
    ("{preset: vllm, prefill_policy: sarathi}", "systems[0].prefill_policy",
     "'sarathi' is not one of ['mixed', 'separate', 'chunked', 'v1']"),
    ("{preset: vllm, prefill_policy: [chunked]}", "systems[0].prefill_policy", "is not one of"),
    ("{preset: orca-max, prefill_policy: chunked}", "systems[0].prefill_policy", "orca has its own scheduler only"),
    ("{preset: vllm, prefill_policy: separate, max_paddings: -1}", "systems[0].max_paddings",
     "must be a non-negative integer, got -1"),
    ("{preset: vllm, max_paddings: 2.5}", "systems[0].max_paddings", "must be a non-negative integer"),
    ("{preset: vllm, prefill_policy: chunked, max_num_batched_tokens: 100}", "systems[0].max_num_batched_tokens",
     "cannot hold a decode of each of max_num_seqs 256"),
    ("{preset: vllm, prefill_policy: chunked, max_num_batched_tokens: null}", "systems[0].max_num_batched_tokens",
     "chunked prefill needs a token budget"),
    ("{preset: vllm, prefill_policy: separate, max_num_batched_tokens: 1024}", "systems[0].max_num_batched_tokens",
     "cannot prefill a 2048-token prompt"),
    ("{preset: vllm, delay_factor: 1}", "systems[0].delay_factor", "is vLLM v0.3's, with prefill_policy 'separate'"),
    ("{preset: vllm, prefill_policy: separate, delay_factor: .nan}", "systems[0].delay_factor",
     "must be a finite number >= 0, got nan"),
])
def test_bad_policy_keys_name_the_key_and_the_valid_values(system, key, message):
    with pytest.raises(SpecError) as caught:
        load_experiment(QUICKSTART, [f"systems=[{system}]"])
    text = str(caught.value)
    assert key in text and message in text and "\n" not in text


def test_chunked_prefill_may_take_a_budget_below_the_longest_prompt():
    exp = load_experiment(QUICKSTART, ["systems=[{preset: vllm, prefill_policy: chunked, name: c}]"])
    assert exp.systems[0].max_num_batched_tokens == 512 < exp.model.max_seq_len


def test_the_policies_example_compares_the_three_on_the_quickstart_setup():
    exp = load_experiment(ROOT / "configs/examples/vllm_policies.yaml")
    quickstart = load_experiment(QUICKSTART)
    assert [s.prefill_policy for s in exp.systems] == ["mixed", "separate", "chunked"]
    assert (exp.model, exp.hardware, exp.kv_cache_gib) == (quickstart.model, quickstart.hardware,
                                                           quickstart.kv_cache_gib)
    # on the real ShareGPT pairs and the linear A100 clock its record (benchmarks/measurements/vllm_policies.md) was
    # made with; the quickstart moved to the paper's Fig. 11 lengths and the whole A100 clock
    assert exp.workload.dataset == "sharegpt" and "a100-80gb-linear.yaml" in str(exp.cost_model.profile_path)


@pytest.mark.parametrize("policy", ["mixed", "separate", "chunked"])
def test_a_too_long_request_is_refused_by_mixed_and_ignored_by_the_later_policies(policy):
    base = random_trace(2, count=40)
    output = base.output_len.copy()
    output[[3, 17]] = MODEL.max_seq_len  # with their prompts, over the model's max_seq_len
    trace = Trace(base.arrival_s, base.prompt_len, output, base.n, source="test")
    system = next(s for s in load_experiment(ROOT / "configs/examples/vllm_policies.yaml").systems
                  if s.prefill_policy == policy)
    if policy == "mixed":
        with pytest.raises(RequestTooLong, match="request 3: .* exceeds the model's max_seq_len 512"):
            simulate(trace, MODEL, system, ROOFLINE, 400, 400)
        return
    records = simulate(trace, MODEL, system, ROOFLINE, 400, 400)
    assert [(r.request_id, r.status) for r in records.dropped_rows()] == [(3, "ignored"), (17, "ignored")]
    assert len(records.request_values) == 38 and records.requests_frame()["finish_s"].notna().all()
