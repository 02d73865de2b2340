"""vLLM V1's engine model: its serial host work fitted on the shipped real runs, each run left out in turn, and the
shipped file checked against a fresh fit.

    python benchmarks/cost_models/engine_model.py            # leave one run out; then the fit on all four
    python benchmarks/cost_models/engine_model.py --write    # and write calibrate/host_models/vllm-0.19.yaml

The engine model (calibrate/host_models/vllm-0.19.yaml) is vLLM 0.19's V1 engine: its host terms cited from its
developers' pull requests (vllm-v1-2026's), overlapping the GPU under asynchronous scheduling, CUDA graphs at its
capture sizes, its custom all-reduce for tensor parallelism's small messages, and one term fitted here: the host
work that stays in series (fidelity/runs/engine_fit.py). Each run replays on its own GPU's device clock (the
measured profile of that GPU where servesim ships one, else the A100 clock carried:
calibrate/cost_models/default_clock.py) and V1's scheduler. Prints, per run held out, the mean and
p90 of TTFT, TPOT and E2E latency against the real run beside the target (5%), and the fit's coefficients. Prints
numbers; fails on none.
"""
from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from calibrate.parts.host_model import (  # noqa: E402
    EngineMechanisms,
    HostModel,
    host_model_path,
    load_host_model,
    save_host_model,
)
from fidelity.runs.engine_fit import JUDGED, fit, fit_run, leave_one_run_out, with_serial  # noqa: E402
from fidelity.runs.shipped import shipped_runs  # noqa: E402

TARGET = 0.05
NAME = "vllm-0.19"
CITED = "vllm-v1-2026"


def base_model() -> HostModel:
    """The engine model before the fit: vLLM V1's cited host terms, overlapping, with CUDA graphs."""
    cited = load_host_model(CITED)
    return HostModel(
        NAME,
        "vLLM 0.19's V1 engine (asynchronous scheduling, CUDA graphs, FULL_AND_PIECEWISE): its host work as its "
        "developers timed it, overlapping the GPU's, and the work that stays in series fitted on four real runs",
        f"{cited.source}. The serial term: fitted on LLMServingSim's four public vLLM 0.19 runs (casys-kaist/"
        "LLMServingSim at 5daddb21, MIT; fidelity/runs/data/) by benchmarks/cost_models/engine_model.py",
        f"{cited.licence}; the runs MIT (fidelity/runs/data/vllm-0.19-llmservingsim/LICENSE)",
        {term: dict(c) for term, c in cited.terms.items()},
        engine=EngineMechanisms(overlap=True, cuda_graphs=True, custom_all_reduce=True))


def line(name: str, errors: dict) -> str:
    cells = " ".join(f"{errors[key] * 100:+7.1f}%" for key in JUDGED)
    within = sum(abs(errors[key]) <= TARGET for key in JUDGED)
    return f"  {name:<48} {cells}   {within}/{len(JUDGED)} within"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help=f"write calibrate/host_models/{NAME}.yaml")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    base = base_model()
    runs = [fit_run(name, path) for name, path in shipped_runs().items()]
    print(f"{len(runs)} real runs; judged: " + ", ".join(f"{m} {s}" for m, s in JUDGED) + f"; target {TARGET:.0%}")
    print("each run held out of the fit on the others:")
    folds = leave_one_run_out(runs, base)
    for fold in folds:
        print(line(fold.held_out, fold.errors) + f"   fitted {fold.coefficients}")
    coefficients = fit(runs, base)
    fitted = with_serial(base, coefficients)
    fitted = replace(fitted, heldout={
        "method": "leave one real run out: the serial term fitted on the other three runs, errors on the fourth "
                  "(signed, simulated vs real)",
        "runs": {fold.held_out: {f"{m}_{s}": round(fold.errors[(m, s)], 4) for m, s in JUDGED} for fold in folds}})
    print(f"fitted on all {len(runs)}: {coefficients}")
    shipped = host_model_path(NAME) if (ROOT / "calibrate" / "host_models" / f"{NAME}.yaml").exists() else None
    if args.write:
        path = save_host_model(fitted, ROOT / "calibrate" / "host_models" / f"{NAME}.yaml",
                               "python benchmarks/cost_models/engine_model.py --write")
        print(f"wrote {path}")
    elif shipped is not None:
        same = load_host_model(shipped).to_dict() == fitted.to_dict()
        print(f"the shipped {shipped.name} is {'what a fresh fit writes' if same else 'NOT what a fresh fit writes'}")
    print(f"wall_s={time.perf_counter() - started:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
