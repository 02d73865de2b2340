"""Sweeps and capacity probes on Dask: the same files as the process pool, resumable, errors in one line.

Every Dask client here lives in a `servesim` subprocess: a client's threads in the test process would be
copied, mid-flight, into the process pools other tests fork. The existing cluster is a two-worker
LocalCluster (threads in one process, reached over TCP) in a subprocess of its own.
"""
from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

from engine.errors import SpecError
from servesim.cli import main
from tests.helpers.configs import TINY
from tests.helpers.processes import all_exit, children, reap

REPO = Path(__file__).resolve().parents[3]
needs_distributed = pytest.mark.skipif(importlib.util.find_spec("distributed") is None,
                                       reason="the dask extra is not installed (pip install -e '.[dask]')")
RUN_FILES = ("summary.json", "requests.csv.gz", "iterations.parquet")
CLUSTER = """
import sys
from distributed import LocalCluster
cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=False, protocol="tcp", host="127.0.0.1",
                       scheduler_kwargs={"dashboard": False, "dashboard_address": ":0"})
print(cluster.scheduler_address, flush=True)
sys.stdin.read()  # until the test closes it
cluster.close()
"""


def _env(**extra: str) -> dict:
    return {**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1", **extra}


def servesim(*args: str, timeout: float = 180, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "servesim", *args], cwd=REPO, env=_env(**env), capture_output=True,
                          text=True, timeout=timeout)


def one_error_line(result: subprocess.CompletedProcess, status: int = 2) -> str:
    assert result.returncode == status, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    return lines[0]


def same_outputs(a: Path, b: Path) -> None:
    runs = sorted(p.name for p in (a / "runs").iterdir())
    assert runs == sorted(p.name for p in (b / "runs").iterdir()) and len(runs) == 4
    for name in ["summary.csv", "summary.txt"] + [f"runs/{run}/{file}" for run in runs for file in RUN_FILES]:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


