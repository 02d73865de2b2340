"""Arrival processes deliver the rate (and burstiness) asked for, from the run's rng only."""
import numpy as np
import pytest

from sim.workload.arrivals import ARRIVALS, constant, exponential, gamma, poisson_quanta

RATE, DURATION = 4.0, 2500.0   # 10,000 expected arrivals: 1 sigma is 1%


def rng(seed=7):
    return np.random.default_rng(seed)


@pytest.mark.parametrize("process", [poisson_quanta, exponential, gamma, constant])
def test_requested_rate_sorted_and_inside_the_duration(process):
    times = process(RATE, DURATION, rng())
    assert times.dtype == np.float64
    assert np.all(np.diff(times) >= 0) and times[0] >= 0 and times[-1] < DURATION
    assert len(times) / DURATION == pytest.approx(RATE, rel=0.04)


def test_poisson_quanta_stamps_arrivals_at_10ms_quantum_starts():
    times = poisson_quanta(RATE, 100.0, rng())
    quanta = times * 100
    np.testing.assert_allclose(quanta, np.round(quanta), atol=1e-6)
    # several arrivals can share a quantum, as in the authors' generator
    assert len(np.unique(poisson_quanta(300.0, 10.0, rng()))) < len(poisson_quanta(300.0, 10.0, rng()))


def test_poisson_quanta_counts_are_poisson():
    counts = np.bincount(np.round(poisson_quanta(50.0, 200.0, rng()) * 100).astype(int), minlength=20000)
    assert counts.mean() == pytest.approx(0.5, rel=0.03)
    assert counts.var() == pytest.approx(0.5, rel=0.05)     # Poisson: variance equals mean


@pytest.mark.parametrize("cv", [0.5, 1.0, 3.0])
def test_gamma_gaps_have_the_requested_cv(cv):
    gaps = np.diff(gamma(RATE, DURATION, rng(), cv=cv))
    assert gaps.std() / gaps.mean() == pytest.approx(cv, rel=0.06)
    assert gaps.mean() == pytest.approx(1 / RATE, rel=0.08)


def test_exponential_gaps_have_cv_one():
    gaps = np.diff(exponential(RATE, DURATION, rng()))
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, rel=0.04)


def test_constant_is_evenly_spaced():
    assert constant(2.0, 3.0, rng()).tolist() == [0.0, 0.5, 1.0, 1.5, 2.0, 2.5]


@pytest.mark.parametrize("name", sorted(ARRIVALS))
def test_same_seed_same_arrivals(name):
    assert np.array_equal(ARRIVALS[name](3.0, 500.0, rng(1)), ARRIVALS[name](3.0, 500.0, rng(1)))


@pytest.mark.parametrize("rate, duration", [(0.0, 10.0), (-1.0, 10.0), (1.0, 0.0), (float("inf"), 1.0)])
def test_bad_rate_or_duration(rate, duration):
    with pytest.raises(ValueError):
        poisson_quanta(rate, duration, rng())
