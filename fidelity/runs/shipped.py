"""The real runs servesim ships (fidelity/runs/data/): found beside this package in any install, a wheel's too."""
from __future__ import annotations

from pathlib import Path

DATA = Path(__file__).resolve().parent / "data"
BENCH_EXAMPLES = "bench/examples"


def shipped_runs() -> dict[str, Path]:
    """Every shipped bench run by its name: <collection>/<GPU>/<model>, e.g.
    vllm-0.19-llmservingsim/RTX4090/Llama-3.1-8B."""
    runs = {}
    for collection in sorted(p for p in DATA.iterdir() if p.is_dir()):
        for run in sorted((collection / BENCH_EXAMPLES).glob("*/*/vllm")):
            gpu, model = run.parent.parent.name, run.parent.name
            runs[f"{collection.name}/{gpu}/{model}"] = run.parent
    return runs


def run_path(path_or_name: str | Path) -> Path:
    """A path as given, or, where nothing is there, the shipped run of that name."""
    path = Path(path_or_name)
    if path.exists():
        return path
    return shipped_runs().get(str(path_or_name).strip("/"), path)
