"""Every shipped experiment loads and fits its hardware: a typo in one is caught here, not by a user."""
from pathlib import Path

import pytest

from sim.experiment.config import load_experiment
from tests.helpers.plans import shipped_experiment

ROOT = Path(__file__).resolve().parents[3]
CONFIGS = sorted(p for d in ("", "paper", "examples") for p in (ROOT / "configs" / d).glob("*.yaml"))


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_shipped_experiment_loads(path):
    exp = shipped_experiment(path)
    assert exp.systems and exp.rates
    for system in exp.systems:
        assert exp.kv_pool(system).num_slots >= exp.model.max_seq_len


def test_paper_pools_match_table_1():
    slots = {name: load_experiment(ROOT / "configs" / "paper" / f"{name}.yaml") for name in
             ("fig12a_sharegpt_opt13b", "fig12c_sharegpt_opt175b")}
    exp13 = slots["fig12a_sharegpt_opt13b"]
    assert exp13.kv_pool(exp13.systems[0]).num_gpu_blocks == 983
    exp175 = slots["fig12c_sharegpt_opt175b"]
    assert exp175.kv_pool(exp175.systems[0]).num_gpu_blocks == 3754


PAPER = sorted((ROOT / "configs" / "paper").glob("*.yaml")) + [ROOT / "configs" / "quickstart.yaml"]


@pytest.mark.parametrize("path", PAPER, ids=lambda p: p.stem)
def test_the_paper_runs_on_the_whole_a100_clock_with_an_engines_host_time(path):
    """The paper's configs and the quickstart price device time from the whole A100 clock and charge the host
    work of the engine nearest the paper's, for every system they run: never a clock without host time."""
    from engine.core.batch import Batch
    from sim.experiment.run import make_cost_model

    exp = load_experiment(path)
    decode = Batch(decode_seq_ids=list(range(8)), decode_context_lens=[400] * 8, num_running_groups=8)
    for system in exp.systems:
        cost = make_cost_model(exp, system)
        assert "a100-80gb.yaml" in cost.source and "host: vllm-a100-2024-01" in cost.source
        assert cost.host_time(decode) > 1e-3, system.name  # milliseconds an iteration, as that engine measured
        assert "attention measured" in cost.source
