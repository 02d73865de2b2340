"""Atomic writes: a reader never sees half a file, an interrupted run leaves none.

A run's per-iteration records are its largest output (hundreds of thousands of rows an hour):
Parquet by default, gzipped CSV on request, or none. A run's own tables (its requests, its
iterations as CSV, summary.csv) are written from numpy columns by sim/experiment/table.py's CSV writer,
which a frame's CSV goes through too; pyarrow is imported only by the Parquet writer, and pandas only by the
Parquet writer of a frame (that of columns builds its tables from numpy columns, with the pandas metadata a
frame's table would carry), so that a run loads pandas for none of its files, and pyarrow only to write Parquet.
"""
from __future__ import annotations

import functools
import gzip
import importlib.util
import io
import json
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from engine.atomic import remove_stale_temporaries
from engine.atomic import write_atomic as _atomic
from engine.errors import SpecError
from sim.experiment.table import Columns, frame_columns, row_groups, write_csv_text

if TYPE_CHECKING:
    import pandas as pd

# --iterations FORMAT: the file each run's per-iteration records go to (none: not kept)
ITERATION_FILES = {"parquet": "iterations.parquet", "csv": "iterations.csv.gz", "none": None}
DEFAULT_ITERATIONS = "parquet"
# zstd: 10% smaller than pyarrow's default, snappy, on a run's iterations, and no slower to write (parquet_options)
PARQUET_COMPRESSION = "zstd"
# rows a row group holds: the writer encodes one at a time, so this bounds its buffers (an hour's 400k
# iterations in one group took ~60 MB more at the process's peak); readers see one table either way
PARQUET_ROW_GROUP = 65536
GZIP_LEVEL = 6  # of the CSV files (_gzip_text)


def prepare_out_dir(out_dir: Path, run_dirs: str = "runs", name: str = "--out") -> Path:
    """Check the output folder before anything is simulated, and clear what a killed run left there.

    A file in the way, or a folder this user cannot write in, is refused now rather than after the
    simulation; nothing is created (the first result written makes the folders). The temporary
    files a killed earlier run left here and in its run folders (SIGKILL skips their cleanup) are
    removed. `name` is the argument that gave the folder, as the user wrote it.
    """
    out_dir = check_out_dir(Path(out_dir), name)
    for folder in (out_dir, *sorted((out_dir / run_dirs).glob("*/"))):
        remove_stale_temporaries(folder)
    return out_dir


def check_out_dir(out_dir: Path, name: str = "--out") -> Path:
    """A folder this user can make, or write in: its nearest existing part is a folder, and writable."""
    existing = next(path for path in (out_dir, *out_dir.parents) if path.exists())
    if not existing.is_dir():
        raise SpecError(name, "", f"{existing} is a file, not a folder")
    try:  # a file made and gone at once, not the access bits: root passes those where the file system refuses (/sys)
        with tempfile.TemporaryFile(dir=existing):
            pass
    except PermissionError:
        raise SpecError(name, "", f"no permission to write in {existing}") from None
    except OSError as err:
        raise SpecError(name, "", f"cannot write in {existing}: {err.strerror or err}") from None
    return out_dir


def check_iterations_format(name: str, argument: str = "--iterations") -> str | None:
    """The file name a format writes; refused now, before anything is simulated, if it cannot be written.
    `argument` is the option or keyword that chose it, as the user wrote it."""
    if not isinstance(name, str) or name not in ITERATION_FILES:  # a list would not even hash
        raise SpecError(argument, str(name), f"unknown format; valid: {list(ITERATION_FILES)}")
    if name == "parquet" and importlib.util.find_spec("pyarrow") is None:
        raise SpecError(argument, name, "writing Parquet needs pyarrow (pip install pyarrow), "
                        f"or choose {argument} csv")
    return ITERATION_FILES[name]


def iterations_bytes(columns: Columns, name: str) -> bytes:
    """The per-iteration records in a format of ITERATION_FILES (not none), as the file's bytes."""
    return columns_parquet_bytes(columns) if name == "parquet" else columns_csv_gz_bytes(columns)


