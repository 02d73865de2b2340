"""The past-saturation rule (fidelity/saturation.py) on synthetic real-replay records: a saturated and an
unsaturated point are told apart from the engine's own records, and the rule cannot take a point below
saturation off the latency criterion."""
import math

import numpy as np
import pandas as pd
import pytest

from engine.core.records import ITERATION_COLUMNS
from fidelity.metrics import summary_row
from fidelity.repeat import repeats_frame, spread_text
from fidelity.saturation import MIN_GROWTH, past_saturation, queue_growth
from fidelity.verdict import VERDICT, headline, saturation_text, target_lines, with_judgement


def fcfs_replay(rate: float, service_s: float, duration_s: float = 10.0, seed: int = 0,
                jitter: float = 0.1) -> pd.DataFrame:
    """One server, first come first served, Poisson arrivals: the records a real replay writes (arrival,
    first token, finish). The first token comes when a request's service starts plus a tenth of it."""
    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.exponential(1.0 / rate, size=int(rate * duration_s * 3)))
    arrivals = arrivals[arrivals < duration_s]
    free, rows = 0.0, []
    for i, a in enumerate(arrivals):
        service = service_s * (1.0 + jitter * rng.standard_normal())
        start = max(free, a)
        free = start + service
        rows.append({"request_id": i, "arrival_s": a, "first_token_s": start + 0.1 * service, "finish_s": free,
                     "prompt_len": 32, "output_len": 16, "n": 1, "num_preemptions": 0})
    return pd.DataFrame(rows)


def test_a_saturated_and_an_unsaturated_point_are_classified_from_the_real_records():
    # 2 req/s into a server that completes 1 / 0.8 = 1.25 req/s: the line grows by ~0.6 s per s
    saturated = [fcfs_replay(2.0, 0.8, duration_s=20.0, seed=s) for s in (0, 1)]
    # 1 req/s into a server that completes 5 req/s: it keeps up
    quiet = [fcfs_replay(1.0, 0.2, seed=s) for s in (0, 1)]
    growth = [queue_growth(r, warmup_s=1.0) for r in saturated]
    # the slope is the arrival rate over the completion rate, less one (the arrival rate as drawn)
    for g, r in zip(growth, saturated):
        assert g.slope == pytest.approx(len(r) / 20.0 * 0.8 - 1.0, abs=0.2)
    assert past_saturation(growth)
    assert not past_saturation([queue_growth(r, warmup_s=1.0) for r in quiet])


def test_saturation_and_a_stable_line_are_told_apart_over_many_traces():
    # at 70% load the line fluctuates but does not grow: no seed may put it past saturation
    for seed in range(40):
        replays = [fcfs_replay(2.0, 0.8, duration_s=20.0, seed=2 * seed + s) for s in (0, 1)]
        assert past_saturation([queue_growth(r, warmup_s=1.0) for r in replays]), seed
        replays = [fcfs_replay(2.0, 0.35, seed=2 * seed), fcfs_replay(2.0, 0.35, seed=2 * seed + 1)]
        assert not past_saturation([queue_growth(r, warmup_s=1.0) for r in replays]), seed


def test_every_replay_must_show_the_growth():
    grows, keeps_up = fcfs_replay(2.0, 0.8, duration_s=20.0, seed=3), fcfs_replay(2.0, 0.1, seed=3)
    assert past_saturation([queue_growth(grows)])
    assert not past_saturation([queue_growth(grows), queue_growth(keeps_up)])
    assert not past_saturation([])


def test_too_few_requests_give_no_slope_and_no_saturation():
    few = fcfs_replay(2.0, 0.7).head(2)
    g = queue_growth(few)
    assert math.isnan(g.slope) and not g.grows and g.requests == 2
    same_time = pd.DataFrame({"arrival_s": [1.0] * 4, "first_token_s": [1.0, 2.0, 3.0, 4.0]})
    assert math.isnan(queue_growth(same_time).slope)


def test_a_small_or_noisy_growth_is_not_enough():
    flat = pd.DataFrame({"arrival_s": np.arange(10.0), "first_token_s": np.arange(10.0) * (1 + MIN_GROWTH / 2)})
    assert not queue_growth(flat).grows  # grows, but by less than MIN_GROWTH
    rng = np.random.default_rng(0)
    noisy = pd.DataFrame({"arrival_s": np.arange(6.0)})
    noisy["first_token_s"] = noisy["arrival_s"] * 1.2 + rng.normal(0, 3.0, 6) ** 2
    g = queue_growth(noisy)
    assert g.grows == (g.slope >= MIN_GROWTH and g.slope > 2 * g.stderr)


