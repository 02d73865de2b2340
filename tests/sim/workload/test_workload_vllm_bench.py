"""The workload keys that spell vLLM's `vllm bench serve` options: burstiness (--burstiness), num_requests
(--num-prompts), an infinite rate (--request-rate inf) and max_concurrency (--max-concurrency)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from engine.errors import SpecError
from sim.workload.arrivals import ARRIVALS, first_arrivals
from sim.workload.config import WorkloadConfig, build_trace

STANDIN = {"dataset": "sharegpt-standin"}


def parse(raw: dict) -> WorkloadConfig:
    return WorkloadConfig.from_dict({**STANDIN, **raw}, "exp.yaml")


def arrivals(raw: dict, rate: float = 2.0, seed: int = 0) -> np.ndarray:
    return build_trace(parse(raw), rate, 2048, np.random.default_rng(seed)).arrival_s


@pytest.mark.parametrize("burstiness", [0.25, 1.0, 4.0, 10.0])
def test_burstiness_draws_what_gamma_of_cv_one_over_its_root_draws(burstiness):
    """Where 1/cv^2 gives back the shape exactly, the same draws to the bit."""
    cv = 1 / math.sqrt(burstiness)
    assert 1 / cv**2 == burstiness
    same = arrivals({"burstiness": burstiness, "duration_s": 300})
    assert same.tolist() == arrivals({"arrival": "gamma", "cv": cv, "duration_s": 300}).tolist()


@pytest.mark.parametrize("burstiness", [0.5, 2.0, 3.0])
def test_elsewhere_the_shape_is_vllms_own(burstiness):
    """1/cv^2 may miss the shape by a bit there: the gaps are vLLM's Gamma(B, 1/(rate B)), which cv draws to 1e-12."""
    rng = np.random.default_rng(1)
    vllm = np.cumsum(rng.gamma(burstiness, 1 / (2.0 * burstiness), 100))
    drawn = first_arrivals("gamma", 2.0, 100, np.random.default_rng(1), shape=burstiness)
    assert drawn.tolist() == vllm.tolist()
    by_cv = first_arrivals("gamma", 2.0, 100, np.random.default_rng(1), cv=1 / math.sqrt(burstiness))
    np.testing.assert_allclose(by_cv, vllm, rtol=1e-12)


def test_burstiness_implies_gamma_and_says_so():
    cfg = parse({"burstiness": 0.5})
    assert cfg.arrival == "gamma" and cfg.burstiness == 0.5
    trace = build_trace(cfg, 2.0, 2048, np.random.default_rng(0))
    assert "gamma burstiness=0.5 arrivals at 2 req/s for 3600 s" in trace.source


@pytest.mark.parametrize("name", sorted(ARRIVALS))
def test_num_requests_draws_the_first_arrivals_of_the_process(name):
    counted = arrivals({"arrival": name, "num_requests": 500})
    assert len(counted) == 500 and (np.diff(counted) >= 0).all()
    timed = ARRIVALS[name](2.0, 1000.0, np.random.default_rng(0))
    # the same process: a renewal's first gaps are its first gaps; the quanta's first stamps theirs
    assert counted.tolist() == timed[:500].tolist()


def test_num_requests_at_an_infinite_rate_sends_every_request_at_zero():
    trace = build_trace(parse({"num_requests": 64}), math.inf, 2048, np.random.default_rng(0))
    assert trace.arrival_s.tolist() == [0.0] * 64 and trace.duration_s == 0.0
    assert "all 64 requests at 0 s (rate inf)" in trace.source


def test_an_infinite_rate_needs_a_count():
    with pytest.raises(SpecError) as caught:
        arrivals({}, rate=math.inf)
    assert caught.value.key == "workload.num_requests" and "--num-prompts" in caught.value.message


@pytest.mark.parametrize("raw, key, words", [
    ({"burstiness": 0}, "workload.burstiness", ["in [0.01, 1000000]", "got 0"]),
    ({"burstiness": -1}, "workload.burstiness", ["got -1"]),
    ({"burstiness": "bursty"}, "workload.burstiness", ["got 'bursty'"]),
    ({"burstiness": float("inf")}, "workload.burstiness", ["got inf"]),
    ({"burstiness": 2, "cv": 0.5}, "workload.burstiness", ["and workload.cv both give the gaps' shape"]),
    ({"burstiness": 2, "arrival": "poisson"}, "workload.burstiness", ["not poisson", "set it to gamma"]),
    ({"num_requests": 0}, "workload.num_requests", ["a positive integer, got 0"]),
    ({"num_requests": 2.5}, "workload.num_requests", ["a positive integer, got 2.5"]),
    ({"num_requests": 10, "duration_s": 60}, "workload.num_requests", ["and workload.duration_s both"]),
    ({"max_concurrency": 0}, "workload.max_concurrency", ["a positive integer, got 0"]),
    ({"max_concurrency": -4}, "workload.max_concurrency", ["a positive integer, got -4"]),
    ({"max_concurrency": 1.5}, "workload.max_concurrency", ["a positive integer, got 1.5"]),
    ({"max_concurrency": True}, "workload.max_concurrency", ["a positive integer, got True"]),
])
def test_bad_values_name_the_key(raw, key, words):
    with pytest.raises(SpecError) as caught:
        parse(raw)
    assert (caught.value.source, caught.value.key) == ("exp.yaml", key)
    assert "\n" not in caught.value.message
    for word in words:
        assert word in caught.value.message


def test_a_replay_sets_the_generated_keys_aside(tmp_path):
    (tmp_path / "t.csv").write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n0,10,10\n1,20,20\n")
    cfg = WorkloadConfig.from_dict({"trace": "t.csv", "burstiness": 2, "cv": 0.5, "num_requests": 9,
                                    "duration_s": 5, "max_concurrency": 1}, "exp.yaml", tmp_path)
    assert cfg.max_concurrency == 1
    assert build_trace(cfg, None, 2048, np.random.default_rng(0)).arrival_s.tolist() == [0.0, 1.0]
