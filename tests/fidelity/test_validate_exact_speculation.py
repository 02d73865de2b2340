"""The exact-replay proof for a speculating engine: fed the engine's measured iteration times and the counts its
verify kept, the simulator takes the engine's schedule one for one and writes the same records to the value (each
iteration's and each request's tokens proposed and accepted included), with the n-gram and the draft proposer,
greedy and sampled, with prefix caching off and on, on a pool small enough to preempt (by recompute and by swap).

With prefix caching each sequence proposes its stream's next tokens, random ones the target all but never keeps:
those runs prove the proposals and the cache's blocks step for step; the runs without it keep some and reject
others."""
import dataclasses

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("torch")  # these run the real engine

from engine.core.batch import Batch  # noqa: E402
from engine.core.speculative import SpeculativeSpec  # noqa: E402
from engine.core.system import PAPER_SYSTEMS  # noqa: E402
from engine.runtime.engine import Engine  # noqa: E402
from engine.runtime.sampler import SamplingParams  # noqa: E402
from engine.specs.loader import MODELS_DIR, load_model_spec  # noqa: E402
from fidelity.replay import (  # noqa: E402
    AcceptanceOutcome,
    MeasuredClock,
    ReplayedAcceptance,
    ReplayedTimes,
    ScheduleDiverged,
    compare_schedules,
)
from servesim.cli import main  # noqa: E402
from sim.core.simulate import simulate  # noqa: E402
from sim.workload.trace import Trace  # noqa: E402

SPEC = load_model_spec("opt-tiny")
DRAFT = dataclasses.replace(SPEC, name="opt-tiny-draft", num_layers=1)  # the target's vocabulary, one layer
BLOCKS = (32, 64)  # (device, host) blocks of 4 tokens: five decodes a step at most, and preemptions
# a random-weight model's distributions are nearly flat: at temperature 1 the target keeps almost no n-gram
# proposal, at 0.1 some of them
SAMPLINGS = {"greedy": SamplingParams(), "sampled": SamplingParams("random", temperature=0.1)}


def a_trace(num_requests=14, seed=3):
    """Arrivals 50 us apart, all within the first iterations: the pool runs short on any machine's speed."""
    rng = np.random.default_rng(seed)
    return Trace(np.cumsum(rng.exponential(5e-5, num_requests)), rng.integers(3, 30, num_requests),
                 rng.integers(2, 24, num_requests), np.ones(num_requests, dtype=int))


def speculating(method: str, prefix_caching: bool = False, preemption: str = "recompute"):
    draft = DRAFT if method == "draft" else None
    speculative = SpeculativeSpec(method, 3, (0.5,) * 3, draft.name if draft else None, draft)
    return dataclasses.replace(PAPER_SYSTEMS["vllm"], block_size=4, prefix_caching=prefix_caching,
                               preemption=preemption, speculative=speculative)


def real_replay(system, trace, sampling="greedy"):
    engine = Engine(SPEC, system, "cpu", num_gpu_blocks=BLOCKS[0], num_cpu_blocks=BLOCKS[1],
                    attention_backend="torch")
    clock = MeasuredClock(engine.runner, engine=engine)  # the engine's: a draft's forwards count, as its clock
    return engine.replay(trace, SAMPLINGS[sampling], time_fn=clock), clock


