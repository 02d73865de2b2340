"""The clock's one way in builds every kind from its config, and refuses what it cannot build by the key."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from calibrate.clock.roofline import RooflineCostModel, RooflineParams
from calibrate.cost_models.profile_model import ProfileCostModel
from calibrate.cost_models.registry import KINDS, Clock, CostModelConfig, build_cost_model
from calibrate.fitting.profile_file import load_profile
from calibrate.hardware.hardware import load_hardware
from calibrate.parts.host_model import host_model_path
from engine.core.batch import Batch
from engine.errors import SpecError
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


def test_a_profile_names_the_host_model_a_config_without_one_is_charged(tmp_path):
    """The whole A100 clock states its default engine; a config's own host model wins over it; a profile naming an
    unknown one is refused by the key."""
    clock = Clock(load_model_spec("opt-13b"), load_hardware("a100-40gb"))
    whole = PROFILES / "a100-80gb.yaml"
    default = build_cost_model(CostModelConfig("transfer", whole), clock)
    assert "host: vllm-a100-2024-05" in default.source and "the profile's default host model" in default.source
    assert default.host_time(BATCH) > 1e-3  # a vLLM-derived engine's milliseconds, not the CPU engine's 0.15
    chosen = build_cost_model(CostModelConfig("transfer", whole, host=host_model_path("vllm-v1-2026")), clock)
    assert "host: vllm-v1-2026" in chosen.source and "default" not in chosen.source.split("host:")[-1]
    assert chosen.host_time(BATCH) < default.host_time(BATCH)
    bad = tmp_path / "bad.yaml"
    bad.write_text(whole.read_text().replace("host_model: vllm-a100-2024-05", "host_model: vllm-0.1"))
    with pytest.raises(SpecError, match="host_model"):
        build_cost_model(CostModelConfig("transfer", bad), clock)


def test_a_transfer_may_charge_a_paged_kernels_block_reads_over_measured_attention(tmp_path):
    """The paper-era paged kernel's overhead over a dense one is a stated factor in the config, over the measured
    kernel's attention: charged to paged systems only, where a config asks for it."""
    whole = PROFILES / "a100-80gb.yaml"
    hw = load_hardware("a100-40gb")
    spec = load_model_spec("opt-13b")
    decode = Batch(decode_seq_ids=list(range(8)), decode_context_lens=[500] * 8, num_running_groups=8)
    plain, paged, dense = (build_cost_model(CostModelConfig("transfer", whole, block_read_overhead_tokens=tokens),
                                            Clock(spec, hw, paged=is_paged))
                           for tokens, is_paged in ((None, True), (3.68, True), (3.68, False)))
    extra = paged.breakdown(decode).device["attention"] - plain.breakdown(decode).device["attention"]
    blocks = decode.decode_blocks(16)
    waves = load_profile(whole).attention["waves"]["bandwidth_efficiency"]  # the decodes' own achieved bandwidth
    assert extra == pytest.approx(blocks * 3.68 * spec.kv_bytes_per_token(2) / (hw.hbm_bytes_per_s * waves), rel=1e-9)
    assert dense.iteration_time(decode) == plain.iteration_time(decode)  # a dense kernel pays no block reads
    assert "3.68 tokens' K/V more (config)" in paged.source
    with pytest.raises(SpecError, match="cost_model.block_read_overhead_tokens"):
        experiment_from_dict(yaml.safe_load(tiny(cost_model=f"{{kind: transfer, path: {whole}, "
                                                 "block_read_overhead_tokens: -1}")), str(tmp_path / "x.yaml"),
                             tmp_path)


def test_calibrate_show_says_which_host_model_the_profile_defaults_to(capsys):
    from servesim.cli import main

    assert main(["calibrate", "show", str(PROFILES / "a100-80gb.yaml")]) == 0
    shown = capsys.readouterr().out
    assert "host part: the host model vllm-a100-2024-05, the profile's default" in shown
    assert "not measured" not in shown.split("host part")[1].splitlines()[0]