def row_for(replays: list[pd.DataFrame], sim: pd.DataFrame) -> dict:
    """summary_row on synthetic replays (their iterations are only counted, so one row each will do)."""
    iterations = pd.DataFrame({name: [1] for name in ITERATION_COLUMNS}).assign(start_s=0.0, duration_s=0.1)
    join = pd.DataFrame({"measured": [True], "latency_error": [0.0], "real_latency_spread": [0.0],
                         "ttft_error": [0.0]})
    return summary_row(system="S", rate=2.0, seed=0, join=join, real_requests=replays,
                       real_iterations=[iterations] * len(replays), sim_requests=sim, sim_iterations=iterations,
                       iteration_errors=pd.DataFrame(), pool_slots=16, warmup_s=1.0, threshold=1.0,
                       exact_replay=True, real_wall_s=1.0, cost_model="test", warmup_rule="test")


def test_the_summary_row_reads_saturation_from_the_real_replays_only():
    saturated = [fcfs_replay(2.0, 0.8, duration_s=20.0, seed=s) for s in (0, 1)]
    quiet = [fcfs_replay(1.0, 0.2, seed=s) for s in (0, 1)]
    # a simulation that is wildly off either way cannot move the classification
    for sim in (saturated[0], quiet[0], fcfs_replay(2.0, 5.0)):
        assert row_for(saturated, sim)["past_saturation"]
        assert not row_for(quiet, sim)["past_saturation"]
    row = row_for(saturated, saturated[0])
    assert row["real_queue_growth"] >= MIN_GROWTH
    assert row["real_makespan_low_error"] <= 0.0 <= row["real_makespan_high_error"]


def judged_summary() -> pd.DataFrame:
    """Three points: below saturation and close; below saturation and 30% off; past saturation, its latency
    18% off (outside its spread) and its makespan 2% off."""
    return pd.DataFrame({
        "system": ["A", "B", "C"], "rate": [1.0, 1.0, 2.0],
        VERDICT: [0.02, 0.30, 0.18], "real_low_error": [-0.01, -0.01, -0.05], "real_high_error": [0.01, 0.01, 0.05],
        "past_saturation": [False, False, True], "real_queue_growth": [0.0, 0.01, 0.5],
        "real_queue_growth_stderr": [0.01, 0.01, 0.05],
        "loo_makespan_error": [0.50, -0.50, 0.02],
        "real_makespan_low_error": [-0.01, -0.01, -0.01], "real_makespan_high_error": [0.01, 0.01, 0.01]})


def test_points_past_saturation_are_judged_by_makespan_and_still_show_their_latency_error():
    summary = with_judgement(judged_summary())
    assert summary["judged_by"].tolist() == ["latency", "latency", "makespan"]
    assert summary["judged_within_target"].tolist() == [True, False, True]
    # a point below saturation is judged by latency whatever its makespan error says
    assert summary.loc[1, "judged_error"] == pytest.approx(0.30)
    h = headline(summary, VERDICT, "loo_makespan_error")
    assert h["worst_error"] == pytest.approx(0.30) and h["past_saturation"] == 1
    assert (h["within_target"], h["within_target_with_rule"]) == (1, 2)
    assert h["worst_below_saturation"] == pytest.approx(0.30)
    assert h["worst_makespan_past_saturation"] == pytest.approx(0.02)
    line = target_lines(h)[0]
    assert "without the saturation rule missed (2 point(s) outside)" in line
    assert "with it missed (1 point(s) outside)" in line
    text = saturation_text(summary)
    assert "+18.0%" in text and "PAST SATURATION: judged by makespan +2.0%" in text
    assert "latency error +30.0%" in text and "judged by latency +30.0% (OUTSIDE the target)" in text


def test_the_rule_meets_the_target_only_when_every_point_below_saturation_does():
    summary = judged_summary()
    summary.loc[1, VERDICT] = 0.05
    h = headline(with_judgement(summary), VERDICT, "loo_makespan_error")
    assert (h["within_target"], h["within_target_with_rule"]) == (2, 3)
    assert "with it met, 3/3" in target_lines(h)[0]


def test_a_figure_without_a_makespan_error_judges_every_point_by_latency():
    h = headline(judged_summary(), VERDICT)
    assert h["past_saturation"] == 1 and h["within_target"] == h["within_target_with_rule"] == 1
    assert math.isnan(h["worst_makespan_past_saturation"])


def test_repeats_txt_gives_the_target_without_and_with_the_rule_for_each_repeat():
    one = headline(with_judgement(judged_summary()), VERDICT, "loo_makespan_error")
    summary = judged_summary()
    summary.loc[1, VERDICT] = 0.05
    two = headline(with_judgement(summary), VERDICT, "loo_makespan_error")
    text = spread_text(repeats_frame({1: {"verdict": one}, 2: {"verdict": two}}))
    assert "without the saturation rule 1/3, 2/3; with it 2/3, 3/3" in text
    assert "past saturation    1/3, 1/3 points (judged by makespan, worst +2.0%, +2.0%)" in text
    assert "worst latency error below saturation +30.0%, +5.0%" in text
    # repeats written before the rule have no target keys: nothing is made up for them
    old = {k: v for k, v in one.items() if k not in ("within_target", "within_target_with_rule")}
    assert "saturation rule" not in spread_text(repeats_frame({1: {"verdict": old}}))
