"""`servesim run` imports only what the run needs: no matplotlib until it draws, no pyarrow unless it
writes Parquet. Each check runs the command in a fresh interpreter, where sys.modules is the truth."""
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# Runs the front door in this interpreter, then prints the top-level packages it loaded. With
# block_pyarrow, `import pyarrow` fails as if it were not installed: pandas 3 imports pyarrow by
# itself whenever it is installed, so its absence from sys.modules cannot be asked of a run that
# uses pandas; what can be asked is that the run does not need it.
PROBE = """
import json, sys
if {block_pyarrow}:
    sys.modules["pyarrow"] = None
from servesim.cli import main
try:
    status = main({argv!r})
except SystemExit as stop:
    status = stop.code
loaded = {{name.split(".")[0] for name, module in sys.modules.items() if module is not None}}
print(json.dumps({{"status": status, "loaded": sorted(loaded)}}))
"""


def loaded_by(argv: list[str], block_pyarrow: bool = False) -> set[str]:
    done = subprocess.run([sys.executable, "-c", PROBE.format(argv=argv, block_pyarrow=block_pyarrow)],
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


def test_a_run_without_plots_needs_neither_matplotlib_nor_pyarrow(write_config, tmp_path):
    config = write_config()
    with_arrow = tmp_path / "with_arrow"
    loaded = loaded_by(small_run(config, with_arrow, "--no-plots", "--iterations", "none"))
    assert "matplotlib" not in loaded
    without_arrow = tmp_path / "without_arrow"
    loaded = loaded_by(small_run(config, without_arrow, "--no-plots", "--iterations", "csv"), block_pyarrow=True)
    assert not loaded & {"matplotlib", "pyarrow"}
    assert not list(without_arrow.glob("*.png")) and not list(with_arrow.glob("*.png"))
    # the same summary, whether or not pyarrow could be imported
    assert (without_arrow / "summary.csv").read_bytes() == (with_arrow / "summary.csv").read_bytes()
    assert (without_arrow / "summary.txt").exists()
    assert list(without_arrow.glob("runs/*/iterations.csv.gz"))


def test_a_run_with_plots_still_draws_them(write_config, tmp_path):
    out = tmp_path / "plotted"
    loaded = loaded_by(small_run(write_config(), out, "--iterations", "none"))
    assert "matplotlib" in loaded
    for name in ("summary.csv", "summary.txt", "normalized_latency.png", "kv_usage.png"):
        assert (out / name).stat().st_size > 0, name
    assert (out / "kv_usage.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
