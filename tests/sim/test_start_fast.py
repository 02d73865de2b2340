"""`servesim run` imports only what the run needs. Each check runs the command in a fresh interpreter, where
sys.modules is the truth.

What "needed" means: matplotlib never (the plots are drawn in processes of their own); pyarrow only to write the
per-iteration records as Parquet (the default; not with --iterations csv or none); pandas never (the plots group
the summary with it in their own processes, and the Parquet writer builds its tables from numpy columns, with
the pandas metadata a frame's table would carry: sim/experiment/output.py). Everything else a run writes
(summary.csv, summary.txt, requests.csv.gz, iterations.csv.gz) comes from numpy columns
(sim/experiment/table.py). `--help` loads none of them, nor simpy."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import sim.experiment.run_plots
from servesim.cli import main

REPO = Path(__file__).resolve().parents[2]

# Runs the front door in this interpreter, then prints the top-level packages it loaded. With `blocked`,
# importing those packages fails as if they were not installed: the run must not need them.
PROBE = """
import json, sys
for name in {blocked!r}:
    sys.modules[name] = None
from servesim.cli import main
try:
    status = main({argv!r})
except SystemExit as stop:
    status = stop.code
loaded = {{name.split(".")[0] for name, module in sys.modules.items() if module is not None}}
print(json.dumps({{"status": status, "loaded": sorted(loaded)}}))
"""


def loaded_by(argv: list[str], blocked: tuple[str, ...] = ()) -> set[str]:
    done = subprocess.run([sys.executable, "-c", PROBE.format(argv=argv, blocked=blocked)],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["status"] == 0, done.stdout + done.stderr
    return set(report["loaded"])


def small_run(config: Path, out: Path, *options: str) -> list[str]:
    return ["run", str(config), "--out", str(out), "--jobs", "1", "--set", "systems=[orca-oracle,vllm]",
            "--set", "workload.duration_s=60", *options]


def test_help_imports_neither_matplotlib_nor_pyarrow_nor_pandas():
    loaded = loaded_by(["run", "--help"])
    assert not loaded & {"matplotlib", "pyarrow", "pandas", "simpy"}


def test_a_run_without_plots_or_parquet_loads_neither_matplotlib_nor_pandas_nor_pyarrow(write_config, tmp_path):
    config = write_config()
    for iterations in ("none", "csv"):
        loaded = loaded_by(small_run(config, tmp_path / iterations, "--no-plots", "--iterations", iterations))
        assert not loaded & {"matplotlib", "pandas", "pyarrow"}, iterations
        assert not list((tmp_path / iterations).glob("*.png"))
    assert list((tmp_path / "csv").glob("runs/*/iterations.csv.gz"))
    assert not list((tmp_path / "none").glob("runs/*/iterations.*"))
    # nor does it need them: the same files where they cannot be imported at all
    blocked = tmp_path / "blocked"
    loaded_by(small_run(config, blocked, "--no-plots", "--iterations", "csv"), blocked=("pandas", "pyarrow"))
    for name in ("summary.csv", "summary.txt", "runs/vllm_rate0.5_seed0/requests.csv.gz",
                 "runs/vllm_rate0.5_seed0/iterations.csv.gz"):
        assert (blocked / name).read_bytes() == (tmp_path / "csv" / name).read_bytes(), name


def test_the_quickstarts_clock_loads_no_pandas(tmp_path):
    """The quickstart prices iterations with the shipped two-GPU profile: its judgement is read from the
    profile, and the module that judges the tables (and needs pandas) stays unloaded."""
    out = tmp_path / "quickstart"
    argv = ["run", str(REPO / "configs" / "quickstart.yaml"), "--out", str(out), "--jobs", "1", "--no-plots",
            "--iterations", "none", "--set", "systems=[vllm]", "--set", "rates=[1]",
            "--set", "workload.duration_s=30", "--set", "warmup_s=0"]
    loaded = loaded_by(argv, blocked=("pandas", "pyarrow"))
    assert not loaded & {"matplotlib", "pandas", "pyarrow"}
    assert (out / "summary.csv").stat().st_size > 0


def test_a_run_writing_parquet_loads_pyarrow_but_neither_pandas_nor_matplotlib(write_config, tmp_path):
    config = write_config()
    out = tmp_path / "parquet"
    loaded = loaded_by(small_run(config, out, "--no-plots"))  # Parquet: the default
    assert "pyarrow" in loaded and not loaded & {"pandas", "matplotlib"}
    files = sorted(out.glob("runs/*/iterations.parquet"))
    assert files
    # nor does it need pandas: the same bytes where it cannot be imported at all
    blocked = tmp_path / "blocked"
    loaded_by(small_run(config, blocked, "--no-plots"), blocked=("pandas",))
    for file in files:
        name = file.relative_to(out)
        assert (blocked / name).read_bytes() == file.read_bytes(), name


def test_a_run_with_plots_draws_them_in_processes_of_their_own(write_config, tmp_path):
    out = tmp_path / "plotted"
    loaded = loaded_by(small_run(write_config(), out, "--iterations", "none"))
    assert "matplotlib" not in loaded  # sim/experiment/run_plots.py: imported and drawn beside the runs
    for name in ("summary.csv", "summary.txt", "normalized_latency.png", "kv_usage.png"):
        assert (out / name).stat().st_size > 0, name
    assert (out / "kv_usage.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def broken_figure(*args, **kwargs):
    raise RuntimeError("the figure could not be drawn")


def test_a_figure_that_fails_fails_the_run_after_the_summary_is_written(write_config, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(sim.experiment.run_plots, "draw_plots", broken_figure)  # the drawing process forks
    out = tmp_path / "broken"
    assert main(small_run(write_config(), out, "--iterations", "none")) != 0
    assert "the figure could not be drawn" in capsys.readouterr().err
    assert (out / "summary.csv").stat().st_size > 0
    assert not list(out.glob("*.png"))


@pytest.mark.parametrize("cores", [2, 1])
def test_the_figures_are_drawn_in_two_processes_where_two_cores_are_usable_never_the_commands(
        write_config, tmp_path, monkeypatch, cores):
    """Half the figures each (sim/experiment/run_plots.py SHARES), or all four in one process where the command may
    run on one core only; each figure notes the process it was drawn in."""
    plots = pytest.importorskip("sim.experiment.plots")
    for function in ("normalized_latency_plot", "ttft_plot", "tpot_plot", "kv_usage_plot"):
        monkeypatch.setattr(plots, function, noting_the_process(getattr(plots, function)))
    monkeypatch.setattr(sim.experiment.run_plots, "usable_cores", lambda: cores)  # the drawing process forks
    out = tmp_path / "drawn"
    assert main(small_run(write_config(), out, "--iterations", "none")) == 0
    drawn_in = {name: int((out / f"{name}.pid").read_text()) for name in sim.experiment.run_plots.FIGURES}
    first, second = ({drawn_in[name] for name in share} for share in sim.experiment.run_plots.SHARES)
    assert len(first) == len(second) == 1 and os.getpid() not in first | second
    assert (first != second) == (cores == 2)
    assert all((out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for name in drawn_in)


def test_usable_cores_are_those_the_process_may_run_on(monkeypatch):
    if not hasattr(os, "sched_getaffinity"):
        pytest.skip("no processor affinity on this platform")
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {1})  # as under `taskset -c 1`
    assert sim.experiment.run_plots.usable_cores() == 1


def noting_the_process(figure):
    def draw(summary, path, *args, **kwargs):
        Path(f"{path}.pid").write_text(str(os.getpid()))
        return figure(summary, path, *args, **kwargs)
    return draw


@pytest.mark.parametrize("share", [0, 1], ids=["in the first process", "in the second"])
def test_a_figure_failing_in_either_process_fails_the_run_once_both_have_drawn(write_config, tmp_path, monkeypatch,
                                                                               capsys, share):
    plots = pytest.importorskip("sim.experiment.plots")
    failing = {0: "ttft.png", 1: "tpot.png"}[share]
    assert failing in sim.experiment.run_plots.SHARES[share]
    monkeypatch.setattr(plots, failing.replace(".png", "_plot"), broken_figure)
    monkeypatch.setattr(sim.experiment.run_plots, "usable_cores", lambda: 2)  # two processes, on any machine
    out = tmp_path / "broken"
    assert main(small_run(write_config(), out, "--iterations", "none")) != 0
    assert "the figure could not be drawn" in capsys.readouterr().err
    assert (out / "summary.csv").stat().st_size > 0
    # the command ended after the other process had finished its figures: none is half drawn, or drawn later
    assert all((out / name).stat().st_size > 0 for name in sim.experiment.run_plots.SHARES[1 - share])
    assert not (out / failing).exists()
