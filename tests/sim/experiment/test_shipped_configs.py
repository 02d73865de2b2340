"""Every shipped experiment loads and fits its hardware: a typo in one is caught here, not by a user."""
from pathlib import Path

import pytest

from sim.experiment.config import load_experiment

ROOT = Path(__file__).resolve().parents[3]
CONFIGS = sorted(p for d in ("", "paper", "examples") for p in (ROOT / "configs" / d).glob("*.yaml"))


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_shipped_experiment_loads(path):
    exp = load_experiment(path)
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
