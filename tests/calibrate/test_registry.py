"""The clock's one way in builds every kind from its config, and refuses what it cannot build by the key."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from calibrate.hardware import load_hardware
from calibrate.profile_model import ProfileCostModel
from calibrate.registry import KINDS, Clock, CostModelConfig, build_cost_model
from calibrate.roofline import RooflineCostModel, RooflineParams
from engine.core.batch import Batch
from engine.specs.errors import SpecError
from engine.specs.loader import load_model_spec
from sim.experiment.config import experiment_from_dict
from tests.helpers.configs import tiny

PROFILES = Path(__file__).resolve().parents[2] / "calibrate" / "profiles"
LLAMA7B, OPT125M = load_model_spec("llama-7b"), load_model_spec("opt-125m")
BATCH = Batch(decode_seq_ids=[0, 1], decode_context_lens=[100, 900], num_running_groups=2)


def test_every_kind_is_built_from_its_config():
    a100 = Clock(LLAMA7B, load_hardware("a100-80gb"))
    configs = {"roofline": CostModelConfig("roofline", roofline=RooflineParams(overhead_s=1e-3)),
               "profile": CostModelConfig("profile", PROFILES / "cpu-opt-125m.yaml"),
               "transfer": CostModelConfig("transfer", PROFILES / "a100-80gb-linear.yaml")}
    assert set(configs) == set(KINDS)
    clocks = {"profile": Clock(OPT125M, load_hardware("a100-80gb"))}
    built = {kind: build_cost_model(config, clocks.get(kind, a100)) for kind, config in configs.items()}
    assert isinstance(built["roofline"], RooflineCostModel) and built["roofline"].params.overhead_s == 1e-3
    assert isinstance(built["profile"], ProfileCostModel)
    assert "a100-80gb-linear.yaml" in built["transfer"].source
    # the clock's own settings reach the model: a dense kernel pays no per-block term
    dense = build_cost_model(configs["roofline"], Clock(LLAMA7B, load_hardware("a100-80gb"), paged=False))
    assert dense.iteration_time(BATCH) < built["roofline"].iteration_time(BATCH)


def test_an_unknown_kind_or_a_missing_profile_is_one_line_naming_the_key():
    clock = Clock(LLAMA7B, load_hardware("a100-80gb"))
    with pytest.raises(SpecError, match=r"cfg.yaml: cost_model.kind: 'vidur' is not one of \['roofline'"):
        build_cost_model(CostModelConfig("vidur"), clock, "cfg.yaml")
    with pytest.raises(SpecError, match="cost_model.path"):
        build_cost_model(CostModelConfig("transfer"), clock)


def test_an_unknown_gpu_or_kind_in_a_config_names_its_key(tmp_path):
    def load(**keys):
        return experiment_from_dict(yaml.safe_load(tiny(**keys)), str(tmp_path / "x.yaml"), tmp_path)

    with pytest.raises(SpecError, match="hardware") as err:
        load(hardware="z100")
    assert "\n" not in str(err.value)
    with pytest.raises(SpecError, match="cost_model.kind"):
        load(cost_model="{kind: vidur}")
    with pytest.raises(SpecError, match="cost_model.measured_on"):
        load(cost_model=f"{{kind: transfer, path: {PROFILES / 'a100-80gb-linear.yaml'}, measured_on: z100}}")
