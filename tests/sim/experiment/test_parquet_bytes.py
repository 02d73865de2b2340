"""Parquet written from numpy columns (sim/experiment/output.py arrow_table) is the file pyarrow writes from the
pandas frame of those columns, to the byte: the same arrays and the same pandas metadata, for every type of column
a run's iterations have (int64, float64, NaN among them) and the other numbers and bools, over several row groups
and none; and where pandas is not installed the file is still written, and reads back."""
import io

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import sim.experiment.output as output
from sim.experiment.output import PARQUET_ROW_GROUP, arrow_table, columns_parquet_bytes, parquet_bytes

ROWS = 2 * PARQUET_ROW_GROUP + 17  # three row groups, the last short


def columns(rows: int = ROWS) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {
        "replica": rng.integers(0, 8, rows),
        "start_s": np.cumsum(rng.random(rows)),
        "with_nan": np.where(rng.random(rows) < 0.1, np.nan, rng.random(rows)),  # from_pandas: NaN is null
        "flag": rng.random(rows) < 0.5,
        "int8": rng.integers(-9, 9, rows).astype(np.int8),
        "int32": rng.integers(-9, 9, rows).astype(np.int32),
        "uint16": rng.integers(0, 9, rows).astype(np.uint16),
        "uint64": rng.integers(0, 9, rows).astype(np.uint64),
        "float32": rng.random(rows).astype(np.float32),
    }


def from_pandas(table: dict) -> pa.Table:
    return pa.Table.from_pandas(pd.DataFrame(table, copy=False), preserve_index=False)


@pytest.mark.parametrize("name", list(columns(1)))
def test_each_type_of_column_is_the_table_from_pandas(name):
    column = {name: columns(1000)[name]}
    mine, theirs = arrow_table(column), from_pandas(column)
    assert mine.schema.metadata == theirs.schema.metadata  # the JSON to the byte
    assert mine.schema == theirs.schema and mine.equals(theirs)


def test_a_table_of_every_type_is_the_frames_file_over_several_row_groups():
    table = columns()
    data = columns_parquet_bytes(table)
    assert data == parquet_bytes(pd.DataFrame(table, copy=False))
    assert pq.ParquetFile(io.BytesIO(data)).metadata.num_row_groups == 3


def test_read_only_views_are_written_as_their_values():
    """A run's iterations are read-only views of its typed columns (np.frombuffer)."""
    table = {name: np.frombuffer(column.tobytes(), dtype=column.dtype) for name, column in columns(5000).items()}
    assert columns_parquet_bytes(table) == parquet_bytes(pd.DataFrame(table))


@pytest.mark.parametrize("table", [{name: column[:0] for name, column in columns(1).items()}, {}],
                         ids=["no rows", "no columns"])
def test_an_empty_table_is_the_empty_frames_file(table):
    assert columns_parquet_bytes(table) == parquet_bytes(pd.DataFrame(table))


def test_columns_of_other_types_go_through_pandas():
    table = {"name": np.array(["a", None, "b"], dtype=object), "count": np.arange(3)}
    assert columns_parquet_bytes(table) == parquet_bytes(pd.DataFrame(table))


def test_without_pandas_the_file_has_no_pandas_metadata_and_reads_back(monkeypatch):
    monkeypatch.setattr(output, "_pandas_version", lambda: None)
    table = columns(1000)
    read = pq.read_table(io.BytesIO(columns_parquet_bytes(table)))
    assert read.schema.metadata is None or b"pandas" not in read.schema.metadata
    assert read.column_names == list(table)
    for name, column in table.items():
        values = read[name].to_numpy(zero_copy_only=False)
        assert values.dtype == column.dtype and np.array_equal(values, column, equal_nan=True), name


def test_numbers_are_delta_packed_or_split_by_byte_and_everything_else_keeps_its_dictionary():
    table = {**columns(1000), "name": np.array(["a", "b"] * 500, dtype=object)}
    metadata = pq.ParquetFile(io.BytesIO(columns_parquet_bytes(table))).metadata
    encodings = {metadata.schema.column(i).name: metadata.row_group(0).column(i).encodings
                 for i in range(metadata.num_columns)}
    for name in ("replica", "int8", "int32", "uint16", "uint64"):
        assert "DELTA_BINARY_PACKED" in encodings[name] and "RLE_DICTIONARY" not in encodings[name], name
    for name in ("start_s", "with_nan", "float32"):
        assert "BYTE_STREAM_SPLIT" in encodings[name] and "RLE_DICTIONARY" not in encodings[name], name
    assert "RLE_DICTIONARY" in encodings["name"]
    read = pq.read_table(io.BytesIO(columns_parquet_bytes(table)))
    assert np.array_equal(read["start_s"].to_numpy(), table["start_s"])
