"""A profile's measured attention part: imported, shown, checked on load, round-tripped, and used by the transfer."""
from dataclasses import asdict
from pathlib import Path

import pytest
import yaml
from synthetic_attention import HARDWARE, TRUE_FIT, write_table

from calibrate.cost_models.profile_model import transferred_roofline
from calibrate.fitting.profile_file import load_profile
from calibrate.hardware.hardware import load_hardware
from calibrate.judging.op_import import add_attention, with_host_model
from calibrate.parts.attention_fit import AttentionFit
from calibrate.parts.attention_waves import DecodeGrid
from engine.core.batch import BatchShape
from engine.errors import SpecError
from engine.specs.loader import load_model_spec
from servesim.cli import main
from sim.experiment.config import load_experiment
from sim.experiment.run import make_cost_model
from tests.calibrate.synthetic_ops import write_all_reduce, write_tables

PROFILES = Path(__file__).resolve().parents[2] / "calibrate" / "profiles"
SHIPPED, LINEAR = PROFILES / "a100-80gb.yaml", PROFILES / "a100-h100-linear.yaml"
LLAMA7B, A100_80 = load_model_spec("llama-7b"), load_hardware("a100-80gb")


@pytest.mark.slow
def test_the_cli_imports_the_attention_shows_it_and_the_transfer_prices_by_it(tmp_path, capsys):
    tables = write_tables(tmp_path)
    attention = write_table(tmp_path / "attention.csv")
    out = tmp_path / "a100.yaml"
    assert main(["calibrate", "import", *map(str, tables), "--all-reduce", str(write_all_reduce(tmp_path / "ar.csv")),
                 "--attention", str(attention), "--model", "llama-7b", "--measured-on", HARDWARE,
                 "--source", "synthetic", "--out", str(out)]) == 0
    assert "decode   held out (contexts >= 3024)" in capsys.readouterr().out
    profile = load_profile(out)
    fit = AttentionFit.from_dict(profile.attention)
    assert fit.decode_bandwidth_efficiency == pytest.approx(TRUE_FIT.decode_bandwidth_efficiency, rel=1e-6)
    assert profile.provenance["attention_table"] == "attention.csv"
    assert main(["calibrate", "show", str(out)]) == 0
    shown = capsys.readouterr().out
    assert "attention (measured on a100-80gb" in shown and "prefill  held out (chunks >= 3072)" in shown
    cost = transferred_roofline(out, None, LLAMA7B, A100_80, 1, 2, 16)
    assert "attention measured in a100.yaml (held-out error decode" in cost.source
    assert "roofline's defaults" not in cost.source
    assert cost.attention == fit


def test_a_profile_with_attention_round_trips(tmp_path):
    profile = load_profile(SHIPPED)
    assert load_profile(profile.save(tmp_path / "again.yaml")) == profile
    assert "# held-out error of the attention part: decode" in (tmp_path / "again.yaml").read_text()


@pytest.mark.parametrize("edit, key", [
    (lambda a: a.update(decode_bandwidth_efficiency=1.5), "attention.decode_bandwidth_efficiency"),
    (lambda a: a.pop("prefill_compute_efficiency"), "attention.prefill_compute_efficiency"),
    (lambda a: a.update(decode_latency_s=-1e-6), "attention.decode_latency_s"),
    (lambda a: a.update(prefill_kv_bandwidth_efficiency=0), "attention.prefill_kv_bandwidth_efficiency"),
    (lambda a: a.update(colour="blue"), "attention.colour"),
    (lambda a: a.update(block_size=0), "attention.block_size"),
    (lambda a: a.update(heldout=[1, 2]), "attention.heldout"),
])
def test_a_malformed_attention_part_is_a_one_line_error_naming_the_key(tmp_path, edit, key):
    data = yaml.safe_load(SHIPPED.read_text())
    edit(data["attention"])
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(SpecError) as err:
        load_profile(path)
    assert str(path) in str(err.value) and key in str(err.value) and "\n" not in str(err.value)


