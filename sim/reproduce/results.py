"""What the claims read: each reproduced figure's summary.csv, as its last `reproduce` wrote it."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from sim.reproduce.figures import FIGURES
from sim.reproduce.readings import Interval, sustainable_rate
from sim.reproduce.scale import PREDICTED

SUMMARY_FILE = "summary.csv"


class NotRun(LookupError):
    """A claim's figure (or panel) has no results in the output folder yet."""

    def __init__(self, figure: str):
        super().__init__(f"not run yet: servesim reproduce {figure}")
        self.figure = figure


class Results:
    def __init__(self, frames: dict[str, pd.DataFrame]):
        self.frames = frames

    @classmethod
    def load(cls, out_dir: Path) -> Results:
        frames = {}
        for name in FIGURES:
            path = Path(out_dir) / name / SUMMARY_FILE
            if path.is_file():
                frames[name] = pd.read_csv(path, keep_default_na=False, na_values=["", "NaN", "nan"])
        return cls(frames)

    def rows(self, figure: str, panel: str = "") -> pd.DataFrame:
        frame = self.frames.get(figure)
        if frame is None:
            raise NotRun(figure)
        rows = frame[frame["panel"].astype(str) == panel] if panel else frame
        if rows.empty:
            raise NotRun(figure)
        return rows

    def scale(self, figure: str) -> str:
        """The trace lengths behind the figure's simulated panels (a cost-model panel has none)."""
        if figure not in self.frames:
            return ""
        scales = [s for s in dict.fromkeys(self.frames[figure]["scale"].astype(str)) if s != PREDICTED]
        return scales[0] if scales else PREDICTED

    def sustainable(self, figure: str, panel: str) -> dict[str, Interval]:
        rows = self.rows(figure, panel)
        curves = rows.groupby(["system", "rate"], sort=False)["normalized_latency"].mean().reset_index()
        return {system: sustainable_rate(curve) for system, curve in curves.groupby("system", sort=False)}

    def rates(self, figure: str, panel: str) -> str:
        """The rates a panel simulated, for a claim's 'how read'."""
        rates = sorted(set(self.rows(figure, panel)["rate"]))
        return ", ".join(f"{r:g}" for r in rates)
