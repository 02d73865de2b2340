"""A bench run's timeseries.csv: its stat logger's per-second rows (LLMServingSim bench/core/stat_logger.py).

Each row is a second of the logger's clock ending at `t` (seconds since the logger was made, which is not the
requests' clock): the prompt and generation tokens vLLM counted in it per second (a prompt's tokens all at its
first token, as vLLM's IterationStats counts them), and running, waiting and KV cache use (%) at its last iteration,
summed over data-parallel engines (KV averaged). Seconds without an iteration have no row.
"""
from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np

from engine.errors import SpecError
from fidelity.runs.real_run import RealSeries

COLUMNS = ("t", "prompt_throughput", "gen_throughput", "running", "waiting", "kv_cache_pct")


def read_series(path: Path) -> RealSeries:
    try:
        with open(path, encoding="utf-8", newline="") as f:
            reader = csv.DictReader(f)
            missing = [name for name in COLUMNS if name not in (reader.fieldnames or ())]
            if missing:
                raise SpecError(str(path), missing[0], f"missing column; the file needs {list(COLUMNS)}")
            rows = [[_value(row, name, path, number) for name in COLUMNS] for number, row in enumerate(reader, 2)]
    except (OSError, UnicodeDecodeError) as err:
        raise SpecError(str(path), "", f"cannot be read: {err}") from None
    values = np.array(rows, np.float64).reshape(-1, len(COLUMNS))
    t = values[:, 0]
    later = np.flatnonzero(np.diff(t) <= 0)
    if later.size:
        line = int(later[0]) + 3
        raise SpecError(str(path), f"line {line}: t", f"{t[later[0] + 1]:g} is not after the row before's "
                        f"{t[later[0]]:g}; each row is a later second")
    return RealSeries(t, values[:, 1], values[:, 2], values[:, 3], values[:, 4], values[:, 5])


def _value(row: dict, name: str, path: Path, line: int) -> float:
    text = row.get(name)
    try:
        value = float(text)
    except (TypeError, ValueError):
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise SpecError(str(path), f"line {line}: {name}", f"must be a number >= 0, got {text!r}")
    return value
