"""Every file a config names is found one way, whatever folder the user runs from: beside the config, then the
current folder, then servesim's shipped data by name; and an error points at what the user gave (their own sheet,
their folder, their --set), not somewhere else."""
import shutil
from pathlib import Path

import pytest
import yaml

from calibrate.hardware.hardware import HARDWARE_DIR, hardware_from_dict, load_hardware
from engine.errors import SpecError
from fidelity.config import load_validation
from servesim.cli import main
from sim.capacity.prices import load_prices
from sim.experiment.config import kv_link_of, load_experiment
from tests.helpers.configs import tiny
from tests.helpers.plans import shipped_experiment

ROOT = Path(__file__).resolve().parents[3]
SPLIT = "{prefill: {replicas: 1}, decode: {replicas: 1}, kv_link: %s}"
MY_SHEET = """\
name: my-rtx6000
peak_flops: 3.0e+14
hbm_bytes_per_s: 9.6e+11
memory_gib: 48
nvlink_bytes_per_s: 5.0e+10
pcie_bytes_per_s: 3.2e+10
"""


@pytest.fixture
def elsewhere(tmp_path, monkeypatch) -> Path:
    """A config folder, and the current folder another one beside it."""
    (tmp_path / "configs").mkdir()
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    return tmp_path / "configs"


def test_a_send_recv_table_is_found_beside_the_config_from_another_folder(elsewhere):
    shipped = ROOT / "calibrate" / "network_tables" / "h100_dgx.send_recv.csv"
    shutil.copy(shipped, elsewhere / "mine.send_recv.csv")
    config = elsewhere / "split.yaml"
    config.write_text(tiny(split=SPLIT % "{kind: measured, table: mine.send_recv.csv}", systems="[vllm]"))
    mine = load_experiment(config)
    assert mine.split.kv_link["table"] == str(elsewhere / "mine.send_recv.csv")
    shipped = load_experiment(config, ["split.kv_link={kind: measured, table: h100_dgx}"])
    assert kv_link_of(mine, mine.split).bytes_per_s == kv_link_of(shipped, shipped.split).bytes_per_s


def test_a_folder_given_as_a_send_recv_table_is_called_a_folder(elsewhere):
    (elsewhere / "tables").mkdir()
    config = elsewhere / "split.yaml"
    config.write_text(tiny(split=SPLIT % "{kind: measured, table: tables}", systems="[vllm]"))
    with pytest.raises(SpecError) as refused:
        load_experiment(config)
    assert refused.value.key == "split.kv_link.table"
    assert "'tables' is a folder" in refused.value.message and "a .csv with the columns" in refused.value.message


def test_a_copied_example_finds_the_shipped_profile_by_its_place_in_the_source_tree(elsewhere):
    text = tiny(cost_model="{kind: transfer, path: ../../calibrate/profiles/a100-80gb.yaml, host: vllm-0.19}")
    (elsewhere / "copied.yaml").write_text(text)
    exp = load_experiment(elsewhere / "copied.yaml")
    assert exp.cost_model.profile_path == ROOT / "calibrate" / "profiles" / "a100-80gb.yaml"


def test_a_missing_profile_says_where_it_looked_and_the_closest_shipped_name(elsewhere):
    (elsewhere / "exp.yaml").write_text(tiny(cost_model="{kind: transfer, path: a100-80gbb}"))
    with pytest.raises(SpecError) as refused:
        load_experiment(elsewhere / "exp.yaml")
    message = refused.value.message
    assert str(elsewhere / "a100-80gbb") in message and str(Path.cwd() / "a100-80gbb") in message
    assert "calibrate/profiles/" in message and "did you mean 'a100-80gb'?" in message


def test_a_mistyped_cost_model_key_is_not_hidden_by_a_missing_profile(elsewhere):
    (elsewhere / "exp.yaml").write_text(tiny(cost_model="{kind: transfer, path: nowhere.yaml, hots: vllm-0.19}"))
    with pytest.raises(SpecError) as refused:
        load_experiment(elsewhere / "exp.yaml")
    assert refused.value.key == "cost_model.hots" and "unknown key" in refused.value.message


