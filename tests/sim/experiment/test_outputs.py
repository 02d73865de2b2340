"""A run's per-iteration records: Parquet by default, CSV or none on request, read back as recorded;
the summary the same bytes whatever the format; and start-up loads no table or plotting library."""
from __future__ import annotations

import gzip
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest

from engine.core.records import ITERATION_COLUMNS
from servesim.cli import main
from sim.experiment.config import load_experiment
from sim.experiment.output import ITERATION_FILES, check_iterations_format, read_iterations
from sim.experiment.run import run_one
from sim.experiment.sweep import RunKey, execute, save
from tests.helpers.configs import tiny

pytest.importorskip("pyarrow")

REPO = Path(__file__).resolve().parents[3]
TINY = tiny(systems="[vllm, orca-max]", rates="[2]")
RUN = "runs/vllm_rate2_seed0"


@pytest.fixture
def tiny(tmp_path) -> Path:
    path = tmp_path / "tiny.yaml"
    path.write_text(textwrap.dedent(TINY))
    return path


def _run(tiny: Path, out: Path, *options: str) -> None:
    assert main(["run", str(tiny), "--out", str(out), "--jobs", "1", *options]) == 0


@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_what_a_run_writes_reads_back_as_its_records(tiny, tmp_path, fmt):
    exp = load_experiment(tiny)
    system = exp.systems[0]
    recorded = run_one(exp, system, 2.0, 0).iterations
    assert len(recorded) > 100
    save(execute(exp, RunKey(system, 2.0, 0), "digest", fmt), tmp_path / "run")
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == sorted(
        ["requests.csv.gz", "summary.json", ITERATION_FILES[fmt]])
    back = read_iterations(tmp_path / "run")
    assert list(back.columns) == list(ITERATION_COLUMNS)
    # exact: Parquet keeps the dtypes and bits, and CSV writes every float at full precision
    pd.testing.assert_frame_equal(back, recorded, check_exact=True)


@pytest.mark.slow
def test_the_formats_change_only_the_iterations_file(tiny, tmp_path):
    for fmt in ITERATION_FILES:
        _run(tiny, tmp_path / fmt, "--iterations", fmt)
    parquet = tmp_path / "parquet"
    for fmt in ("csv", "none"):
        for name in ("summary.csv", "summary.txt", f"{RUN}/requests.csv.gz", f"{RUN}/summary.json"):
            assert (parquet / name).read_bytes() == (tmp_path / fmt / name).read_bytes(), (fmt, name)
    assert sorted(p.name for p in (tmp_path / "none" / RUN).iterdir()) == ["requests.csv.gz", "summary.json"]
    assert gzip.decompress((tmp_path / "csv" / RUN / "iterations.csv.gz").read_bytes()).startswith(b"replica,")
    with pytest.raises(FileNotFoundError, match="no iterations file"):
        read_iterations(tmp_path / "none" / RUN)


def test_parquet_output_is_the_same_bytes_every_time(tiny, tmp_path):
    for out in ("a", "b"):
        _run(tiny, tmp_path / out, "--set", "systems=[vllm]")
    data = (tmp_path / "a" / RUN / "iterations.parquet").read_bytes()
    assert data[:4] == b"PAR1" and data == (tmp_path / "b" / RUN / "iterations.parquet").read_bytes()


@pytest.mark.slow
def test_asking_for_another_format_simulates_the_runs_again(tiny, tmp_path, capsys):
    out = tmp_path / "out"
    _run(tiny, out, "--iterations", "csv")
    _run(tiny, out, "--iterations", "csv")
    assert "resuming: 2 of 2" in capsys.readouterr().out
    _run(tiny, out)  # parquet: the csv runs lack the file asked for
    assert "resuming" not in capsys.readouterr().out
    assert sorted(p.name for p in (out / RUN).iterdir()) == ["iterations.parquet", "requests.csv.gz", "summary.json"]
    _run(tiny, out, "--iterations", "none")  # keeps nothing new: every run is already there
    assert "resuming: 2 of 2" in capsys.readouterr().out


def test_parquet_without_pyarrow_is_refused_before_anything_runs(tiny, tmp_path, monkeypatch, capsys):
    real = __import__("importlib").util.find_spec
    monkeypatch.setattr("importlib.util.find_spec", lambda name, *a: None if name == "pyarrow" else real(name, *a))
    with pytest.raises(Exception, match="pip install pyarrow"):
        check_iterations_format("parquet")
    assert main(["run", str(tiny), "--out", str(tmp_path / "out"), "--jobs", "1"]) == 2
    err = capsys.readouterr().err
    assert err == ("servesim: error: --iterations: parquet: writing Parquet needs pyarrow (pip install pyarrow), "
                   "or choose --iterations csv\n")
    assert not (tmp_path / "out").exists()
    _run(tiny, tmp_path / "csv", "--iterations", "csv")  # the CSV needs no pyarrow


def _modules_after(code: str) -> set[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    result = subprocess.run([sys.executable, "-c", code + "\nimport sys; print(' '.join(sorted(sys.modules)))"],
                            cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return set(result.stdout.splitlines()[-1].split(" "))


def _top(modules: set[str]) -> set[str]:
    return {name.split(".")[0] for name in modules}


def test_start_up_loads_no_table_plotting_or_cluster_library():
    loaded = _top(_modules_after("import servesim.cli; servesim.cli.build_parser()"))
    assert not loaded & {"pandas", "matplotlib", "pyarrow", "distributed", "dask", "simpy", "torch"}, loaded


def test_a_sweep_loads_no_plotting_or_cluster_library(tiny, tmp_path):
    # what every worker (a process, a Dask worker) runs; matplotlib waits for the plots at the very end
    code = (f"from sim.experiment.config import load_experiment; from sim.experiment.sweep import sweep; "
            f"sweep(load_experiment({str(tiny)!r}), {str(tmp_path / 'o')!r}, progress=print)")
    loaded = _top(_modules_after(code))
    assert "simpy" in loaded and not loaded & {"matplotlib", "distributed", "dask"}, loaded
