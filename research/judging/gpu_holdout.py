"""Every measured GPU held out in turn: each carry servesim offers, fitted without the held-out GPU's rows, and the
spec-sheet roofline, priced on the held-out GPU's iterations per regime of its own ridge.

The carries (Carry): each other GPU's own fit alone, named fits on several GPUs together (the A100 and H100 one that
calibrate/profiles/a100-h100-linear.yaml ships), and every other GPU together (what a fit on all measured GPUs would
be, judged the only way it can be: without the one held out). A carry is judged on every measured GPU it was not
fitted on, and on no other. The iterations and their regimes are calibrate/judging/transfer_two_gpus.py's; which
carry a GPU nobody measured gets is calibrate/judging/carry_rule.py's rule on these scores.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from calibrate.fitting.op_fit import fit_linear_on, today_roofline
from calibrate.judging.carry_rule import ROOFLINE, HeldOutScore
from calibrate.judging.transfer_two_gpus import GpuTables, iterations
from calibrate.parts.linear_model import LinearFit
from calibrate.parts.transfer import FINE_REGIMES

EVERY_OTHER = "every other GPU"  # the carry fitted on every measured GPU but the one held out


@dataclass(frozen=True)
class Carry:
    """A linear part fitted on `gpus` (empty: every measured GPU but the one held out) and carried to another."""
    name: str
    gpus: tuple[str, ...] = ()

    def fitted_on(self, held_out: str, measured: Sequence[str]) -> tuple[str, ...] | None:
        """The GPUs this carry is fitted on when `held_out` is held out; None where it would see that GPU's rows."""
        if not self.gpus:
            return tuple(name for name in measured if name != held_out)
        return None if held_out in self.gpus else self.gpus


def carries(measured: Sequence[str], joints: Sequence[Sequence[str]] = ()) -> list[Carry]:
    """Each measured GPU's own fit, each of `joints` (GPUs fitted together), and every other GPU together."""
    unknown = sorted({name for joint in joints for name in joint} - set(measured))
    if unknown:
        raise ValueError(f"joint carries name GPUs nobody measured here: {unknown}")
    return ([Carry(name, (name,)) for name in measured] + [Carry(" + ".join(joint), tuple(joint)) for joint in joints]
            + [Carry(EVERY_OTHER)])


def regime_scores(frame: pd.DataFrame, held_out: str, carry: str) -> list[HeldOutScore]:
    """Mean, p95 and worst |error| per regime of one way of pricing one held-out GPU (iterations()'s frame)."""
    out = []
    for regime in FINE_REGIMES:
        ape = frame["ape"][(frame["regime"] == regime).to_numpy()].to_numpy(float)
        if len(ape):
            out.append(HeldOutScore(held_out, carry, regime, len(ape), float(ape.mean()),
                                    float(np.quantile(ape, 0.95)), float(ape.max())))
    return out


class Fits:
    """Fits on sets of GPUs, each made once: a carry's fit in one fold is often another fold's too."""

    def __init__(self, gpus: Sequence[GpuTables]):
        self.gpus = {gpu.hw.name: gpu for gpu in gpus}
        self._made: dict[frozenset[str], LinearFit] = {}

    def on(self, names: Sequence[str]) -> LinearFit:
        key = frozenset(names)
        if key not in self._made:
            # in the order the GPUs were given: the same rows in the same order, the same fit to the bit
            self._made[key] = fit_linear_on([(gpu.ops, gpu.hw) for name, gpu in self.gpus.items() if name in key])
        return self._made[key]


def hold_out_gpu(test: GpuTables, fits: Fits, offered: Sequence[Carry]) -> list[HeldOutScore]:
    """Every carry that never saw `test`'s rows, and the roofline, scored on `test`'s iterations."""
    measured = list(fits.gpus)
    scores = regime_scores(iterations(today_roofline(), test), test.hw.name, ROOFLINE)
    for carry in offered:
        trained = carry.fitted_on(test.hw.name, measured)
        if trained is not None:
            scores += regime_scores(iterations(fits.on(trained), test), test.hw.name, carry.name)
    return scores


def hold_each_out(gpus: Sequence[GpuTables], offered: Sequence[Carry]) -> tuple[list[HeldOutScore], Fits]:
    """Each GPU held out in turn (the scores), and the fits made on the way (each carry's shipped fit is one more:
    `shipped_fit`)."""
    fits = Fits(gpus)
    return [score for test in gpus for score in hold_out_gpu(test, fits, offered)], fits


def shipped_fit(carry: Carry, fits: Fits) -> LinearFit:
    """The fit a GPU nobody measured gets from `carry`: on its GPUs, or (every other GPU) on every measured one."""
    return fits.on(carry.gpus or tuple(fits.gpus))
