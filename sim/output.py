"""Atomic writes: a reader never sees half a file, an interrupted run leaves none."""
from __future__ import annotations

import gzip
import io
import json
import os
from pathlib import Path

import pandas as pd

from engine.atomic import remove_stale_temporaries
from engine.atomic import write_atomic as _atomic
from engine.specs.errors import SpecError


def prepare_out_dir(out_dir: Path, run_dirs: str = "runs") -> Path:
    """Check the output folder before anything is simulated, and clear what a killed run left there.

    A file in the way, or a folder this user cannot write in, is refused now rather than after the
    simulation; nothing is created (the first result written makes the folders). The temporary
    files a killed earlier run left here and in its run folders (SIGKILL skips their cleanup) are
    removed.
    """
    out_dir = Path(out_dir)
    existing = next(path for path in (out_dir, *out_dir.parents) if path.exists())
    if not existing.is_dir():
        raise SpecError("--out", "", f"{existing} is a file, not a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise SpecError("--out", "", f"no permission to write in {existing}")
    for folder in (out_dir, *sorted((out_dir / run_dirs).glob("*/"))):
        remove_stale_temporaries(folder)
    return out_dir


def write_csv(frame: pd.DataFrame, path: Path) -> Path:
    if str(path).endswith(".gz"):
        return _atomic(path, lambda f: _write_gzip_csv(frame, f))
    return _atomic(path, lambda f: frame.to_csv(f, index=False))


def _write_gzip_csv(frame: pd.DataFrame, f) -> None:
    # The gzip header holds a file name and a time: empty and 0, so the same frame gives the same
    # bytes (pandas would record the random temporary file's name).
    with gzip.GzipFile(filename="", mode="wb", mtime=0, fileobj=f) as gz:
        with io.TextIOWrapper(gz, encoding="utf-8", newline="") as text:
            frame.to_csv(text, index=False)


def write_json(data: dict, path: Path) -> Path:
    return _atomic(path, lambda f: f.write(json.dumps(data, indent=1, sort_keys=True).encode()))


def write_text(text: str, path: Path) -> Path:
    return _atomic(path, lambda f: f.write(text.encode()))


def write_figure(fig, path: Path) -> Path:
    # fixed metadata so the same data gives the same PNG bytes
    return _atomic(path, lambda f: fig.savefig(f, format="png", dpi=120, bbox_inches="tight",
                                               metadata={"Software": None}))
