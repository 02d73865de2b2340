"""ServingRecords: iterations arrive as tuples and as decode stretches, and read back as typed columns in the
order they came, whatever the chunk boundaries."""
from __future__ import annotations

from array import array
from itertools import chain, islice, repeat

import numpy as np
import pytest

import engine.core.records as records_module
from engine.core.batch import Batch
from engine.core.kv_usage import USAGE_FIELDS, KVUsage, after_first, usage_values
from engine.core.records import ITERATION_COLUMNS, ServingRecords


def batch(num_decodes: int, context: int = 100, prefill: int = 0) -> Batch:
    return Batch(prefill_seq_ids=[99] if prefill else [], prefill_lens=[prefill] if prefill else [],
                 decode_seq_ids=list(range(num_decodes)), decode_context_lens=[context + i for i in range(num_decodes)],
                 num_running_groups=num_decodes + bool(prefill))


def add_alone(records: ServingRecords, expected: list[tuple], start: float, num_decodes: int) -> None:
    b, usage = batch(num_decodes, prefill=7), KVUsage(token=50 + num_decodes, internal=3, idle=11, unshared_blocks=9)
    if num_decodes % 2:  # one row both ways: add_iteration spells out what add_iterations zips
        records.add_iteration(b, usage, start, 0.5, 2, 1)
    else:
        records.add_iterations(b, tuple(zip(usage_values(usage))), (start,), (0.5,), (2,), 1)
    expected.append((1, start, 0.5, 7, 1, num_decodes, b.sum_decode_context, b.num_running_groups, 2, 0, 0,
                     usage.token, 0, 3, 0, 11, 9, 0))


def add_stretch(records: ServingRecords, expected: list[tuple], start: float, count: int, num_decodes: int) -> None:
    b = batch(num_decodes)
    b.blocks_to_copy = [(1, 2)]  # the first iteration's alone
    starts = [start + 0.25 * i for i in range(count)]
    durations = [0.25] * count
    tokens = list(range(300, 300 + count * num_decodes, num_decodes)) if num_decodes else [300] * count
    # a column that stays the same is an int, or (as any iterable may be) an iterator of it
    same = (lambda value: value) if count % 2 else repeat
    usage = (tokens, same(0), [5] * count, same(2), repeat(0), list(range(20, 20 + count)), same(1))
    waits = chain(repeat(4, count - 1), (6,))
    records.add_iterations(b, usage, starts, durations, waits, 0)
    for i in range(count):
        context = b.sum_decode_context + i * num_decodes
        expected.append((0, starts[i], 0.25, 0, 0, num_decodes, context, num_decodes, 4 if i < count - 1 else 6,
                         0, 0 if i else 1, tokens[i], 0, 5, 2, 0, 20 + i, 1))


def test_the_kv_columns_are_the_pools_fields_in_order():
    """add_iterations puts a UsageColumns (KVUsage's fields, in order) last in the row."""
    kv = [name.removeprefix("kv_") for name in ITERATION_COLUMNS[-len(USAGE_FIELDS):]]
    assert kv == list(USAGE_FIELDS)


@pytest.mark.parametrize(("chunk", "columns"), [(1, 1), (3, 5), (7, 2), (4096, 4096)])
def test_rows_and_stretches_read_back_in_order_across_chunks(monkeypatch, chunk, columns):
    monkeypatch.setattr(records_module, "ROWS_PER_CHUNK", chunk)
    monkeypatch.setattr(records_module, "ROWS_PER_COLUMNS", columns)
    rng = np.random.default_rng(chunk)
    records, expected = ServingRecords(), []
    for step in range(60):
        if rng.random() < 0.5:
            add_alone(records, expected, float(step), int(rng.integers(0, 5)))
        else:
            add_stretch(records, expected, float(step), int(rng.integers(1, 9)), int(rng.integers(0, 5)))
        if step == 30:  # read in the middle: later iterations join the columns read so far
            assert records.iteration_values == expected
        assert records.num_iterations == len(expected)
    assert records.iteration_values == expected
    columns = records.iteration_columns
    assert [c.typecode for c in columns] == ["q", "d", "d", *"q" * 15]
    assert records.iterations == {name: [row[i] for row in expected] for i, name in enumerate(ITERATION_COLUMNS)}


def test_merged_columns_replace_the_iterations():
    records, expected = ServingRecords(), []
    add_alone(records, expected, 0.0, 2)
    other = ServingRecords()
    add_stretch(other, [], 1.0, 3, 1)
    records.set_iteration_columns(other.iteration_columns)
    assert records.num_iterations == 3 and records.iteration_values == other.iteration_values
    add_alone(records, expected, 9.0, 1)
    assert records.iteration_values[-1] == expected[-1] and records.num_iterations == 4


def test_columns_read_or_merged_do_not_grow_with_later_iterations():
    """A caller holding iteration_columns (a fleet's merge hands them to another records) keeps what it read."""
    records, expected = ServingRecords(), []
    add_stretch(records, expected, 0.0, 3, 2)
    read = records.iteration_columns
    add_alone(records, expected, 5.0, 1)
    add_stretch(records, expected, 6.0, 4, 1)
    assert len(read[0]) == 3 and records.iteration_values == expected
    other = ServingRecords()
    add_stretch(other, [], 7.0, 2, 1)  # replaced by the merge, with the set of columns it was growing
    other.set_iteration_columns(read)
    add_stretch(other, [], 9.0, 2, 1)
    assert len(read[0]) == 3 and other.num_iterations == 5


def test_a_full_set_of_columns_keeps_no_spare_room(monkeypatch):
    """Arrays grown by appends hold spare room (sys.getsizeof counts it); a full set is kept at its exact size."""
    import sys

    monkeypatch.setattr(records_module, "ROWS_PER_COLUMNS", 50)
    records, expected = ServingRecords(), []
    for step in range(12):
        add_stretch(records, expected, float(step), 7, 2)
    full = records._chunks[0]
    assert len(full[0]) >= 50 and len(records._chunks) == 2
    assert [sys.getsizeof(column) for column in full] == [sys.getsizeof(array(c.typecode, c)) for c in full]
    assert records.iteration_values == expected


def test_columns_of_the_wrong_types_are_refused():
    with pytest.raises(ValueError, match="iteration columns typed"):
        ServingRecords().set_iteration_columns([array("d") for _ in ITERATION_COLUMNS])


def test_a_stretch_column_after_the_steps_own_value():
    """after_first: the step's own value, then the stretch's column; an int where both stay the same, a list
    where the records can copy one (test_decode_stretch holds the values to the step-by-step run)."""
    assert after_first(3, 3) == 3
    assert list(islice(after_first(3, 0), 4)) == [3, 0, 0, 0]
    assert after_first(3, [4, 5]) == [3, 4, 5] and after_first(3, range(4, 7)) == [3, 4, 5, 6]
    assert list(after_first(3, iter([4, 5]))) == [3, 4, 5]
