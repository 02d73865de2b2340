"""A regime's held-out error on a GPU a fit never saw, and the choice per regime such errors alone would make:
the transfer where it beat the spec-sheet roofline on every held-out GPU judged there, the roofline elsewhere.
Shared by the judge on the engine's H200 rows (calibrate/judging/transfer_judge.py) and the one on two GPUs'
per-operation tables (calibrate/judging/transfer_two_gpus.py), whose reports print it; what prices a GPU nobody
measured is chosen with every measured GPU held out in turn (calibrate/judging/carry_rule.py)."""
from __future__ import annotations

from dataclasses import dataclass

from calibrate.parts.transfer import FINE_REGIMES, REGIMES, RegimeChoice


@dataclass(frozen=True)
class RegimeError:
    """One regime's held-out error on a GPU the fit never saw, the transfer's and the roofline's."""
    direction: str  # e.g. "a100-80gb -> h200"
    regime: str
    rows: int
    mean: float  # mean |relative error|
    worst: float
    roofline_mean: float
    roofline_worst: float
    note: str = ""

    @property
    def beats_roofline(self) -> bool:
        return self.mean < self.roofline_mean and self.worst <= self.roofline_worst


def choose(errors: list[RegimeError], regimes: tuple[str, ...] = REGIMES) -> RegimeChoice:
    """The transfer in a regime only where every held-out GPU judged there has it beating the roofline."""
    use, reasons = set(), {}
    for regime in regimes:
        judged = [e for e in errors if e.regime == regime]
        if not judged:
            reasons[regime] = "no held-out GPU measured it"
        elif all(e.beats_roofline for e in judged):
            use.add(regime)
            reasons[regime] = "beat the roofline on " + ", ".join(e.direction for e in judged)
        else:
            lost = [e.direction for e in judged if not e.beats_roofline]
            reasons[regime] = "no better than the roofline on " + ", ".join(lost)
    return RegimeChoice(frozenset(use), reasons, tuple(regimes))


def two_gpu_choice(errors: list[RegimeError]) -> RegimeChoice:
    """The fit in a regime only where it beat the roofline in both directions (a regime judged one way
    round only keeps the roofline)."""
    choice = choose(errors, FINE_REGIMES)
    use, reasons = set(choice.use_transfer), dict(choice.reasons)
    for regime in choice.use_transfer:
        directions = {e.direction for e in errors if e.regime == regime}
        if len(directions) < 2:
            use.discard(regime)
            reasons[regime] = f"judged one way round only ({', '.join(sorted(directions))})"
    return RegimeChoice(frozenset(use), reasons, FINE_REGIMES)
