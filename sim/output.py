"""Atomic writes: a reader never sees half a file, an interrupted run leaves none."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from engine.atomic import write_atomic as _atomic


def write_csv(frame: pd.DataFrame, path: Path) -> Path:
    gz = str(path).endswith(".gz")
    compression = {"method": "gzip", "mtime": 0} if gz else None  # mtime 0: same bytes every run
    return _atomic(path, lambda f: frame.to_csv(f, index=False, compression=compression))


def write_json(data: dict, path: Path) -> Path:
    return _atomic(path, lambda f: f.write(json.dumps(data, indent=1, sort_keys=True).encode()))


def write_text(text: str, path: Path) -> Path:
    return _atomic(path, lambda f: f.write(text.encode()))


def write_figure(fig, path: Path) -> Path:
    # fixed metadata so the same data gives the same PNG bytes
    return _atomic(path, lambda f: fig.savefig(f, format="png", dpi=120, bbox_inches="tight",
                                               metadata={"Software": None}))
