"""The rule that picks what prices each regime on a GPU nobody measured, on a synthetic table of held-out errors."""
from calibrate.judging.carry_rule import MIN_HELD_OUT, ROOFLINE, HeldOutScore, choose
from calibrate.parts.transfer import COMPUTE_BOUND, LATENCY, RIDGE

A, B, C, D = "gpu-a", "gpu-b", "gpu-c", "gpu-d"


def score(held_out, carry, mean, worst=None, regime=RIDGE) -> HeldOutScore:
    return HeldOutScore(held_out, carry, regime, 10, mean, mean, 2 * mean if worst is None else worst)


def roofline_rows(regime=RIDGE):
    return [score(gpu, ROOFLINE, 0.2, 0.5, regime) for gpu in (A, B, C, D)]


def test_a_carry_prices_a_regime_only_where_it_beat_the_roofline_on_every_gpu_held_out_from_it():
    table = roofline_rows() + [
        score(B, "a", 0.10, 0.4), score(C, "a", 0.15, 0.5), score(D, "a", 0.19, 0.3),  # every one; worst may tie
        score(A, "b", 0.01, 0.1), score(C, "b", 0.01, 0.1), score(D, "b", 0.05, 0.6),  # lower mean, one worst lost
        score(A, "c", 0.01, 0.1),  # better still, but one GPU is too few to trust
    ]
    verdict = choose(table)[RIDGE]
    assert verdict.carry == "a" and f"{B}, {C}, {D}" in verdict.reason
    assert MIN_HELD_OUT == 2


def test_a_carry_that_ties_the_roofline_or_loses_one_gpus_mean_does_not_price_it():
    table = roofline_rows() + [score(B, "a", 0.2, 0.1), score(C, "a", 0.1, 0.1),  # a tie in the mean on B
                               score(A, "b", 0.1, 0.1), score(B, "b", 0.3, 0.1)]  # a loss in the mean on B
    assert choose(table)[RIDGE].carry == ROOFLINE
    assert {v.carry for v in choose(table).values()} == {ROOFLINE}  # no rows at all in the other regimes


def test_of_the_carries_that_qualify_the_lowest_mean_over_their_gpus_prices_the_regime():
    table = roofline_rows() + roofline_rows(COMPUTE_BOUND) + [
        score(A, "a", 0.10), score(B, "a", 0.10), score(C, "b", 0.12), score(D, "b", 0.04),
        score(A, "a", 0.01, regime=COMPUTE_BOUND), score(B, "a", 0.3, regime=COMPUTE_BOUND),
        score(C, "b", 0.1, regime=COMPUTE_BOUND), score(D, "b", 0.1, regime=COMPUTE_BOUND)]
    chosen = choose(table)
    assert chosen[RIDGE].carry == "b" and chosen[COMPUTE_BOUND].carry == "b"  # per regime, each on its own evidence
    # a GPU that did not measure a regime does not judge it
    table += [score(A, "c", 0.01, regime=LATENCY), score(B, "c", 0.01, regime=LATENCY)]
    table += [score(A, ROOFLINE, 0.2, regime=LATENCY)]
    assert choose(table)[LATENCY].carry == ROOFLINE
