"""A linear part fitted on two GPUs' per-operation tables: what it recovers, that each held-out GPU stays unseen,
how the default for a third GPU is chosen per regime, and the shipped profile that holds the choice."""
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
import yaml

from calibrate.clock.roofline import RooflineCostModel
from calibrate.cost_models.carry_file import shipped_choice
from calibrate.cost_models.profile_model import transferred_roofline
from calibrate.cost_models.transfer_cost import RegimeCostModel
from calibrate.fitting.op_fit import fit_linear, fit_linear_on
from calibrate.fitting.profile_file import load_profile
from calibrate.hardware.hardware import load_hardware
from calibrate.judging.carry_rule import SHIPPED_NOTE
from calibrate.judging.op_import import import_profile, report
from calibrate.judging.regime_errors import two_gpu_choice
from calibrate.judging.transfer_judge import PROFILES, RegimeError
from calibrate.judging.transfer_two_gpus import GpuTables, hold_out, judgement
from calibrate.parts.linear_model import LinearFit
from calibrate.parts.transfer import COMPUTE_BOUND, FINE_REGIMES, LATENCY, MEMORY_BOUND, RIDGE, regime_of
from calibrate.tables.op_table import read_op_table
from engine.core.batch import Batch
from engine.errors import SpecError
from engine.specs.loader import load_model_spec
from servesim.cli import main
from tests.calibrate.synthetic_ops import (
    HARDWARE,
    LAYERS,
    SECOND_HARDWARE,
    TRUE_FIT,
    assert_same_fit,
    write_all_reduce,
    write_two_gpus,
)

SHIPPED = PROFILES / "a100-h100-linear.yaml"
A2H, H2A = f"{HARDWARE} -> {SECOND_HARDWARE}", f"{SECOND_HARDWARE} -> {HARDWARE}"


def gpu(paths, hardware: str) -> GpuTables:
    ops = pd.concat([read_op_table(p).ops for p in paths], ignore_index=True)
    return GpuTables(load_hardware(hardware), ops, LAYERS)


def decode(n: int) -> Batch:
    return Batch(decode_seq_ids=list(range(n)), decode_context_lens=[256] * n)


@pytest.fixture(scope="module")
def two_gpus(tmp_path_factory):
    folder = tmp_path_factory.mktemp("two-gpus")
    first, second = write_two_gpus(folder)
    all_reduce = write_all_reduce(folder / "all_reduce.csv")
    result = import_profile(first, all_reduce, "llama-7b", HARDWARE, "test", provenance={"source": "synthetic"},
                            also_tables=second, also_measured_on=SECOND_HARDWARE, layers=LAYERS)
    path = result.profile.save(folder / "two.yaml")
    return first, second, result, path


@pytest.mark.slow
def test_the_joint_fit_recovers_the_shares_and_latencies_both_gpus_were_made_from(two_gpus):
    first, second, result, _ = two_gpus
    assert_same_fit(result.joint, TRUE_FIT)
    for holdout in result.two_gpus:  # each GPU alone recovers them too, and prices the other exactly
        assert_same_fit(holdout.fit, TRUE_FIT)
        assert holdout.ours["ape"].max() < 1e-6 and holdout.roofline["ape"].min() > 1e-3


def test_the_joint_fit_takes_each_rows_shares_of_its_own_gpus_sheet(tmp_path):
    first, second = write_two_gpus(tmp_path)
    a, b = gpu(first, HARDWARE), gpu(second, SECOND_HARDWARE)
    # both GPUs' rows read against one sheet cannot be one set of shares
    wrong = fit_linear_on([(a.ops, a.hw), (b.ops, a.hw)])
    assert abs(wrong.compute_efficiency - TRUE_FIT.compute_efficiency) > 0.05
    # one part alone is today's single-GPU fit, to the bit
    assert fit_linear_on([(a.ops, a.hw)]) == fit_linear(a.ops, a.hw)


def test_the_held_out_gpus_rows_are_never_seen_by_the_fit_that_holds_it_out(tmp_path):
    first, second = write_two_gpus(tmp_path)
    a, b = gpu(first, HARDWARE), gpu(second, SECOND_HARDWARE)
    for train, test in ((a, b), (b, a)):
        poisoned = replace(test, ops=test.ops.assign(time_s=test.ops["time_s"] * 100))
        clean, dirty = hold_out(train, test), hold_out(train, poisoned)
        assert dirty.fit == clean.fit  # coefficients unchanged, to the bit
        assert dirty.ours["ape"].min() == pytest.approx(0.99, abs=1e-6)  # the poison is only in the errors


