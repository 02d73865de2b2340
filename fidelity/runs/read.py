"""One door to a real run: a folder is LLMServingSim's bench layout, a .json file vLLM's benchmark result."""
from __future__ import annotations

from pathlib import Path

from engine.errors import SpecError
from fidelity.runs.bench_layout import is_bench_run, read_bench_run
from fidelity.runs.real_run import RealRun
from fidelity.runs.shipped import run_path
from fidelity.runs.vllm_bench import read_vllm_bench


def read_run(path: str | Path, workload: str | Path | None = None) -> RealRun:
    """The run at `path` (or the shipped run of that name: fidelity/runs/shipped.py); `workload` is the file a bench
    run replayed, where it is not beside or above the run."""
    path = run_path(path)
    if path.is_dir():
        if not is_bench_run(path):
            raise SpecError(str(path), "", "is not a run: a bench run's folder holds vllm/requests.jsonl (or is the "
                            "vllm/ folder); vLLM's benchmark result is a .json file")
        return read_bench_run(path, None if workload is None else _existing(Path(workload)))
    if not path.is_file():
        raise SpecError(str(path), "", "no such file or folder")
    if path.suffix != ".json":
        raise SpecError(str(path), "", "is neither a bench run's folder nor a vllm bench serve result (.json)")
    if workload is not None:
        raise SpecError("command line", "--workload", "is the workload of a bench run's folder; a vllm bench serve "
                        "result replays its own lengths (a workload from --config gives arrivals)")
    return read_vllm_bench(path)


def _existing(path: Path) -> Path:
    if not path.is_file():
        raise SpecError(str(path), "", "no such workload file (--workload)")
    return path
