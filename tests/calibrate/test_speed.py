"""The speed probe: when it samples, what factor it reports, how a profile keeps its reference,
and that a scaled cost model makes the simulator's machine exactly that much slower."""
import math

import numpy as np
import pandas as pd
import pytest

from calibrate.clock.costmodel import ScaledCostModel
from calibrate.clock.roofline import RooflineCostModel
from calibrate.fitting.fit import fit_profile
from calibrate.profiling.profile import probe_rows
from calibrate.profiling.speed import (
    PROBE_SHAPES,
    SpeedProbe,
    SpeedSamples,
    machine_speed,
    probe_blocks,
)
from engine.core.batch import Batch
from engine.core.blocks import blocks_for
from engine.errors import SpecError
from tests.helpers.synthetic_profile import synthetic_raw


class FakeRunner:
    """Times every probe shape at a fixed value per shape; counts the calls."""

    def __init__(self, seconds: dict[tuple, float]):
        self.seconds, self.calls = seconds, []

    def time_batch(self, prefill, decode, repeats=1, warmup=1):
        self.calls.append((tuple(prefill), tuple(decode), warmup))
        return [self.seconds[(tuple(prefill), tuple(decode))]] * repeats


def fake_runner(decode_s: float = 0.05, prefill_s: float = 0.15) -> FakeRunner:
    times = {"decode": decode_s, "prefill": prefill_s}
    return FakeRunner({shape: times[name] for name, shape in PROBE_SHAPES.items()})


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_the_overall_factor_is_the_geometric_mean_of_the_probe_ratios():
    reference = {"decode_s": 0.05, "prefill_s": 0.10}
    assert machine_speed({"decode": 0.05, "prefill": 0.10}, reference).factor == pytest.approx(1.0)
    # decode 2x slower, prefill 8x slower: sqrt(2 * 8) = 4
    assert machine_speed({"decode": 0.10, "prefill": 0.80}, reference).factor == pytest.approx(4.0)
    assert machine_speed({"decode": 0.025, "prefill": 0.05}, reference).factor == pytest.approx(0.5)


def test_speed_is_unknown_without_every_probe():
    assert machine_speed({"decode": 0.05}, {"decode_s": 0.05, "prefill_s": 0.1}) is None
    assert machine_speed({"decode": 0.05, "prefill": 0.1}, {}) is None


def test_probe_samples_only_when_its_interval_has_passed():
    runner, clock = fake_runner(), FakeClock()
    probe = SpeedProbe(runner, every_s=1.0, clock=clock)
    warmups = len(runner.calls)
    assert warmups == len(PROBE_SHAPES) and all(call[2] == 1 for call in runner.calls)
    probe.maybe_sample()  # the first call always samples
    clock.now = 0.5
    probe.maybe_sample()  # too soon
    clock.now = 1.0
    probe.maybe_sample()
    assert probe.samples.count == 2
    assert len(runner.calls) == warmups + 2 * len(PROBE_SHAPES)
    done = probe.reset()
    assert done.medians() == {"decode": 0.05, "prefill": 0.15}
    assert probe.samples.count == 0
    probe.maybe_sample()  # a new window samples at once
    assert probe.samples.count == 1


@pytest.mark.parametrize("every_s", [-1, 0])
def test_probe_refuses_an_interval_that_is_not_positive(every_s):
    with pytest.raises(ValueError, match="every_s"):
        SpeedProbe(fake_runner(), every_s=every_s)


def test_probe_blocks_hold_every_probe_shape():
    for block_size in (1, 8, 16, 32):
        need = probe_blocks(block_size)
        for prefill, decode in PROBE_SHAPES.values():
            assert need >= sum(blocks_for(n + 1, block_size) for n in (*prefill, *decode))


def test_a_fit_keeps_the_probe_medians_as_the_speed_reference_and_fits_without_them():
    raw = synthetic_raw(noise=0.0)
    samples = SpeedSamples()
    for decode, prefill in ((0.05, 0.14), (0.06, 0.15), (0.07, 0.90)):
        samples.add("decode", decode)
        samples.add("prefill", prefill)
    with_probes = pd.concat([raw, pd.DataFrame(probe_rows(samples, 16)).assign(**raw.iloc[0][
        ["model", "device", "device_name", "dtype", "block_size", "tensor_parallel"]].to_dict())], ignore_index=True)
    plain, probed = fit_profile(raw, "raw.csv", "test"), fit_profile(with_probes, "raw.csv", "test")
    assert plain.profile.speed_reference == {}
    assert probed.profile.speed_reference["decode_s"] == pytest.approx(0.06)
    assert probed.profile.speed_reference["prefill_s"] == pytest.approx(0.15)  # a median: one slow sample is not it
    assert probed.profile.speed_reference["samples"] == 3
    assert probed.profile.train_rows == plain.profile.train_rows  # probe rows are not shapes to fit
    assert probed.profile.coefficients == plain.profile.coefficients


def test_an_unknown_probe_name_is_refused_naming_the_file():
    raw = synthetic_raw(noise=0.0)
    bad = pd.concat([raw, raw.iloc[[0]].assign(kind="probe", probe="warp")], ignore_index=True)
    with pytest.raises(SpecError, match="raw.csv.*warp"):
        fit_profile(bad, "raw.csv", "test")


def test_a_scaled_cost_model_scales_every_cost():
    from calibrate.hardware.hardware import load_hardware
    from engine.specs.loader import load_model_spec

    base = RooflineCostModel(load_model_spec("opt-13b"), load_hardware("a100-40gb"))
    scaled = ScaledCostModel(base, 1.5)
    batch = Batch(prefill_seq_ids=[0], prefill_lens=[100], decode_seq_ids=[1, 2], decode_context_lens=[50, 70])
    assert scaled.iteration_time(batch) == pytest.approx(1.5 * base.iteration_time(batch))
    assert scaled.swap_time(8) == pytest.approx(1.5 * base.swap_time(8))
    assert "x 1.500" in scaled.source
    for bad in (0.0, -1.0, float("nan")):
        with pytest.raises(ValueError):
            ScaledCostModel(base, bad)


def test_machine_speed_per_kind():
    speed = machine_speed({"decode": 0.06, "prefill": 0.30}, {"decode_s": 0.05, "prefill_s": 0.20})
    assert (speed.decode, speed.prefill) == (pytest.approx(1.2), pytest.approx(1.5))
    assert speed.factor == pytest.approx((1.2 * 1.5) ** 0.5)
    assert machine_speed({"decode": 0.06}, {"decode_s": 0.05, "prefill_s": 0.2}) is None


def test_the_simulator_on_a_machine_twice_as_slow_takes_twice_as_long():
    """One request at a time (no queueing): every latency doubles exactly."""
    from calibrate.hardware.hardware import load_hardware
    from engine.core.system import PAPER_SYSTEMS
    from engine.specs.loader import load_model_spec
    from sim.core.simulate import simulate
    from sim.workload.trace import Trace

    spec = load_model_spec("opt-13b")
    base = RooflineCostModel(spec, load_hardware("a100-40gb"))
    trace = Trace(arrival_s=np.array([0.0, 100.0]), prompt_len=np.array([40, 80]), output_len=np.array([10, 20]))
    runs = [simulate(trace, spec, PAPER_SYSTEMS["vllm"], model, 64, 0).requests_frame()
            for model in (base, ScaledCostModel(base, 2.0))]
    fast, slow = ((r["finish_s"] - r["arrival_s"]).to_numpy() for r in runs)
    assert slow == pytest.approx(2 * fast) and math.isfinite(fast.sum())