def test_every_regime_by_the_targets_own_ridge_has_rows_and_the_exact_fit_wins_each(two_gpus):
    _, _, result, _ = two_gpus
    errors = judgement(result.two_gpus)
    assert {(e.direction, e.regime) for e in errors} == {(d, r) for d in (A2H, H2A) for r in FINE_REGIMES}
    h100 = load_hardware(SECOND_HARDWARE)
    forward = result.two_gpus[0].ours
    assert set(forward[forward["regime"] == LATENCY]["tokens"]) == {t for t in forward["tokens"]
                                                                  if regime_of(t, h100, latency=True) == LATENCY}
    assert two_gpu_choice(errors).use_transfer == frozenset(FINE_REGIMES)


def error(direction: str, regime: str, mean: float, roofline_mean: float = 0.2) -> RegimeError:
    return RegimeError(direction, regime, 10, mean, 2 * mean, roofline_mean, 2 * roofline_mean)


def test_the_fit_prices_a_regime_only_where_it_beat_the_roofline_both_ways():
    errors = [error(d, r, 0.05) for d in (A2H, H2A) for r in FINE_REGIMES if (d, r) != (H2A, RIDGE)]
    errors.append(error(H2A, RIDGE, 0.3))  # loses the ridge one way round
    choice = two_gpu_choice(errors)
    assert choice.use_transfer == frozenset({LATENCY, MEMORY_BOUND, COMPUTE_BOUND})
    assert f"ridge: roofline (no better than the roofline on {H2A})" in choice.describe()
    one_way = two_gpu_choice([e for e in errors if not (e.regime == LATENCY and e.direction == H2A)])
    assert not one_way.uses_transfer(LATENCY) and "judged one way round only" in one_way.reasons[LATENCY]


def test_a_third_gpu_is_priced_by_the_shipped_choice_not_the_pairs_own_judgement(two_gpus, tmp_path):
    _, _, result, path = two_gpus
    raw = yaml.safe_load(path.read_text())
    for entry in raw["linear"]["heldout"]["two_gpus"]:
        if entry["regime"] in (LATENCY, COMPUTE_BOUND) and entry["direction"] == H2A:
            entry["mean"] = entry["roofline_mean"] * 2  # the fit loses these regimes one way round
    edited = tmp_path / "lost.yaml"
    edited.write_text(yaml.safe_dump(raw))
    spec, l40s = load_model_spec("llama-7b"), load_hardware("l40s")
    cost, kept = (transferred_roofline(p, None, spec, l40s, 1, 2, 16) for p in (edited, path))
    choice = shipped_choice()
    assert isinstance(cost, RegimeCostModel) and choice.describe() in cost.source
    assert f"was measured on {HARDWARE} and {SECOND_HARDWARE}" in cost.source
    roofline = RooflineCostModel(spec, l40s, host=result.profile.host)
    prompt = Batch(prefill_seq_ids=[0], prefill_lens=[4096], prefill_sample_ids=[(0,)])
    for batch in (decode(2), decode(64), prompt):
        assert cost.iteration_time(batch) == kept.iteration_time(batch)  # the pair's judgement sets nothing
        regime = regime_of(batch.num_tokens, l40s, latency=True)
        expected = (RooflineCostModel(spec, l40s, linear=choice.carried[regime].fit, host=result.profile.host)
                    if choice.uses_transfer(regime) else roofline)
        assert cost.iteration_time(batch) == expected.iteration_time(batch)


def test_each_measured_gpu_is_priced_by_its_own_fit(two_gpus):
    _, _, result, path = two_gpus
    spec = load_model_spec("llama-7b")
    for name in (HARDWARE, SECOND_HARDWARE, "a100-40gb"):
        cost = transferred_roofline(path, None, spec, load_hardware(name), 1, 2, 16)
        own = HARDWARE if name.startswith("a100") else SECOND_HARDWARE
        assert isinstance(cost, RooflineCostModel)
        assert cost.linear == LinearFit.from_dict(result.profile.linear["gpus"][own])
        assert f"{own}'s own fit" in cost.source