@pytest.fixture(scope="module")
def config(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("dask") / "tiny.yaml"
    path.write_text(textwrap.dedent(TINY))
    return path


@pytest.fixture(scope="module")
def reference(config) -> Path:
    """The sweep in this process, one run after another: what every executor must write."""
    out = config.parent / "reference"
    assert main(["run", str(config), "--out", str(out), "--jobs", "1"]) == 0
    return out


@pytest.fixture(scope="module")
def scheduler() -> str:
    """The address of an existing two-worker cluster."""
    proc = subprocess.Popen([sys.executable, "-c", CLUSTER], cwd=REPO, env=_env(), stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        address = proc.stdout.readline().strip()
        assert address.startswith("tcp://"), f"the cluster did not start: {address!r}"
        yield address
    finally:
        proc.stdin.close()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.mark.slow
@needs_distributed
def test_a_sweep_on_a_local_dask_cluster_writes_the_process_pools_bytes(config, reference, tmp_path):
    pool = servesim("run", str(config), "--out", str(tmp_path / "pool"), "--jobs", "2")
    assert pool.returncode == 0, pool.stderr
    dask = servesim("run", str(config), "--out", str(tmp_path / "dask"), "--executor", "dask", "--jobs", "2")
    assert dask.returncode == 0, dask.stderr
    assert dask.stderr == ""  # no word from distributed's logs
    assert dask.stdout.count("normalized latency") == 4
    same_outputs(reference, tmp_path / "pool")
    same_outputs(reference, tmp_path / "dask")


@pytest.mark.slow
@needs_distributed
def test_a_sweep_on_an_existing_cluster_resumes(config, reference, scheduler, tmp_path):
    out = tmp_path / "out"
    first = servesim("run", str(config), "--out", str(out), "--scheduler", scheduler)
    assert first.returncode == 0, first.stderr
    same_outputs(reference, out)
    for folder in (out, tmp_path / "from-pool"):  # a sweep the cluster did, and one this process did
        if folder != out:
            shutil.copytree(reference, folder)
        shutil.rmtree(folder / "runs" / "orca-oracle_rate2_seed0")  # as if killed before the last run
        (folder / "summary.csv").unlink()
        again = servesim("run", str(config), "--out", str(folder), "--scheduler", scheduler)
        assert again.returncode == 0, again.stderr
        assert "resuming: 3 of 4" in again.stdout and again.stdout.count("normalized latency") == 1
        same_outputs(reference, folder)


@needs_distributed
def test_an_error_in_a_dask_worker_reads_as_in_this_process(config, scheduler, tmp_path):
    broken = tmp_path / "worker-error.yaml"
    # loads, but every run stops in its worker: each step would take inf seconds (test_reruns.py)
    broken.write_text(config.read_text() + "cost_model: {kind: roofline, compute_efficiency: 5.0e-324}\n")
    one_run = ["--set", "systems=[vllm]", "--set", "rates=[1]"]  # every run fails, each with its own numbers
    here = one_error_line(servesim("run", str(broken), "--out", str(tmp_path / "a"), "--jobs", "1", *one_run))
    there = one_error_line(servesim("run", str(broken), "--out", str(tmp_path / "b"), "--scheduler", scheduler,
                                    *one_run))
    assert here == there and here.startswith("servesim: error: roofline(a100-40gb")
    assert not (tmp_path / "b").exists()  # nothing half-written


@needs_distributed
def test_a_worker_error_still_pickles_once_distributed_is_imported(config, tmp_path):
    import distributed  # noqa: F401  (installs tblib's pickling of error chains, here and in forked workers)

    from sim.experiment.config import load_experiment
    from sim.experiment.sweep import sweep

    broken = tmp_path / "worker-error.yaml"
    broken.write_text(config.read_text() + "cost_model: {kind: roofline, compute_efficiency: 5.0e-324}\n")
    with pytest.raises(SpecError, match="step time inf s"):  # not BrokenProcessPool
        sweep(load_experiment(broken), tmp_path / "out", jobs=2, progress=lambda line: None)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@needs_distributed
def test_no_scheduler_at_the_address_is_one_line(config, tmp_path):
    address = f"tcp://127.0.0.1:{_free_port()}"
    result = servesim("run", str(config), "--out", str(tmp_path / "out"), "--scheduler", address,
                      DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT="1s")
    line = one_error_line(result)
    assert line.startswith(f"servesim: error: --scheduler: {address}: no Dask scheduler answers there (")
    assert line.endswith("); give its address as tcp://HOST:PORT")
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
@needs_distributed
def test_capacity_on_a_cluster_writes_the_same_files(config, scheduler, tmp_path):
    args = ["capacity", str(config), "--target", "normalized_latency=0.2", "--rate", "3", "--tolerance", "0.25",
            "--set", "systems=[vllm]"]
    here = servesim(*args, "--out", str(tmp_path / "here"), "--jobs", "1")
    there = servesim(*args, "--out", str(tmp_path / "there"), "--scheduler", scheduler)
    assert here.returncode == 0 and there.returncode == 0, here.stderr + there.stderr
    for name in ("capacity.csv", "capacity_probes.csv"):
        assert (tmp_path / "here" / name).read_bytes() == (tmp_path / "there" / name).read_bytes(), name


@pytest.mark.parametrize("options, message", [
    (["--scheduler", "tcp://127.0.0.1:1", "--executor", "process"],
     "--scheduler: tcp://127.0.0.1:1: names a Dask scheduler; it goes with --executor dask"),
    (["--scheduler", "tcp://127.0.0.1:1", "--jobs", "2"],
     "--jobs: 2: the cluster at --scheduler has its own workers; drop --jobs"),
    (["--jobs", "-1"], "--jobs: -1: must be at least 1, or 0 for one per core"),
])
def test_executor_options_that_do_not_go_together(config, tmp_path, capsys, options, message):
    assert main(["run", str(config), "--out", str(tmp_path / "out"), *options]) == 2
    assert capsys.readouterr().err == f"servesim: error: {message}\n"
    assert not (tmp_path / "out").exists()


def test_without_distributed_the_dask_executor_says_what_to_install(config, tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "distributed", None)  # import distributed now fails, as if not installed
    assert main(["run", str(config), "--out", str(tmp_path / "out"), "--executor", "dask"]) == 2
    assert capsys.readouterr().err == ("servesim: error: --executor: dask: needs dask's distributed scheduler: "
                                       "pip install 'servesim[dask]' (dask and distributed)\n")


@needs_distributed
def test_a_lost_worker_stops_the_sweep_in_one_line_that_says_to_resume():
    from distributed import KilledWorker

    from sim.executors.cluster import DaskWorkers

    class Lost:  # a future whose every worker died running it
        def result(self):
            raise KilledWorker("execute-0a1b", SimpleNamespace(address="tcp://10.0.0.7:40123"), 3)

    address = "tcp://10.0.0.5:8786"
    workers = DaskWorkers(None, None, f"the Dask cluster at {address}", ("--scheduler", address), 4)
    with pytest.raises(SpecError) as err:
        workers._result(Lost())
    message = str(err.value)
    assert message.startswith("--scheduler: tcp://10.0.0.5:8786: the Dask cluster at tcp://10.0.0.5:8786 failed a run "
                              "(KilledWorker: ")
    assert "tcp://10.0.0.7:40123" in message and message.endswith("finished runs are kept, run again to resume")


# --- Ctrl-C and SIGKILL: the local cluster's worker processes end with the command ------------------



def _as_from_a_terminal() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # a test runner in the background ignores SIGINT; a terminal does not


# Imported at start-up by every process of the sweep (the command, Dask's nannies and workers) whose PYTHONPATH
# holds it: the first run to start runs; every other run waits at its start, until its worker closes (a bound
# keeps a broken test from hanging). The runs after the first could otherwise all finish a few tenths of a
# second after its progress line, and the sweep end (exit 0) before an interrupt sent then lands.
RUN_GATE = """
import functools, os, time

if os.environ.get("SERVESIM_TEST_GATE"):
    import sim.experiment.sweep as sweep

    _execute_into = sweep.execute_into

    def _worker_runs():
        from distributed import get_worker
        from distributed.core import Status

        return get_worker().status == Status.running

    @functools.wraps(_execute_into)
    def execute_into(*args, **kwargs):
        try:  # the first run to start takes the marker, atomically, and goes
            os.close(os.open(os.environ["SERVESIM_TEST_GATE"], os.O_CREAT | os.O_EXCL))
        except FileExistsError:
            deadline = time.monotonic() + 120
            while _worker_runs() and time.monotonic() < deadline:
                time.sleep(0.05)
            raise RuntimeError("held at the test's gate until its worker closed")
        return _execute_into(*args, **kwargs)

    sweep.execute_into = execute_into  # pickled by reference: a worker resolves the same name to its own wrapper
"""


@pytest.mark.slow
@needs_distributed
@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")
@pytest.mark.parametrize("how", ["ctrl-c", "sigkill"])
def test_an_interrupted_dask_sweep_leaves_no_worker_and_resumes(config, reference, tmp_path, how):
    out, gated = tmp_path / "out", tmp_path / "gated"
    gated.mkdir()
    (gated / "sitecustomize.py").write_text(RUN_GATE)
    env = _env(PYTHONPATH=f"{gated}{os.pathsep}{REPO}", SERVESIM_TEST_GATE=str(tmp_path / "gate"))
    proc = subprocess.Popen([sys.executable, "-m", "servesim", "run", str(config), "--out", str(out), "--executor",
                             "dask", "--jobs", "2"], cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True, preexec_fn=_as_from_a_terminal)
    workers: list[int] = []
    try:
        for line in proc.stdout:
            if "normalized latency" in line:  # a run is done; three are held at the gate, one on a worker
                break
        workers = children(proc.pid)
        assert len(workers) >= 2  # two Dask workers (and multiprocessing's resource tracker)
        if how == "ctrl-c":
            os.killpg(proc.pid, signal.SIGINT)  # as a terminal does: to the whole group, workers included
            assert proc.wait(timeout=60) == 130
            assert proc.stderr.read() == "servesim: interrupted\n"  # no worker's traceback
        else:
            proc.kill()
            proc.wait(timeout=60)
        assert all_exit(workers, within_s=15.0), "workers outlived their parent"
    finally:
        reap(proc, workers)
    assert len(list(out.glob("runs/*/summary.json"))) == 1  # stopped mid-sweep: the gated runs never finished
    again = servesim("run", str(config), "--out", str(out), "--jobs", "1")
    assert again.returncode == 0, again.stderr
    assert "resuming: 1 of 4 runs" in again.stdout and not list(out.rglob(".*.tmp"))
    same_outputs(reference, out)
