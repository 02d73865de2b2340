"""The speculation example (configs/examples/speculative_llama3_70b_h100.yaml): a plain vLLM V1 and an EAGLE head
proposing k = 1..5, each at the conditional rates its comment derives from the source's per-position acceptance, and
a short trace at light load where every k lowers the time per output token."""
from pathlib import Path

import pytest

from sim.experiment.config import load_experiment
from sim.experiment.run import run_one

EXAMPLE = Path(__file__).resolve().parents[3] / "configs" / "examples" / "speculative_llama3_70b_h100.yaml"
# vLLM's measured share of EAGLE drafts accepted through proposal 1, 2, 3 (the config's comment)
REACHED = (0.77, 0.45, 0.24)


def test_the_example_sweeps_k_1_to_5_at_the_sourced_rates():
    exp = load_experiment(EXAMPLE)
    assert (exp.model.name, exp.hardware.name, exp.tensor_parallel) == ("llama-3-70b", "h100-sxm", 4)
    plain, *speculating = exp.systems
    assert plain.speculative is None
    assert [s.speculative.num_speculative_tokens for s in speculating] == [1, 2, 3, 4, 5]
    conditional = [REACHED[0], REACHED[1] / REACHED[0], REACHED[2] / REACHED[1]]
    for system in speculating:
        spec = system.speculative
        assert spec.method == "eagle"
        rates = spec.rates
        assert rates[:3] == pytest.approx(conditional[:len(rates)], abs=0.005)
        assert all(rate == rates[2] for rate in rates[3:])  # held at the third's, as the comment says


def test_at_light_load_every_k_lowers_the_time_per_output_token():
    exp = load_experiment(EXAMPLE, ["workload.duration_s=20", "rates=[2]", "warmup_s=0"])
    tpot = {s.name: run_one(exp, s, 2.0, 0).summary["tpot_mean_s"] for s in exp.systems}
    plain = tpot.pop("vLLM V1")
    assert all(0 < value < plain for value in tpot.values())
