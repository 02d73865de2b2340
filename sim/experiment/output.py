"""Atomic writes: a reader never sees half a file, an interrupted run leaves none.

A run's per-iteration records are its largest output (hundreds of thousands of rows an hour):
Parquet by default, gzipped CSV on request, or none. pandas and pyarrow are imported by the
writers that need them, so that a command that never writes a table does not load them.
"""
from __future__ import annotations

import gzip
import importlib.util
import io
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

from engine.atomic import remove_stale_temporaries
from engine.atomic import write_atomic as _atomic
from engine.specs.errors import SpecError

if TYPE_CHECKING:
    import pandas as pd

# --iterations FORMAT: the file each run's per-iteration records go to (none: not kept)
ITERATION_FILES = {"parquet": "iterations.parquet", "csv": "iterations.csv.gz", "none": None}
DEFAULT_ITERATIONS = "parquet"
# zstd: 10% smaller than pyarrow's default, snappy, on a run's iterations, and no slower to write
PARQUET_COMPRESSION = "zstd"
# rows a row group holds: the writer encodes one at a time, so this bounds its buffers (an hour's 400k
# iterations in one group took ~60 MB more at the process's peak); readers see one table either way
PARQUET_ROW_GROUP = 65536


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


def check_iterations_format(name: str) -> str | None:
    """The file name a format writes; refused now, before anything is simulated, if it cannot be written."""
    if name not in ITERATION_FILES:
        raise SpecError("--iterations", name, f"unknown format; valid: {list(ITERATION_FILES)}")
    if name == "parquet" and importlib.util.find_spec("pyarrow") is None:
        raise SpecError("--iterations", name, "writing Parquet needs pyarrow (pip install pyarrow), "
                        "or choose --iterations csv")
    return ITERATION_FILES[name]


def iterations_bytes(frame: pd.DataFrame, name: str) -> bytes:
    """The per-iteration records in a format of ITERATION_FILES (not none), as the file's bytes."""
    return parquet_bytes(frame) if name == "parquet" else csv_gz_bytes(frame)


def read_iterations(run_dir: Path) -> pd.DataFrame:
    """A run folder's per-iteration records, in whichever format the run wrote them."""
    import pandas as pd

    for name, file in ITERATION_FILES.items():
        if file is not None and (Path(run_dir) / file).exists():
            path = Path(run_dir) / file
            return pd.read_parquet(path) if name == "parquet" else pd.read_csv(path)
    raise FileNotFoundError(f"{run_dir} holds no iterations file (the run wrote them with --iterations none?)")


def parquet_bytes(frame: pd.DataFrame) -> bytes:
    # pyarrow's writer stores no time or path: the same frame (and library versions) give the same bytes
    import pyarrow as pa
    import pyarrow.parquet as pq

    sink = io.BytesIO()
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), sink, compression=PARQUET_COMPRESSION,
                   row_group_size=PARQUET_ROW_GROUP)
    return sink.getvalue()


def csv_gz_bytes(frame: pd.DataFrame) -> bytes:
    sink = io.BytesIO()
    _write_gzip_csv(frame, sink)
    return sink.getvalue()


def write_bytes(data: bytes, path: Path) -> Path:
    return _atomic(path, lambda f: f.write(data))


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