def test_an_attention_part_that_is_not_a_mapping_is_refused(tmp_path):
    data = yaml.safe_load(SHIPPED.read_text())
    data["attention"] = 0.5
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(SpecError, match="attention"):
        load_profile(path)


def test_the_shipped_profile_is_the_linear_one_plus_the_attention_part_and_a_host_model(tmp_path):
    shipped, linear = asdict(load_profile(SHIPPED)), asdict(load_profile(LINEAR))
    assert linear["attention"] is None and shipped["attention"] is not None
    assert shipped["provenance"].pop("attention_table") == "attention.csv"
    # its host work is an engine's host model, not the linear profile's measurement of servesim's CPU engine
    assert (shipped["host"], shipped["host_model"]) == (None, "vllm-a100-2024-05") and linear["host"] is not None
    for key in ("attention", "command", "host", "host_model"):
        shipped.pop(key), linear.pop(key)
    assert shipped == linear
    source = load_profile(SHIPPED).attention["source"]
    assert "microsoft/vidur" in source and "e2d00e9afba96cec9f0e7ea560bbfc4a539fae6a" in source
    assert "MIT" in source


@pytest.mark.slow
def test_adding_attention_to_the_linear_profile_is_what_was_shipped_but_for_the_fit(tmp_path):
    # the shipped file's recipe (calibrate/profiles/README.md) on a synthetic table: the rest stays as it was
    made = with_host_model(add_attention(LINEAR, write_table(tmp_path / "attention.csv"), "test", "synthetic",
                                         measured_on=HARDWARE), "vllm-a100-2024-05")
    shipped = load_profile(SHIPPED)
    assert made.linear == shipped.linear and made.host == shipped.host and made.all_reduce == shipped.all_reduce
    assert made.host_model == shipped.host_model == "vllm-a100-2024-05" and shipped.host is None
    assert made.device_name == shipped.device_name and made.token_costs_s == shipped.token_costs_s
    with pytest.raises(SpecError, match="device_name"):  # a two-GPU profile's attention needs its GPU named
        add_attention(LINEAR, tmp_path / "attention.csv", "test", "synthetic")
    assert AttentionFit.from_dict(made.attention).decode_latency_s == pytest.approx(TRUE_FIT.decode_latency_s)


def test_the_shipped_profile_loads_through_a_transfer_config_and_says_its_attention_was_measured(tmp_path):
    config = tmp_path / "exp.yaml"
    config.write_text(f"""
model: llama-7b
hardware: a100-80gb
kv_cache_gib: 12
workload: {{dataset: sharegpt, arrival: poisson, duration_s: 60}}
systems: [vllm]
rates: [2.0]
warmup_s: 0
cost_model: {{kind: transfer, path: {SHIPPED}}}
""")
    exp = load_experiment(config)
    cost = make_cost_model(exp, exp.systems[0])
    assert "attention measured in a100-80gb.yaml (held-out error decode" in cost.source
    linear = make_cost_model(load_experiment(config, [f"cost_model.path={LINEAR}"]), exp.systems[0])
    assert "attention at the roofline's defaults" in linear.source
    decodes = BatchShape((), (1000,) * 32)
    fit = AttentionFit.from_dict(load_profile(SHIPPED).attention)
    assert cost.decode_attention_time(decodes) != linear.decode_attention_time(decodes)
    # the A100's sheet gives its 108 SMs, so the decodes are priced in waves: 32 sequences x 32 heads, one wave
    grid = DecodeGrid.of_heads(LLAMA7B.num_heads, LLAMA7B.num_kv_heads, LLAMA7B.head_dim)
    assert fit.waves is not None and "decode in waves over 108 SMs" in cost.source
    assert cost.decode_attention_time(decodes) == pytest.approx(
        LLAMA7B.num_layers * fit.waves.decode_time(grid, A100_80, [32], [1000])[0], rel=1e-12)