@pytest.mark.parametrize("preemption", ["recompute", "swap"])
@pytest.mark.parametrize("prefix_caching", [False, True])
@pytest.mark.parametrize("sampling", list(SAMPLINGS))
@pytest.mark.parametrize("method", ["ngram", "draft"])
def test_simulator_fed_the_engines_times_and_acceptance_reproduces_its_run(method, sampling, prefix_caching,
                                                                           preemption):
    system, trace = speculating(method, prefix_caching, preemption), a_trace()
    result, clock = real_replay(system, trace, sampling)
    times, acceptance = ReplayedTimes(clock.times, clock.shapes), ReplayedAcceptance(clock.acceptance)
    records = simulate(trace, SPEC, system, times, *BLOCKS, acceptance=acceptance)
    assert times.exhausted and acceptance.exhausted
    iterations, requests = result.iteration_columns(), result.request_columns()
    comparison = compare_schedules(pd.DataFrame(requests), pd.DataFrame(iterations), records.requests_frame(),
                                   records.iterations_frame())
    assert comparison.identical, comparison.first_mismatch
    assert records.iterations_frame().to_dict("list") == iterations  # every column, to the value
    assert records.requests_frame().to_dict("list") == requests
    # and the schedule was not a trivial one
    assert max(iterations["num_decodes"]) >= 4 and sum(requests["num_preemptions"]) > 0
    assert (sum(iterations["num_swap_blocks"]) > 0) == (preemption == "swap")
    proposed, accepted = sum(requests["proposed_tokens"]), sum(requests["accepted_tokens"])
    assert proposed > 0
    if not prefix_caching:
        assert 0 < accepted < proposed


def test_given_the_engine_the_clock_counts_the_drafts_forwards_as_the_engine_does():
    """The draft proposes before the runner executes, and the engine's own clock adds the draft's seconds to the
    runner's: so does MeasuredClock given the engine, and every iteration lasts what it lasts without a time_fn."""
    system, trace = speculating("draft"), a_trace()

    def fixed_times() -> Engine:  # a forward 10 ms, the draft's 2 ms: the clock is then the only difference
        engine = Engine(SPEC, system, "cpu", num_gpu_blocks=BLOCKS[0], num_cpu_blocks=BLOCKS[1],
                        attention_backend="torch")
        execute, propose = engine.runner.execute, engine.draft.propose
        engine.runner.execute = lambda *args, **kwargs: (execute(*args, **kwargs)[0], 0.01)
        engine.draft.propose = lambda *args, **kwargs: dataclasses.replace(propose(*args, **kwargs), seconds=0.002)
        return engine

    alone = fixed_times().replay(trace).iteration_columns()
    engine = fixed_times()
    clock = MeasuredClock(engine.runner, engine=engine)
    assert engine.replay(trace, time_fn=clock).iteration_columns() == alone
    assert set(clock.times) == {0.01 + 0.002}


@pytest.mark.parametrize("method", ["eagle", "mtp"])
def test_given_the_engine_the_clock_counts_a_heads_forwards_as_the_engine_does(monkeypatch, method):
    """A head proposes before the target's forward and follows it after: the engine's clock adds both (its
    last_proposer_s), and so does MeasuredClock given the engine."""
    from engine.runtime import head_proposer

    class FixedTimer:  # each of the head's two timed passes an iteration: 2 ms
        def __init__(self, device):
            self.seconds = 0.002

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            pass

    monkeypatch.setattr(head_proposer, "IterationTimer", FixedTimer)
    system, trace = speculating(method), a_trace()

    def fixed_times() -> Engine:
        engine = Engine(SPEC, system, "cpu", num_gpu_blocks=BLOCKS[0], num_cpu_blocks=BLOCKS[1],
                        attention_backend="torch")
        execute = engine.runner.execute
        engine.runner.execute = lambda *args, **kwargs: (execute(*args, **kwargs)[0], 0.01)
        return engine

    alone = fixed_times().replay(trace).iteration_columns()
    engine = fixed_times()
    clock = MeasuredClock(engine.runner, engine=engine)
    assert engine.replay(trace, time_fn=clock).iteration_columns() == alone
    assert set(clock.times) == {0.01 + 0.004}


def test_another_acceptance_is_caught():
    """The check has teeth: one decode keeping one proposal less, and the schedules part."""
    system, trace = speculating("ngram"), a_trace()
    _, clock = real_replay(system, trace)
    outcomes = list(clock.acceptance)
    at, decode = next((i, j) for i, outcome in enumerate(outcomes) for j, count in enumerate(outcome.accepted)
                      if count)
    fewer = list(outcomes[at].accepted)
    fewer[decode] -= 1
    outcomes[at] = dataclasses.replace(outcomes[at], accepted=tuple(fewer))
    with pytest.raises(ScheduleDiverged, match="iteration"):
        simulate(trace, SPEC, system, ReplayedTimes(clock.times, clock.shapes), *BLOCKS,
                 acceptance=ReplayedAcceptance(outcomes))


