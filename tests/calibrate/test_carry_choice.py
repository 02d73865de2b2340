"""The shipped choice of what prices each regime on a GPU nobody measured, as the transfer cost model and the default
clock read it."""
import pytest
import yaml

from calibrate.clock.roofline import RooflineCostModel
from calibrate.cost_models import carry_file
from calibrate.cost_models.carry_file import shipped_choice
from calibrate.cost_models.default_clock import default_device_profile
from calibrate.cost_models.profile_model import transferred_roofline
from calibrate.cost_models.transfer_cost import RegimeCostModel
from calibrate.fitting.profile_file import load_profile
from calibrate.hardware.hardware import load_hardware
from calibrate.judging.carry_rule import ROOFLINE
from calibrate.judging.transfer_judge import PROFILES
from calibrate.parts.linear_model import LinearFit
from calibrate.parts.transfer import COMPUTE_BOUND, FINE_REGIMES, MEMORY_BOUND, RIDGE, regime_of
from engine.core.batch import Batch
from engine.errors import SpecError
from engine.specs.loader import load_model_spec

A100_LINEAR, A100_CLOCK, TWO_GPUS = (PROFILES / f"{n}.yaml" for n in ("a100-80gb-linear", "a100-80gb",
                                                                         "a100-h100-linear"))


def decode(n: int) -> Batch:
    return Batch(decode_seq_ids=list(range(n)), decode_context_lens=[256] * n)


def prefill(tokens: int) -> Batch:
    return Batch(prefill_seq_ids=[0], prefill_lens=[tokens], prefill_sample_ids=[(0,)])


def expected_models(path, hw, spec):
    """The roofline of the profile's host work, and the same with the shipped choice's fit per regime."""
    host = load_profile(path).host
    choice = shipped_choice()
    roofline = RooflineCostModel(spec, hw, host=host)
    return roofline, {r: RooflineCostModel(spec, hw, linear=choice.carried[r].fit, host=host)
                      for r in choice.use_transfer}


@pytest.mark.parametrize("path", [A100_LINEAR, TWO_GPUS], ids=lambda p: p.stem)
def test_off_its_measured_gpus_a_profile_prices_each_regime_as_the_shipped_choice_chose(path):
    spec, l40s = load_model_spec("llama-7b"), load_hardware("l40s")
    choice = shipped_choice()
    cost = transferred_roofline(path, None, spec, l40s, 1, 2, 16)
    assert choice.describe() in cost.source and "held-out-gpus.yaml" in cost.source
    roofline, carried = expected_models(path, l40s, spec)
    for batch in (decode(1), decode(64), decode(300), prefill(4096)):
        regime = regime_of(batch.num_tokens, l40s, latency=True)
        expected = carried.get(regime, roofline)
        assert cost.iteration_time(batch) == expected.iteration_time(batch), regime
    assert {regime_of(n, l40s, latency=True) for n in (1, 64, 300, 4096)} == set(FINE_REGIMES)


def test_the_cost_model_reads_the_choice_from_the_file(tmp_path, monkeypatch):
    raw = yaml.safe_load(carry_file.CARRY_FILE.read_text())
    carry = next(iter(raw["fits"]))
    raw["choice"][COMPUTE_BOUND] = {"carry": carry, "reason": "edited"}
    raw["choice"][MEMORY_BOUND] = {"carry": ROOFLINE, "reason": "edited"}
    raw["choice"][RIDGE] = {"carry": ROOFLINE, "reason": "edited"}
    edited = tmp_path / "carry.yaml"
    edited.write_text(yaml.safe_dump(raw))
    monkeypatch.setattr(carry_file, "CARRY_FILE", edited)
    spec, l40s = load_model_spec("llama-7b"), load_hardware("l40s")
    cost = transferred_roofline(A100_LINEAR, None, spec, l40s, 1, 2, 16)
    assert isinstance(cost, RegimeCostModel) and f"compute-bound prefill: the {carry} fit (edited" in cost.source
    host = load_profile(A100_LINEAR).host
    fit = LinearFit.from_dict(raw["fits"][carry])
    assert cost.iteration_time(prefill(4096)) == RooflineCostModel(spec, l40s, linear=fit, host=host).iteration_time(
        prefill(4096))
    assert cost.iteration_time(decode(64)) == RooflineCostModel(spec, l40s, host=host).iteration_time(decode(64))


def test_on_its_own_gpu_a_profile_is_priced_as_measured_whatever_the_choice():
    spec = load_model_spec("llama-3.1-8b")
    for name in ("rtx-4090", "rtx-pro-6000-server"):
        cost = transferred_roofline(PROFILES / f"{name}.yaml", None, spec, load_hardware(name), 1, 2, 16)
        assert isinstance(cost, RooflineCostModel) and "held-out-gpus.yaml" not in cost.source
        assert cost.linear == LinearFit.from_dict(load_profile(PROFILES / f"{name}.yaml").linear)


def test_the_default_clock_of_a_gpu_nobody_measured_follows_the_choice():
    spec, h200 = load_model_spec("llama-7b"), load_hardware("h200")
    path = default_device_profile(h200)
    assert path == A100_CLOCK
    cost = transferred_roofline(path, None, spec, h200, 1, 2, 16)
    choice = shipped_choice()
    assert isinstance(cost, RegimeCostModel) and choice.describe() in cost.source
    for regime in FINE_REGIMES:
        priced = cost.carried.get(regime, cost.roofline)
        assert priced.linear == (choice.carried[regime].fit if regime in choice.use_transfer else None)
    assert default_device_profile(load_hardware("rtx-4090")) == PROFILES / "rtx-4090.yaml"


def test_a_missing_choice_file_says_how_to_make_it(tmp_path, monkeypatch):
    monkeypatch.setattr(carry_file, "CARRY_FILE", tmp_path / "gone.yaml")
    with pytest.raises(SpecError, match="hold_one_gpu_out.py --write"):
        shipped_choice()
