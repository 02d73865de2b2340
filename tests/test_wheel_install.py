"""servesim installs as a wheel and runs from any folder on its shipped models, hardware and ShareGPT lengths,
built with a C compiler (the control plane compiled by mypyc) and without one (pure Python).

`pip wheel .` (no build isolation, so no network), a fresh venv without system site packages, the
wheel installed there with --no-deps --no-index, and `servesim run` from an empty folder. The
venv borrows this interpreter's dependencies (simpy, numpy, pandas, ...) through a .pth file that
lists this environment's site-packages; Python does not run .pth files found in a folder that a
.pth file lists, so an editable install of the repo there stays invisible.
"""
from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

# building and installing two wheels: the slow tier
pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[1]
SHIPPED = [
    "engine/specs/models/opt-13b.yaml",
    "engine/specs/models/opt-175b.yaml",
    "calibrate/hardware_specs/a100-40gb.yaml",
    "calibrate/hardware_specs/h200.yaml",
    "calibrate/hardware_specs/b200.yaml",
    "calibrate/profiles/h200-llama-7b.raw.csv",  # the held-out GPU that judges a transfer
    "calibrate/profiles/cpu-opt-125m.yaml",
    "calibrate/profiles/a100-80gb-linear.yaml",
    "calibrate/profiles/a100-80gb.yaml",  # with the measured attention (docs/attention.md)
    "calibrate/profiles/LICENSE.vidur",  # the licence of the measurements that profile is derived from
    "calibrate/profiles/rtx-pro-6000-server.yaml",  # from LLMServingSim's bundles
    "calibrate/profiles/LICENSE.llmservingsim",
    "calibrate/profiles/carry/held-out-gpus.yaml",  # what prices a GPU nobody measured, by regime
    "calibrate/host_models/vllm-a100-2024-05.yaml",  # cost_model.host's shipped names
    "calibrate/host_models/servesim-cpu-engine.yaml",
    "sim/workload/data/sharegpt_opt.csv",
    "sim/workload/data/sharegpt_opt_chatbot.csv",
    "sim/workload/data/sharegpt_opt_uncut.csv",  # workload.length_filter: model
    "sim/workload/data/arxiv_summarization_llama2.csv",  # with Vidur's licence in its header
    "sim/workload/traces/example_bursty.csv",  # the trace configs/examples/replay.yaml names
    "sim/experiment/acceptance_tables/published.yaml",  # speculative.acceptance: {table: published}
    "sim/reproduce/claims.yaml",  # the claims `servesim reproduce` reads off its figures
    "calibrate/network_tables/h100_dgx.send_recv.csv",  # kv_link: {kind: measured}
    "calibrate/network_tables/LICENSE.vidur",
    "calibrate/gemm_tables/h100_fp8.fit.yaml",  # what prices W8A8 matmuls, and what it was fitted on
    "calibrate/gemm_tables/h100_fp8.csv",
    "calibrate/gemm_tables/LICENSE.vllm",
    # the real runs `servesim validate --run` takes by name, with their source and licence
    "fidelity/runs/data/vllm-0.19-llmservingsim/LICENSE",
    "fidelity/runs/data/vllm-0.19-llmservingsim/SOURCE.md",
    "fidelity/runs/data/vllm-0.19-llmservingsim/README.md",
    "fidelity/runs/data/vllm-0.19-llmservingsim/workloads/sharegpt-llama-3.1-8b-300-sps10.jsonl.gz",
    "fidelity/runs/data/vllm-0.19-llmservingsim/workloads/sharegpt-qwen3-32b-300-sps10.jsonl.gz",
    "fidelity/runs/data/vllm-0.19-llmservingsim/bench/examples/RTX4090/Llama-3.1-8B/vllm/meta.json",
    "fidelity/runs/data/vllm-0.19-llmservingsim/bench/examples/RTX4090/Llama-3.1-8B/vllm/requests.jsonl",
    "fidelity/runs/data/vllm-0.19-llmservingsim/bench/examples/RTX4090/Llama-3.1-8B/vllm/timeseries.csv",
    "fidelity/runs/data/vllm-0.19-llmservingsim/bench/examples/RTXPRO6000/Qwen3-32B/config.json",
    "fidelity/runs/data/vllm-0.19-llmservingsim/bench/examples/RTXPRO6000/Qwen3-32B/validation/summary.txt",
]
CONFIG = """\
name: wheel
model: opt-13b
hardware: a100-40gb
kv_cache_gib: 12
cost_model: roofline
workload:
  dataset: sharegpt
  arrival: poisson
  duration_s: 120
systems: [vllm]
rates: [1.0]
seeds: [0]
warmup_s: 20
"""
NOT_COPIED = shutil.ignore_patterns(".git", ".venv*", "build", "dist", "*.egg-info", "__pycache__", "results",
                                    "*_cache", ".hypothesis", "*.whl", "*.so", "*.pyd", "_compiled.json")