def test_a_sheet_of_ones_own_without_a_nic_is_named_as_given(elsewhere):
    (elsewhere / "my-rtx6000.yaml").write_text(MY_SHEET)
    config = elsewhere / "split.yaml"
    config.write_text(tiny(hardware="my-rtx6000.yaml", split=SPLIT % "infiniband", systems="[vllm]"))
    with pytest.raises(SpecError) as refused:
        load_experiment(config)
    assert refused.value.key == "split.kv_link"
    assert f"({elsewhere / 'my-rtx6000.yaml'} gives none)" in refused.value.message
    assert "calibrate/hardware_specs" not in refused.value.message


def test_a_sheet_remembers_its_file_but_is_its_figures():
    shipped = load_hardware("h100-sxm")
    assert shipped.sheet == str(HARDWARE_DIR / "h100-sxm.yaml")
    raw = yaml.safe_load((HARDWARE_DIR / "h100-sxm.yaml").read_text())
    assert hardware_from_dict(raw, "elsewhere.yaml") == shipped  # equal figures, equal sheets
    with pytest.raises(SpecError, match="unknown key"):
        hardware_from_dict({**raw, "sheet": "x.yaml"}, "mine.yaml")


def test_a_mistyped_model_given_with_set_is_blamed_on_the_set(elsewhere, capsys):
    (elsewhere / "exp.yaml").write_text(tiny())
    assert main(["run", str(elsewhere / "exp.yaml"), "--set", "model=llama-3-8bb", "--out", "out"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"servesim: error: {elsewhere / 'exp.yaml'}: model: unknown model 'llama-3-8bb'; "
                          "did you mean 'llama-3-8b'? available: [") and err.count("\n") == 1, err
    assert err.endswith("(given by --set model=llama-3-8bb, not by the file)\n") and not Path("out").exists()


def test_a_value_a_set_gave_inside_a_mapping_is_blamed_on_that_set(elsewhere):
    (elsewhere / "exp.yaml").write_text(tiny())
    with pytest.raises(SpecError) as refused:
        load_experiment(elsewhere / "exp.yaml", ["rates=[1]", "cost_model={kind: transfer, path: a100-80gbb}"])
    assert refused.value.key == "cost_model.path"
    assert refused.value.message.endswith("(given by --set cost_model={kind: transfer, path: a100-80gbb}, not by "
                                          "the file)")


def test_a_validation_set_is_blamed_on_the_set(elsewhere):
    shutil.copytree(ROOT / "configs" / "validation", elsewhere / "validation")
    with pytest.raises(SpecError) as refused:
        load_validation(elsewhere / "validation" / "cpu-opt-125m.yaml", ["experiment.hardware=h100sxm"])
    assert "unknown hardware 'h100sxm'; did you mean 'h100-sxm'?" in refused.value.message
    assert "(given by --set experiment.hardware=h100sxm, not by the file)" in refused.value.message


def test_a_value_the_file_gave_is_still_blamed_on_the_file(elsewhere):
    (elsewhere / "exp.yaml").write_text(tiny(model="llama-3-8bb"))
    with pytest.raises(SpecError) as refused:
        load_experiment(elsewhere / "exp.yaml", ["rates=[1]"])
    assert "'llama-3-8bb'" in refused.value.message and "--set" not in refused.value.message


def test_every_shipped_config_loads_copied_elsewhere_and_run_from_another_folder(elsewhere):
    shutil.copytree(ROOT / "configs", elsewhere / "copied")
    configs = sorted((elsewhere / "copied").rglob("*.yaml"))
    assert len(configs) >= 30
    for config in configs:
        if config.parent.name == "prices":  # `servesim plan`'s price tables
            assert load_prices(config).gpus
        elif config.parent.name != "validation":
            assert shipped_experiment(config).rates
        elif config.name != "cpu-host.yaml":  # the hardware sheet the CPU validations name beside them
            assert load_validation(config).experiment.rates
