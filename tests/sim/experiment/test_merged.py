"""A fleet's iterations read merged as they are needed (sim/experiment/merged.py) are merged_records' to the
byte: each column, every row group, and the files written from them; and reading them holds a row group,
not the fleet's records merged."""
import io
import tracemalloc
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from engine.core.records import ITERATION_COLUMNS
from sim.core.simulate import merged_records
from sim.experiment.config import load_experiment
from sim.experiment.merged import MergedIterations
from sim.experiment.output import csv_gz_bytes, iterations_bytes, parquet_bytes
from sim.experiment.run import serve_trace, trace_for

CONFIG = Path(__file__).resolve().parents[3] / "configs" / "quickstart.yaml"
FLEETS = {  # name: (overrides, jobs)
    "apart, in 2 processes (files)": (["replicas=8", "router=round_robin"], 2),
    "apart, in this process": (["replicas=8", "router=round_robin"], 1),
    "together (least outstanding)": (["replicas=4", "router=least_outstanding"], 1),
}
SLOW_FLEETS = {"apart, in 2 processes (files)", "apart, in this process"}  # eight replicas each


def fleet_runs(overrides: list[str], jobs: int, rate: float = 16.0, duration_s: float = 60.0):
    exp = load_experiment(CONFIG, [*overrides, "systems=[vllm]", f"rates=[{rate}]",
                                   f"workload.duration_s={duration_s}", "warmup_s=0"])
    system = exp.systems[0]
    rng = np.random.default_rng(0)
    runs, _ = serve_trace(exp, system, trace_for(exp, rate, 0, rng), rng=rng, jobs=jobs)
    return runs


@pytest.mark.parametrize("fleet", [pytest.param(f, marks=pytest.mark.slow) if f in SLOW_FLEETS else f for f in FLEETS])
def test_the_streamed_merge_is_merged_records(fleet):
    runs = fleet_runs(*FLEETS[fleet])
    assert len(runs) > 1
    merged = MergedIterations(runs)
    expected = merged_records(runs).iteration_arrays()
    assert merged.num_rows == len(expected["start_s"]) > 1000
    for name in ITERATION_COLUMNS:  # each column whole, bytes and type
        assert merged[name].dtype == expected[name].dtype and merged[name].tobytes() == expected[name].tobytes()
    for size in (1, 333, 65536):  # the row groups, in order, whatever their size
        groups = list(merged.row_groups(size))
        assert all(len(group["start_s"]) == size for group in groups[:-1])
        for name in ITERATION_COLUMNS:
            assert np.concatenate([group[name] for group in groups]).tobytes() == expected[name].tobytes()
    frame = pd.DataFrame(expected, copy=False)
    assert iterations_bytes(merged, "parquet") == parquet_bytes(frame)
    assert iterations_bytes(merged, "csv") == csv_gz_bytes(frame)
    assert pd.read_parquet(io.BytesIO(iterations_bytes(merged, "parquet"))).equals(frame)


def test_reading_the_merge_holds_a_row_group_not_the_fleet():
    """Counted in bytes traced while the rows are read (numpy's buffers are traced), not in time: writing
    a fleet's iterations from its workers' files holds the merge order (8 bytes a row) and a row group; merging
    them first holds every column merged (144 bytes a row) and a column's transient copies besides."""
    runs = fleet_runs(["replicas=8", "router=round_robin"], jobs=2, rate=32.0, duration_s=90.0)
    num_rows = sum(run.num_iterations for run in runs)
    merged_bytes = num_rows * 8 * len(ITERATION_COLUMNS)
    assert num_rows > 20_000

    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        rows = sum(len(group["start_s"]) for group in MergedIterations(runs).row_groups(2048))
        streamed = tracemalloc.get_traced_memory()[1] - base
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        records = merged_records(runs)
        held = tracemalloc.get_traced_memory()[1] - base
        del records
    finally:
        tracemalloc.stop()
    assert rows == num_rows
    assert held > merged_bytes  # the old way: every column merged, at once
    # the order, the ends it is sorted from (8 bytes a row each, while sorting), and a row group's columns
    assert streamed < 3 * 8 * num_rows + 4 * 2048 * 8 * len(ITERATION_COLUMNS) + 2**20
    assert streamed < merged_bytes / 4