def test_the_shipped_two_gpu_profile_carries_to_a_third_gpu_and_names_its_choice():
    profile = load_profile(SHIPPED)
    assert sorted(profile.linear["gpus"]) == ["a100-80gb", "h100-sxm"]
    spec = load_model_spec("llama-7b")
    for name in ("l40s", "h200"):
        hw = load_hardware(name)
        cost = transferred_roofline(SHIPPED, None, spec, hw, 2, 2, 16)
        assert "was measured on a100-80gb and h100-sxm" in cost.source and shipped_choice().describe() in cost.source
        assert 0 < cost.iteration_time(decode(8)) < 1.0
    # the pair's own judgement is kept in the profile: every regime it would choose, both directions beat the roofline
    errors = {(e["direction"], e["regime"]): e for e in profile.linear["heldout"]["two_gpus"]}
    for regime in two_gpu_choice([RegimeError(**e) for e in profile.linear["heldout"]["two_gpus"]]).use_transfer:
        for direction in ("a100-80gb -> h100-sxm", "h100-sxm -> a100-80gb"):
            assert errors[(direction, regime)]["mean"] < errors[(direction, regime)]["roofline_mean"]


def test_the_shipped_profile_loads_through_a_config_on_a_third_gpu(tmp_path):
    from sim.experiment.config import experiment_from_dict
    from sim.experiment.run import make_cost_model

    raw = {"model": "llama-7b", "hardware": "l40s", "cost_model": {"kind": "transfer", "path": str(SHIPPED)},
           "workload": {"dataset": "sharegpt-standin", "arrival": "poisson", "duration_s": 120}, "rates": [1.0],
           "systems": ["vllm"]}
    exp = experiment_from_dict(raw, "exp.yaml", tmp_path)
    cost = make_cost_model(exp, exp.systems[0])
    assert "by regime on l40s: fixed latency:" in cost.source


@pytest.mark.parametrize("edit, key", [
    (lambda raw: raw["linear"]["heldout"]["two_gpus"][0].update(regime="warp-bound"),
     "linear.heldout.two_gpus[0].regime"),
    (lambda raw: raw["linear"]["heldout"]["two_gpus"][1].update(mean=-0.1), "linear.heldout.two_gpus[1].mean"),
    (lambda raw: raw["linear"]["heldout"]["two_gpus"][2].update(direction="a100"),
     "linear.heldout.two_gpus[2].direction"),
    (lambda raw: raw["linear"]["heldout"].pop("two_gpus"), "linear.heldout.two_gpus"),
    (lambda raw: raw["linear"]["gpus"]["h100-sxm"].update(compute_efficiency=1.5),
     "linear.gpus.h100-sxm.compute_efficiency"),
])
def test_a_malformed_judgement_is_one_line_naming_the_key(two_gpus, tmp_path, edit, key):
    _, _, _, path = two_gpus
    raw = yaml.safe_load(path.read_text())
    edit(raw)
    broken = tmp_path / "broken.yaml"
    broken.write_text(yaml.safe_dump(raw))
    with pytest.raises(SpecError, match=f"broken.yaml: {key.replace('[', '.').replace(']', '.')}") as err:
        load_profile(broken)
    assert "\n" not in str(err.value)


def test_the_import_reports_both_directions_and_the_default(two_gpus):
    _, _, result, _ = two_gpus
    text = report(result)
    for line in (f"{A2H}           fixed latency", f"{H2A}           compute-bound prefill",
                 "on these two GPUs alone: fixed latency: transfer", SHIPPED_NOTE):
        assert line in text
    assert result.profile.linear["heldout"]["two_gpus_by_model"][A2H].keys() == set(LAYERS)


def test_the_cli_refuses_a_table_of_a_model_whose_layers_it_does_not_know(two_gpus, tmp_path, capsys):
    first, second, _, _ = two_gpus
    code = main(["calibrate", "import", *map(str, first), "--also", *map(str, second), "--model", "llama-7b",
                 "--out", str(tmp_path / "p.yaml")])
    assert code != 0
    assert "no layer count for 'synthetic_gqa-20b'" in capsys.readouterr().err


def test_the_second_gpu_must_be_another_gpu(two_gpus, tmp_path):
    first, second, _, _ = two_gpus
    with pytest.raises(SpecError, match="--also-measured-on"):
        import_profile(first, None, "llama-7b", HARDWARE, "test", also_tables=second, also_measured_on=HARDWARE,
                       layers=LAYERS)


def test_the_latency_regime_is_the_smallest_memory_bound_batches_by_each_gpus_ridge():
    a100, h100 = load_hardware("a100-80gb"), load_hardware("h100-sxm")
    assert [regime_of(t, a100, latency=True) for t in (9, 10)] == [LATENCY, MEMORY_BOUND]
    assert [regime_of(t, h100, latency=True) for t in (18, 19)] == [LATENCY, MEMORY_BOUND]
    assert regime_of(1, a100) == MEMORY_BOUND  # the three-regime judge's world is unchanged
    assert np.isfinite(a100.peak_flops)
