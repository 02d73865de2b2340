"""The shipped file of what prices each regime on a GPU nobody measured: the rule's choice on its own table, and a
malformed entry refused in one line naming the file and the key."""
import pytest
import yaml

from calibrate.cost_models import carry_file
from calibrate.cost_models.carry_file import load_carry, regime_choice
from calibrate.judging.carry_rule import ROOFLINE, choose
from calibrate.parts.transfer import FINE_REGIMES, RIDGE
from engine.errors import SpecError


def test_the_shipped_choice_is_what_the_rule_makes_of_the_shipped_table():
    data = load_carry()
    fresh = choose(carry_file.held_out_scores(data))
    assert {r: v.carry for r, v in fresh.items()} == {r: data["choice"][r]["carry"] for r in FINE_REGIMES}
    assert {r: v.reason for r, v in fresh.items()} == {r: data["choice"][r]["reason"] for r in FINE_REGIMES}
    assert set(data["held_out"]) == {"a100-80gb", "h100-sxm", "rtx-pro-6000-server", "rtx-4090"}
    for regime, entry in data["choice"].items():
        if entry["carry"] != ROOFLINE:
            assert entry["carry"] in data["fits"]
            for regimes in data["held_out"].values():
                errors = regimes[regime]["errors"]
                if entry["carry"] in errors:  # every GPU held out from the carry: it beat the roofline there
                    assert errors[entry["carry"]]["mean"] < errors[ROOFLINE]["mean"]
                    assert errors[entry["carry"]]["worst"] <= errors[ROOFLINE]["worst"]


@pytest.mark.parametrize("edit, key", [
    (lambda raw: raw.pop("choice"), "choice"),
    (lambda raw: raw["choice"].pop(RIDGE), f"choice.{RIDGE}"),
    (lambda raw: raw["choice"][RIDGE].update(carry="h200"), f"choice.{RIDGE}.carry"),
    (lambda raw: raw["choice"].update({"warp-bound": raw["choice"][RIDGE]}), "choice.warp-bound"),
    (lambda raw: next(iter(raw["fits"].values())).update(compute_efficiency=1.5), "compute_efficiency"),
    (lambda raw: raw["held_out"]["rtx-4090"][RIDGE]["errors"][ROOFLINE].update(worst=-1),
     f"held_out.rtx-4090.{RIDGE}.errors.{ROOFLINE}.worst"),
    (lambda raw: raw.update(format="servesim-carry/0"), "format"),
])
def test_a_malformed_choice_file_is_one_line_naming_the_file_and_key(tmp_path, edit, key):
    raw = yaml.safe_load(carry_file.CARRY_FILE.read_text())
    edit(raw)
    broken = tmp_path / "broken.yaml"
    broken.write_text(yaml.safe_dump(raw))
    with pytest.raises(SpecError, match="broken.yaml: ") as err:
        regime_choice(load_carry(broken), str(broken))
    assert key in str(err.value) and "\n" not in str(err.value)
