"""How long the reproduced traces are: the paper's lengths, or `--quick`'s cut.

Every output of a cut run says so (the figures' footers, a `scale` column in every CSV, the table's
header), and its runs live apart from the paper-length ones (`<out>/sweeps/<scale>/`), so a quick
run never replaces hours of full-length ones.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sim.reproduce.crossing import MAX_EXTRA_PROBES


@dataclass(frozen=True)
class Scale:
    name: str
    description: str
    duration_s: float | None = None  # longest trace; None: the config's (the paper's)
    warmup_s: float | None = None  # None: the config's (the paper's 60 s)
    max_rates: int | None = None  # most rates per curve, spread over the config's; None: all
    max_extra_probes: int = MAX_EXTRA_PROBES  # rates a curve may be probed at past its own, to find its crossing

    @property
    def is_paper(self) -> bool:
        return self.duration_s is None and self.warmup_s is None and self.max_rates is None

    def overrides(self, raw: dict, thin: bool) -> list[str]:
        """--set overrides that cut one config (its YAML, as read) to this scale."""
        sets = []
        duration = (raw.get("workload") or {}).get("duration_s", 3600)
        if self.duration_s is not None and self.duration_s < duration:
            sets.append(f"workload.duration_s={self.duration_s:g}")
        if self.warmup_s is not None:
            sets.append(f"warmup_s={self.warmup_s:g}")
        rates = raw.get("rates")
        if thin and self.max_rates is not None and isinstance(rates, list) and len(rates) > self.max_rates:
            sets.append(f"rates=[{', '.join(f'{r:g}' for r in spread(rates, self.max_rates))}]")
        return sets


def spread(values: list, count: int) -> list:
    """`count` of the values, evenly spread, first and last kept."""
    picks = np.unique(np.round(np.linspace(0, len(values) - 1, count)).astype(int))
    return [values[i] for i in picks]


PAPER = Scale("paper", "the paper's trace lengths: 1 hour of arrivals (15 minutes for OPT-175B), every configured rate")
QUICK = Scale("quick", "--quick: 5-minute traces (the paper: 1 hour, 15 minutes for OPT-175B) and at most 4 rates "
              "per curve; not the paper's lengths", duration_s=300, max_rates=4)

# the `scale` of a panel a cost model draws without simulating (Figs. 18a, 19a): no trace to cut
PREDICTED = "cost-model prediction: no trace, the same at every scale"
