"""What `servesim validate --run` writes under its folder, each file whole or not at all (engine/atomic.py):

    requests.csv   each request, real and simulated (per_request.py)
    summary.csv    each metric and statistic: real_ms, sim_ms, error_pct (comparison.py)
    summary.txt    the same as the terminal prints it
    series.csv     each second, real and simulated (series.py), and series.png
    run.json       what was replayed and with which settings; written last
"""
from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from engine.atomic import write_text_atomic
from fidelity.runs.comparison import Row, summary_text
from fidelity.runs.plot import series_plot

FILES = ("requests.csv", "summary.csv", "summary.txt", "series.csv", "series.png", "run.json")


def write_outputs(out_dir: Path, requests: pd.DataFrame, rows: list[Row], series: pd.DataFrame, title: str,
                  run_json: dict) -> list[Path]:
    written = [
        write_text_atomic(out_dir / "requests.csv", requests.to_csv(index=False)),
        write_text_atomic(out_dir / "summary.csv", summary_frame(rows).to_csv(index=False)),
        write_text_atomic(out_dir / "summary.txt", f"{title}\n{summary_text(rows)}\n"),
        write_text_atomic(out_dir / "series.csv", series.to_csv(index=False)),
        series_plot(series, out_dir / "series.png", title),
    ]
    written.append(write_text_atomic(out_dir / "run.json", json.dumps(_plain(run_json), indent=2) + "\n"))
    return written


def summary_frame(rows: list[Row]) -> pd.DataFrame:
    return pd.DataFrame({"metric": [r.metric for r in rows], "statistic": [r.statistic for r in rows],
                         "real_ms": [r.real_s * 1000 for r in rows], "sim_ms": [r.sim_s * 1000 for r in rows],
                         "error_pct": [r.error_pct for r in rows]})


def _plain(value):
    """JSON's values: dataclasses and tuples as mappings and lists, numpy's numbers as Python's, NaN as null."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _plain(dataclasses.asdict(value))
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