def test_replayed_acceptance_refuses_other_proposals_and_running_out():
    outcome = AcceptanceOutcome(iteration=4, proposed=(3, 3), accepted=(2, 0))
    batch = Batch(decode_seq_ids=[0, 1], decode_context_lens=[9, 9], decode_proposed=[3, 3])
    replayed = ReplayedAcceptance([outcome])
    assert replayed.accepted(batch) == [2, 0] and replayed.exhausted
    with pytest.raises(ScheduleDiverged, match="than the engine's 1 speculating iterations"):
        replayed.accepted(batch)
    other = Batch(decode_seq_ids=[0, 1], decode_context_lens=[9, 9], decode_proposed=[3, 2])
    with pytest.raises(ScheduleDiverged, match=r"iteration 4: the simulator's decodes propose \[3, 2\] tokens, "
                                               r"the engine's \[3, 3\]"):
        ReplayedAcceptance([outcome]).accepted(other)


def test_the_comparison_reads_the_tokens_proposed_and_accepted():
    iterations = pd.DataFrame({name: [1, 1] for name in ("num_prefill_tokens", "num_prefills", "num_decodes",
                                                         "sum_decode_context", "num_running_groups", "num_waiting",
                                                         "num_swap_blocks", "num_copy_blocks")})
    iterations = iterations.assign(start_s=[0.0, 1.0], duration_s=[1.0, 1.0], proposed_tokens=[3, 3],
                                   accepted_tokens=[2, 1])
    requests = pd.DataFrame({"request_id": [0], "prompt_len": [5], "output_len": [6], "n": [1],
                             "num_preemptions": [0], "arrival_s": [0.0], "first_token_s": [1.0], "finish_s": [2.0],
                             "proposed_tokens": [6], "accepted_tokens": [3]})
    assert compare_schedules(requests, iterations, requests, iterations).identical
    other = iterations.assign(accepted_tokens=[2, 0])
    comparison = compare_schedules(requests, iterations, requests, other)
    assert not comparison.identical
    assert comparison.first_mismatch == "iteration 1: accepted_tokens is 1 on the engine, 0 in the simulator"
    comparison = compare_schedules(requests, iterations, requests.drop(columns="proposed_tokens"), iterations)
    assert comparison.first_mismatch == "requests: only the engine records proposed_tokens"


def test_validate_exact_replays_speculating_systems(tiny_validation, tmp_path, capsys):
    """`servesim validate --exact` feeds each speculating system's accepted counts back with its times: the
    n-gram and the draft proposer's schedules come out identical, beside a plain system's."""
    opt_tiny = (MODELS_DIR / "opt-tiny.yaml").read_text()
    (tmp_path / "opt-tiny-draft.yaml").write_text(opt_tiny.replace("name: opt-tiny", "name: opt-tiny-draft")
                                                  .replace("num_layers: 2", "num_layers: 1"))
    k = "num_speculative_tokens: 3, acceptance: {mean_accepted: 1.0}"
    ngram = "{preset: vllm, name: ngram, speculative: {method: ngram, " + k + "}}"
    draft = "{preset: vllm, name: draft, speculative: {method: draft, draft_model: opt-tiny-draft.yaml, " + k + "}}"
    systems = f"experiment.systems=[vllm, {ngram}, {draft}]"
    out = tmp_path / "exact"
    assert main(["validate", str(tiny_validation()), "--out", str(out), "--exact", "--set", systems,
                 "--set", "experiment.rates=[12]"]) == 0
    assert "3/3 schedules identical" in capsys.readouterr().out
    exact = pd.read_csv(out / "exact.csv")
    assert list(exact["system"]) == ["vLLM", "ngram", "draft"] and exact["identical"].all()