def columns_parquet_bytes(columns: Columns) -> bytes:
    """parquet_bytes of the frame these columns make, written a row group at a time (a fleet's merged records are
    never held whole: sim/experiment/merged.py); the same bytes as the whole frame's."""
    import pyarrow.parquet as pq

    sink = io.BytesIO()
    writer = None
    for group in row_groups(columns, PARQUET_ROW_GROUP):
        table = arrow_table(group)
        if writer is None:
            writer = pq.ParquetWriter(sink, table.schema, **parquet_options(table.schema))
        writer.write_table(table, row_group_size=PARQUET_ROW_GROUP)
    if writer is None:  # no rows: the empty frame's file
        return table_parquet_bytes(arrow_table({name: columns[name] for name in columns}))
    writer.close()
    return sink.getvalue()


# numpy dtypes whose columns arrow_table converts itself: a frame keeps them as they are, from_pandas gives each the
# arrow type pa.array does, and its metadata names that type by the numpy name (pyarrow.pandas_compat)
_PLAIN_DTYPES = frozenset(np.dtype(name) for name in (
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float32", "float64"))


def arrow_table(columns: Columns):
    """pa.Table.from_pandas(pd.DataFrame(columns, copy=False), preserve_index=False) without importing pandas
    (0.2 s of a one-run `servesim run`), for columns of bools, ints and floats: the same arrays (NaN as null, as
    from_pandas reads it) and the same b"pandas" schema metadata (pyarrow.pandas_compat.construct_metadata's
    JSON, key for key), so the same Parquet bytes. Columns of other types go through pandas itself. Where pandas
    is not installed the table has no pandas metadata: it reads back the same, without the frame's dtypes noted."""
    import pyarrow as pa

    arrays = {name: np.asarray(column) for name, column in columns.items()}
    version = _pandas_version()
    if version is not None and not all(a.dtype in _PLAIN_DTYPES for a in arrays.values()):
        import pandas as pd

        return pa.Table.from_pandas(pd.DataFrame(dict(columns), copy=False), preserve_index=False)
    table = pa.Table.from_arrays([_arrow_array(a) for a in arrays.values()], names=list(arrays))
    if version is None:
        return table
    return table.replace_schema_metadata({b"pandas": json.dumps({
        "index_columns": [],
        "column_indexes": [],
        "columns": [{"name": name, "field_name": name, "pandas_type": str(a.dtype), "numpy_type": str(a.dtype),
                     "metadata": None} for name, a in arrays.items()],
        "attributes": {},
        "creator": {"library": "pyarrow", "version": pa.__version__},
        "pandas_version": version,
    }).encode("utf8")})


def _arrow_array(column: np.ndarray):
    """The column as from_pandas converts it (a float's NaN is null), on the column's own buffer. Not pa.array:
    asked for any numpy array, it imports pandas, where installed, to see whether the array is one of pandas'."""
    import pyarrow as pa

    if column.dtype not in _PLAIN_DTYPES:  # only where pandas is not installed: pyarrow's own conversion
        return pa.array(column, from_pandas=True)
    column = np.ascontiguousarray(column)
    if column.dtype.kind == "b":  # Arrow packs bools, a bit each
        return pa.Array.from_buffers(pa.bool_(), len(column),
                                     [None, pa.py_buffer(np.packbits(column, bitorder="little"))], null_count=0)
    valid, nulls = None, 0
    if column.dtype.kind == "f":
        missing = np.isnan(column)
        nulls = int(np.count_nonzero(missing))
        if nulls:
            valid = pa.py_buffer(np.packbits(~missing, bitorder="little"))
    return pa.Array.from_buffers(pa.from_numpy_dtype(column.dtype), len(column), [valid, pa.py_buffer(column)],
                                 null_count=nulls)


@functools.cache
def _pandas_version() -> str | None:
    """The installed pandas' version, read from its distribution's metadata rather than by importing it."""
    import importlib.metadata

    try:
        return importlib.metadata.version("pandas")
    except importlib.metadata.PackageNotFoundError:
        return None


def read_iterations(run_dir: Path) -> pd.DataFrame:
    """A run folder's per-iteration records, in whichever format the run wrote them."""
    import pandas as pd

    for name, file in ITERATION_FILES.items():
        if file is not None and (Path(run_dir) / file).exists():
            path = Path(run_dir) / file
            return pd.read_parquet(path) if name == "parquet" else pd.read_csv(path)
    raise FileNotFoundError(f"{run_dir} holds no iterations file (the run wrote them with --iterations none?)")


def parquet_bytes(frame: pd.DataFrame) -> bytes:
    import pyarrow as pa

    return table_parquet_bytes(pa.Table.from_pandas(frame, preserve_index=False))


def table_parquet_bytes(table) -> bytes:
    # pyarrow's writer stores no time or path: the same table (and library versions) give the same bytes
    import pyarrow.parquet as pq

    sink = io.BytesIO()
    pq.write_table(table, sink, row_group_size=PARQUET_ROW_GROUP, **parquet_options(table.schema))
    return sink.getvalue()


def parquet_options(schema) -> dict:
    """The Parquet writer's options for a table of this schema: zstd, whole numbers delta-packed and floats split
    by byte, neither through a dictionary (a run's times, counts and sums seldom repeat exactly: half the size
    and half the time, benchmarks/measurements/speed.md); any other column (text, booleans) as pyarrow's
    default, a dictionary."""
    import pyarrow as pa

    encoding = {}
    for field in schema:
        if pa.types.is_integer(field.type):
            encoding[field.name] = "DELTA_BINARY_PACKED"
        elif pa.types.is_float32(field.type) or pa.types.is_float64(field.type):
            encoding[field.name] = "BYTE_STREAM_SPLIT"
    dictionary = [field.name for field in schema if field.name not in encoding]
    return {"compression": PARQUET_COMPRESSION, "use_dictionary": dictionary, "column_encoding": encoding or None}


def csv_gz_bytes(frame: pd.DataFrame) -> bytes:
    """columns_csv_gz_bytes of the frame's columns."""
    return columns_csv_gz_bytes(frame_columns(frame))


def columns_csv_gz_bytes(columns: Columns) -> bytes:
    """The table as gzipped CSV (sim/experiment/table.py's format)."""
    sink = io.BytesIO()
    _gzip_text(sink, lambda text: write_csv_text(columns, text))
    return sink.getvalue()


def write_columns_csv(columns: Columns, path: Path) -> Path:
    """The table as CSV (sim/experiment/table.py's format) at path, gzipped where its name ends in .gz."""
    if str(path).endswith(".gz"):
        return _atomic(path, lambda f: _gzip_text(f, lambda text: write_csv_text(columns, text)))
    return _atomic(path, lambda f: _text(f, lambda text: write_csv_text(columns, text)))


def write_bytes(data: bytes, path: Path) -> Path:
    return _atomic(path, lambda f: f.write(data))


def write_csv(frame: pd.DataFrame, path: Path) -> Path:
    """write_columns_csv of the frame's columns."""
    return write_columns_csv(frame_columns(frame), path)


def _gzip_text(f, write) -> None:
    # The gzip header holds a file name and a time: empty and 0, so the same table gives the same
    # bytes (gzip would record the temporary file's name). Level 6, zlib's default, not gzip's 9: a quarter of
    # the time for under 1% more bytes (benchmarks/measurements/speed.md).
    with gzip.GzipFile(filename="", mode="wb", mtime=0, fileobj=f, compresslevel=GZIP_LEVEL) as gz:
        _text(gz, write)


def _text(f, write) -> None:
    """write(text file) into the binary file f, as UTF-8 with the line ends as written."""
    text = io.TextIOWrapper(f, encoding="utf-8", newline="")
    write(text)
    text.flush()
    text.detach()  # leave f open: its owner closes it


def write_json(data: dict, path: Path) -> Path:
    return _atomic(path, lambda f: f.write(json.dumps(data, indent=1, sort_keys=True).encode()))


def write_text(text: str, path: Path) -> Path:
    return _atomic(path, lambda f: f.write(text.encode()))