def _run(command: list, cwd: Path, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    result = subprocess.run([str(c) for c in command], cwd=cwd, env=env, capture_output=True, text=True,
                            timeout=timeout)
    assert result.returncode == 0, f"{' '.join(map(str, command))} failed:\n{result.stdout}\n{result.stderr}"
    return result


def _pip_version() -> tuple[int, ...]:
    import pip
    return tuple(int(part) for part in pip.__version__.split(".")[:2] if part.isdigit())


def _clean_env() -> dict:
    """No PYTHONPATH or venv of ours leaks into the fresh venv's processes."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSTARTUP", "PYTHONUSERBASE")}
    env.update(PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1", MPLBACKEND="Agg")
    return env


# with a C compiler, setup.py compiles the control plane (mypyc); without one (CC names none), pure Python
BUILDS = {"compiler": {}, "no-compiler": {"CC": "no-such-c-compiler"}}


@pytest.fixture(scope="module", params=list(BUILDS))
def wheel(tmp_path_factory, request) -> Path:
    if importlib.util.find_spec("pip") is None:
        pytest.skip("pip is not installed in this interpreter, so no wheel can be built or installed")
    if _pip_version() < (22, 3):
        pytest.skip("pip older than 22.3 cannot install into another environment (--python)")
    if importlib.util.find_spec("setuptools") is None:
        pytest.skip("setuptools is not installed (it is in the test extra): `pip wheel --no-build-isolation` "
                    "needs the build backend in this interpreter")
    base = tmp_path_factory.mktemp("wheel")
    # build from a copy, so a stale build/ folder in the checkout cannot slip old files into the wheel
    source = base / "src"
    shutil.copytree(REPO, source, ignore=NOT_COPIED)
    # the compiled build type-checks and compiles the control plane: minutes on a busy 2-core machine
    _run([sys.executable, "-m", "pip", "wheel", ".", "--no-deps", "--no-build-isolation", "-q", "-w", base / "dist"],
         cwd=source, env={**_clean_env(), **BUILDS[request.param]}, timeout=900)
    wheels = list((base / "dist").glob("servesim-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


def test_the_wheel_carries_the_shipped_data(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    missing = [name for name in SHIPPED if name not in names]
    assert not missing, f"not in {wheel.name}: {missing}"
    outside = ("tests/", "configs/", "traces/", "results/", "research/", "benchmarks/")  # not the package's
    assert not [n for n in names if n.startswith(outside)]
    extensions = [n for n in names if n.endswith((".so", ".pyd"))]
    if "py3-none-any" in wheel.name:  # pure Python: no compiler, so no extension and no record of a build
        assert not extensions and "engine/core/_compiled.json" not in names, extensions
    else:
        assert "engine/core/_compiled.json" in names and any(n.startswith("engine/core/batch.") for n in extensions)
        assert "engine/core/batch.py" in names  # the sources travel too: the pure path stays importable


def test_installed_wheel_runs_an_experiment_from_an_empty_folder(wheel, tmp_path):
    env = tmp_path / "venv"
    try:
        venv.EnvBuilder(system_site_packages=False, with_pip=False, symlinks=os.name != "nt").create(env)
    except Exception as err:  # e.g. Debian's python3 without python3-venv
        pytest.skip(f"cannot create a venv here: {err}")
    python = env / ("Scripts" if os.name == "nt" else "bin") / "python"
    clean = _clean_env()
    # pip from this interpreter installs into the venv (pip >= 22.3: --python); before the .pth below,
    # so pip sees an empty environment
    _run([sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "--no-index", "-q", wheel],
         cwd=tmp_path, env=clean)
    site = Path(_run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                     cwd=tmp_path, env=clean).stdout.strip())
    ours = dict.fromkeys(sysconfig.get_paths()[k] for k in ("purelib", "platlib"))
    (site / "_servesim_test_dependencies.pth").write_text("".join(f"{p}\n" for p in ours))

    work = tmp_path / "empty"
    work.mkdir()
    (work / "q.yaml").write_text(CONFIG)
    show = ("import servesim, sim, engine, calibrate; "
            "print(servesim.__file__, sim.__file__, engine.__file__, calibrate.__file__)")
    where = _run([python, "-c", show],
                 cwd=work, env=clean).stdout.split()
    assert all(Path(f).resolve().is_relative_to(site.resolve()) for f in where), where

    scripts = python.parent
    version = _run([scripts / "servesim", "--version"], cwd=work, env=clean).stdout
    expected = "pure Python" if "py3-none-any" in wheel.name else "compiled (mypyc)"
    assert f"control plane: {expected}" in version, version
    shipped = ("from fidelity.runs.read import read_run; "
               "run = read_run('vllm-0.19-llmservingsim/RTX4090/Llama-3.1-8B'); "
               "print(len(run.requests), run.workload.sha256, run.source)")
    count, digest, source = _run([python, "-c", shipped], cwd=work, env=clean).stdout.split()
    assert (count, digest[:8]) == ("300", "05e48b32") and Path(source).resolve().is_relative_to(site.resolve())
    result = _run([scripts / "servesim", "run", "q.yaml"], cwd=work, env=clean, timeout=120)
    summary = work / "results" / "wheel" / "summary.csv"
    assert summary.is_file(), result.stdout
    text = summary.read_text()
    assert "opt-13b,a100-40gb" in text  # the shipped lengths:
    assert "sharegpt (sim/workload/data/sharegpt_opt.csv)" in text
    assert "stand-in" not in text
