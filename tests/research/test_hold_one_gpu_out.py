"""Every measured GPU held out in turn: each fold's fits never see the held-out GPU's rows, every carry is judged
on every GPU it was not fitted on, and a bundle GPU's fused residual add is charged, never fitted."""
from dataclasses import replace

import pandas as pd
import pytest

from calibrate.hardware.hardware import load_hardware
from calibrate.judging.carry_rule import ROOFLINE
from calibrate.judging.transfer_two_gpus import GpuTables, hold_out, iterations
from calibrate.parts.transfer import FINE_REGIMES
from calibrate.tables.op_table import read_op_table
from research.judging.gpu_holdout import EVERY_OTHER, Fits, carries, hold_each_out, shipped_fit
from tests.calibrate.synthetic_ops import HARDWARE, LAYERS, SECOND_HARDWARE, TRUE_FIT, write_tables

THIRD_HARDWARE = "l40s"
GPUS = (HARDWARE, SECOND_HARDWARE, THIRD_HARDWARE)
JOINT = (HARDWARE, SECOND_HARDWARE)


def gpu(folder, hardware: str) -> GpuTables:
    (folder / hardware).mkdir(parents=True, exist_ok=True)
    paths = write_tables(folder / hardware, hardware=hardware)
    ops = pd.concat([read_op_table(p).ops for p in paths], ignore_index=True)
    return GpuTables(load_hardware(hardware), ops, LAYERS)


@pytest.fixture(scope="module")
def three_gpus(tmp_path_factory):
    folder = tmp_path_factory.mktemp("three-gpus")
    return [gpu(folder, name) for name in GPUS]


def by(scores, held_out: str, carry: str) -> list:
    return [s for s in scores if s.held_out == held_out and s.carry == carry]


def test_every_carry_is_judged_on_every_gpu_it_was_not_fitted_on_and_no_other(three_gpus):
    offered = carries(GPUS, [JOINT])
    scores, _ = hold_each_out(three_gpus, offered)
    judged = {(s.held_out, s.carry) for s in scores}
    expected = {(test, carry.name) for test in GPUS for carry in offered
                if test not in carry.gpus} | {(test, ROOFLINE) for test in GPUS}
    assert judged == expected
    assert (THIRD_HARDWARE, " + ".join(JOINT)) in judged and (HARDWARE, EVERY_OTHER) in judged
    # the same shares and latencies of each GPU's own sheet made every table: any carry prices any GPU exactly
    assert all(s.worst < 1e-6 for s in scores if s.carry != ROOFLINE)
    assert {s.regime for s in scores} == set(FINE_REGIMES)


@pytest.mark.parametrize("held_out", [GPUS[0], *(pytest.param(gpu, marks=pytest.mark.slow) for gpu in GPUS[1:])])
def test_the_held_out_gpus_rows_never_enter_its_folds_fits(three_gpus, held_out):
    poisoned = [replace(g, ops=g.ops.assign(time_s=g.ops["time_s"] * 100)) if g.hw.name == held_out else g
                for g in three_gpus]
    offered = carries(GPUS, [JOINT])
    clean, _ = hold_each_out(three_gpus, offered)
    dirty, fits = hold_each_out(poisoned, offered)
    for carry in [c.name for c in offered if held_out not in c.gpus]:
        # a fit untouched by the poison prices each poisoned row at exactly a hundredth of it
        for score in by(dirty, held_out, carry):
            assert score.mean == pytest.approx(0.99, abs=1e-6) and score.worst == pytest.approx(0.99, abs=1e-6)
    # the poison does reach the folds that fit on that GPU: it is in the rows, not lost on the way
    others = [name for name in GPUS if name != held_out]
    assert by(dirty, others[0], held_out)[0].mean > 0.5 > by(clean, others[0], held_out)[0].mean
    assert fits.on([held_out]) != fits.on(others[:1])


def test_a_fit_on_the_held_out_gpu_is_refused(three_gpus):
    with pytest.raises(ValueError, match="held out"):
        hold_out(three_gpus, three_gpus[0])
    assert carries(GPUS)[-1].fitted_on(HARDWARE, GPUS) == (SECOND_HARDWARE, THIRD_HARDWARE)
    assert carries(GPUS)[0].fitted_on(HARDWARE, GPUS) is None
    with pytest.raises(ValueError, match="nobody measured"):
        carries(GPUS, [("a100-80gb", "b200")])


def test_a_carry_ships_the_fit_on_all_its_gpus(three_gpus):
    offered = carries(GPUS, [JOINT])
    _, fits = hold_each_out(three_gpus, offered)
    every = next(c for c in offered if c.name == EVERY_OTHER)
    assert shipped_fit(every, fits) == Fits(three_gpus).on(GPUS)
    single = next(c for c in offered if c.name == HARDWARE)
    assert shipped_fit(single, fits) == hold_out(three_gpus[:1], three_gpus[1]).fit


def test_a_fused_kernel_is_charged_on_the_held_out_iterations_and_never_measured(three_gpus):
    a100 = three_gpus[0]
    norm = a100.ops[a100.ops["op"] == "input_layernorm"]
    fused = norm.assign(op="add", time_s=0.0, moved_bytes=norm["moved_bytes"] * 1.5)
    without = replace(a100, ops=a100.ops[a100.ops["op"] != "add"])
    plain, charged = iterations(TRUE_FIT, without), iterations(TRUE_FIT, replace(without, fused=fused))
    assert (charged["time_s"] == plain["time_s"]).all()  # no measured time of its own
    add_latency = TRUE_FIT.elementwise["add"][0]
    layers = plain["model"].map(LAYERS)
    assert ((charged["predicted_s"] - plain["predicted_s"]) >= layers * add_latency * (1 - 1e-9)).all()
    # never fitted: a fit on the GPU's rows is the same with or without them
    assert Fits([replace(without, fused=fused)]).on([HARDWARE]) == Fits([without]).on([HARDWARE])
