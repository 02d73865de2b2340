"""The shipped profiles load, say how wrong they are, and drive the simulator's clock and nothing else."""
from pathlib import Path

import pandas as pd
import pytest

from calibrate.fitting.fit import fit_profile
from calibrate.fitting.profile_file import load_profile
from fidelity.replay import ReplayedTimes
from sim.experiment.config import load_experiment
from sim.experiment.run import simulate_trace, trace_for

ROOT = Path(__file__).resolve().parents[2]
PROFILES = sorted((ROOT / "calibrate" / "profiles").glob("*.yaml"))
CPU_PROFILE = ROOT / "calibrate" / "profiles" / "cpu-opt-125m.yaml"

EXPERIMENT = f"""
model: opt-125m
hardware: {ROOT}/configs/validation/cpu-host.yaml
dtype_bytes: 4
kv_cache_gib: 0.25
workload: {{dataset: sharegpt-standin, arrival: poisson, duration_s: 60}}
systems: [orca-oracle, vllm]
rates: [1.0]
warmup_s: 0
"""


@pytest.mark.parametrize("path", PROFILES, ids=lambda p: p.stem)
def test_shipped_profile_loads_with_its_provenance(path):
    profile = load_profile(path)
    assert profile.command and profile.created and profile.heldout_method
    if profile.linear is None:
        assert (path.parent / f"{path.stem}.raw.csv").exists()  # the measurements it was fitted on
    else:  # imported from published measurements, not shipped: their source and licence instead
        # Vidur's tables, or LLMServingSim's bundles (calibrate/judging/bundle_import.py), each licence beside them
        measured = "bundles" if "bundles" in profile.provenance else "tables"
        assert {"source", "licence", measured} <= set(profile.provenance)
        readme = (path.parent / "README.md").read_text()
        assert f"`{path.name}`: source and licence" in readme and "MIT License" in readme
        licence = "LICENSE.llmservingsim" if measured == "bundles" else "LICENSE.vidur"
        assert licence in profile.provenance["licence"]
        assert "MIT License" in (path.parent / licence).read_text()


def test_the_cpu_profile_is_what_its_command_makes_of_its_measurements_and_says_how_wrong_it_is():
    """Re-profiled on each engine that changes the CPU's speed (benchmarks/measurements/cpu_profile.md): whatever
    its figures, it must be the fit of the raw CSV beside it, measured in both parts, its error in its header."""
    profile = load_profile(CPU_PROFILE)
    raw = pd.read_csv(CPU_PROFILE.with_suffix("").with_suffix(".raw.csv"))
    refit = fit_profile(raw, "cpu-opt-125m.raw.csv", profile.command).profile
    assert refit.coefficients == pytest.approx(profile.coefficients)
    assert refit.token_costs_s == pytest.approx(profile.token_costs_s)
    assert refit.heldout_mape == pytest.approx(profile.heldout_mape)
    assert profile.torch_threads == 1 and profile.speed_reference  # as configs/validation runs the engine
    assert profile.device_part["measured_from"].startswith("device_s")  # the device and host parts apart
    assert profile.host is not None and 0 < profile.host["heldout_mape"] <= profile.host["heldout_p95_ape"]
    assert 0 < profile.heldout_mape <= profile.heldout_p95_ape < 1
    header = CPU_PROFILE.read_text().splitlines()[1]
    assert header == (f"# held-out error of the device part: mean {profile.heldout_mape:.1%}, "
                      f"p95 {profile.heldout_p95_ape:.1%}")


def test_switching_to_a_profile_changes_the_times_and_nothing_else(tmp_path):
    path = tmp_path / "exp.yaml"
    path.write_text(EXPERIMENT)
    roofline = load_experiment(path)
    profiled = load_experiment(path, [f"cost_model={CPU_PROFILE}"])
    for system in roofline.systems:
        trace = trace_for(roofline, 1.0, 0)
        assert (trace.prompt_len == trace_for(profiled, 1.0, 0).prompt_len).all()  # same requests
        by_profile, _ = simulate_trace(profiled, system, trace)
        by_roofline, _ = simulate_trace(roofline, system, trace)
        it_profile = by_profile.iterations_frame()
        assert not it_profile["duration_s"].equals(by_roofline.iterations_frame()["duration_s"])
        # give the roofline config the profile's iteration times: the same schedule comes out
        replayed, _ = simulate_trace(roofline, system, trace, ReplayedTimes(list(it_profile["duration_s"])))
        pd.testing.assert_frame_equal(replayed.iterations_frame(), it_profile)
        pd.testing.assert_frame_equal(replayed.requests_frame(), by_profile.requests_frame())
