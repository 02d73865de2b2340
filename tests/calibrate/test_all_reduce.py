"""All-reduce priced from a measured table: interpolated by message size, smoothed, refused when malformed."""
import numpy as np
import pandas as pd
import pytest

from calibrate.clock.roofline import ALLREDUCE_LATENCY_S, RooflineCostModel
from calibrate.hardware.hardware import load_hardware
from calibrate.parts.all_reduce import AllReduceTable, isotonic, read_all_reduce, thin
from engine.core.batch import Batch
from engine.errors import SpecError
from engine.specs.loader import load_model_spec

TABLE = AllReduceTable({2: ((1000.0, 2000.0, 4000.0), (10e-6, 20e-6, 30e-6)),
                        4: ((1000.0, 3000.0), (15e-6, 45e-6))})


@pytest.mark.parametrize("workers, size, seconds", [
    (2, 1000, 10e-6),  # at a measured size
    (2, 1500, 15e-6),  # halfway between 1000 and 2000
    (2, 3000, 25e-6),  # halfway between 2000 and 4000
    (2, 3500, 27.5e-6),  # three quarters of the way
    (2, 10, 10e-6),  # below the smallest: the latency floor
    (2, 8000, 60e-6),  # past the largest: in proportion to size
    (4, 2000, 30e-6),
])
def test_time_is_interpolated_by_message_size(workers, size, seconds):
    assert TABLE.time(workers, size) == pytest.approx(seconds)


def test_links_twice_as_fast_halve_bandwidth_bound_times_but_not_the_floor():
    fast = TABLE.scaled(2.0)
    assert fast.time(2, 8000) == pytest.approx(TABLE.time(2, 4000))
    assert fast.time(2, 16000) == pytest.approx(TABLE.time(2, 16000) / 2)  # bandwidth-bound: half the time
    assert fast.time(2, 100) == TABLE.time(2, 100) == 10e-6


def test_round_trip_and_refusals():
    assert AllReduceTable.from_dict(TABLE.to_dict()) == TABLE
    with pytest.raises(SpecError, match="all_reduce.2.size_bytes: must be positive and increasing"):
        AllReduceTable.from_dict({2: {"size_bytes": [2.0, 1.0], "time_s": [1e-5, 2e-5]}}, "p.yaml")
    with pytest.raises(SpecError, match="all_reduce.1: GPU counts are whole numbers of at least 2"):
        AllReduceTable.from_dict({1: {"size_bytes": [1.0], "time_s": [1e-5]}}, "p.yaml")


def test_isotonic_averages_what_runs_backwards():
    assert list(isotonic(np.array([1.0, 3.0, 2.0, 4.0]))) == [1.0, 2.5, 2.5, 4.0]
    assert list(isotonic(np.array([5.0, 1.0, 1.0, 9.0]))) == [pytest.approx(7 / 3)] * 3 + [9.0]


def test_thinning_keeps_what_interpolation_needs():
    sizes = np.arange(1.0, 11.0)
    seconds = np.array([1, 1, 1, 1, 2, 3, 4, 5, 5, 5], dtype=float)
    kept_sizes, kept_seconds = thin(sizes, seconds, rtol=0.0)
    assert list(kept_sizes) == [1, 4, 8, 10]
    assert np.interp(sizes, kept_sizes, kept_seconds) == pytest.approx(seconds)


def write(path, rows):
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def test_a_table_keeps_gpus_in_one_node_in_seconds_smoothed(tmp_path):
    rows = [{"size": s, "num_workers": 2, "devices_per_node": d, "time_stats.all_reduce.median": t,
             "collective": "all_reduce"}
            for s, d, t in [(1000, 2, 0.010), (2000, 2, 0.030), (2000, 2, 0.010),  # a size timed twice: averaged
                            (3000, 2, 0.012), (4000, 2, 0.040), (4000, 1, 0.500)]]  # devices 1: across nodes
    table = read_all_reduce(write(tmp_path / "all_reduce.csv", rows))
    assert list(table.points) == [2]
    # 1000: 10 us; 2000: (30 + 10) / 2 = 20 us, then 12 us at 3000 runs backwards: both 16 us; 4000: 40 us
    assert table.time(2, 1000) == pytest.approx(10e-6)
    assert table.time(2, 2500) == pytest.approx(16e-6)
    assert table.time(2, 4000) == pytest.approx(40e-6)


@pytest.mark.parametrize("column", ["size", "num_workers", "devices_per_node", "time_stats.all_reduce.median"])
def test_a_table_missing_a_column_is_refused_naming_file_and_column(tmp_path, column):
    rows = [{"size": 1000, "num_workers": 2, "devices_per_node": 2, "time_stats.all_reduce.median": 0.01}]
    path = write(tmp_path / "all_reduce.csv", [{k: v for k, v in r.items() if k != column} for r in rows])
    with pytest.raises(SpecError, match=f"all_reduce.csv: column {column}: missing"):
        read_all_reduce(path)


def test_a_table_with_no_gpus_in_one_node_is_refused(tmp_path):
    rows = [{"size": 1000, "num_workers": 2, "devices_per_node": 1, "time_stats.all_reduce.median": 0.01}]
    with pytest.raises(SpecError, match="no rows with every GPU in one node"):
        read_all_reduce(write(tmp_path / "all_reduce.csv", rows))


def test_the_roofline_charges_two_measured_all_reduces_per_layer():
    model, hw = load_model_spec("opt-13b"), load_hardware("a100-40gb")
    ring = RooflineCostModel(model, hw, tp=2)
    measured = RooflineCostModel(model, hw, tp=2, all_reduce=TABLE.scaled(10.0))  # sizes 10,000-40,000 bytes
    batch = Batch(decode_seq_ids=[0, 1], decode_context_lens=[100, 200])
    message = 2 * model.hidden_size * 2  # two tokens of fp16 activations: 20,480 bytes
    per_message = 20e-6 + (30e-6 - 20e-6) * (message - 20000) / 20000
    ring_comm = 2 * model.num_layers * (2 * 0.5 * message / hw.nvlink_bytes_per_s + ALLREDUCE_LATENCY_S)
    assert measured.iteration_time(batch) - ring.iteration_time(batch) == pytest.approx(
        2 * model.num_layers * per_message - ring_comm)
    # a GPU count the table lacks falls back to the ring formula
    eight = RooflineCostModel(model, hw, tp=8, all_reduce=TABLE)
    assert eight.iteration_time(batch) == RooflineCostModel(model, hw, tp=8).iteration_time(batch)
