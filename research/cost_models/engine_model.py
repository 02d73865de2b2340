"""vLLM V1's engine model: its serial host work fitted on the shipped real runs, each run left out in turn, and the
shipped file checked against a fresh fit.

    python research/cost_models/engine_model.py            # leave one run out; then the fit on all four
    python research/cost_models/engine_model.py --write    # and write calibrate/host_models/vllm-0.19.yaml

The engine model (calibrate/host_models/vllm-0.19.yaml) is vLLM 0.19's V1 engine: its host terms cited from its
developers' pull requests (vllm-v1-2026's), overlapping the GPU under asynchronous scheduling, CUDA graphs at its
capture sizes, its custom all-reduce for tensor parallelism's small messages, and one term fitted here where it
earns its place: the host work that stays in series (fidelity/runs/engine_fit.py), shipped only if, fitted on the
other runs, it lowers the held-out runs' mean |error| against the model without it. Each run replays on its own
GPU's device clock (the measured profile of that GPU where servesim ships one, else the A100 clock carried:
calibrate/cost_models/default_clock.py) and V1's scheduler. Prints, per run held out, the mean and
p90 of TTFT, TPOT and E2E latency against the real run beside the target (5%), and the fit's coefficients. Prints
numbers; fails on none.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from calibrate.parts.host_model import EngineMechanisms, HostModel, load_host_model, save_host_model  # noqa: E402
from fidelity.runs.engine_fit import (  # noqa: E402
    JUDGED,
    fit,
    fit_run,
    judged_errors,
    leave_one_run_out,
    with_serial,
)
from fidelity.runs.shipped import shipped_runs  # noqa: E402

TARGET = 0.05
NAME = "vllm-0.19"
CITED = "vllm-v1-2026"


def base_model() -> HostModel:
    """The engine model before the fit: vLLM V1's cited host terms, overlapping, with CUDA graphs."""
    cited = load_host_model(CITED)
    return HostModel(
        NAME,
        "vLLM 0.19's V1 engine (asynchronous scheduling, CUDA graphs, FULL_AND_PIECEWISE, custom all-reduce): its "
        "host work as its developers timed it, overlapping the GPU's; a serial term fitted on four real runs only "
        "where it lowers their held-out error (heldout says whether it did)",
        f"{cited.source}. The serial term: fitted on LLMServingSim's four public vLLM 0.19 runs (casys-kaist/"
        "LLMServingSim at 5daddb21, MIT; fidelity/runs/data/) by research/cost_models/engine_model.py",
        f"{cited.licence}; the runs MIT (fidelity/runs/data/vllm-0.19-llmservingsim/LICENSE)",
        {term: dict(c) for term, c in cited.terms.items()},
        engine=EngineMechanisms(overlap=True, cuda_graphs=True, custom_all_reduce=True))


def line(name: str, errors: dict) -> str:
    cells = " ".join(f"{errors[key] * 100:+7.1f}%" for key in JUDGED)
    within = sum(abs(errors[key]) <= TARGET for key in JUDGED)
    return f"  {name:<48} {cells}   {within}/{len(JUDGED)} within"


def mean_abs(errors_by_run: dict[str, dict]) -> float:
    return sum(abs(e) for errors in errors_by_run.values() for e in errors.values()) / sum(
        len(errors) for errors in errors_by_run.values())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help=f"write calibrate/host_models/{NAME}.yaml")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    base = base_model()
    runs = [fit_run(name, path) for name, path in shipped_runs().items()]
    print(f"{len(runs)} real runs; judged: " + ", ".join(f"{m} {s}" for m, s in JUDGED) + f"; target {TARGET:.0%}")
    with tempfile.TemporaryDirectory() as folder:
        unfitted = save_host_model(base, Path(folder) / "base.yaml")
        without = {run.name: judged_errors(run, unfitted) for run in runs}
    print("without a serial term (nothing fitted on the runs):")
    for name, errors in without.items():
        print(line(name, errors))
    print("the serial term fitted on the other runs, each run held out:")
    folds = leave_one_run_out(runs, base)
    with_term = {fold.held_out: fold.errors for fold in folds}
    for fold in folds:
        print(line(fold.held_out, fold.errors) + f"   fitted {fold.coefficients}")
    held, bare = mean_abs(with_term), mean_abs(without)
    fitted = fit(runs, base) if held < bare else {}
    print(f"held-out mean |error|: {held:.1%} with the fitted term, {bare:.1%} without: "
          + (f"the term fitted on all {len(runs)} ships: {fitted}" if fitted else "no serial term ships"))
    shipped = replace(with_serial(base, fitted), heldout={
        "method": "leave one real run out: the serial term fitted on the other runs (fidelity/runs/engine_fit.py), "
                  "its errors on the run held out, beside the errors without the term; the term ships only where "
                  "its held-out mean |error| is the lower (signed errors, simulated vs real)",
        "heldout_mean_abs_error": {"with_fitted_term": round(held, 4), "without": round(bare, 4)},
        "serial_term": "fitted" if fitted else "none: fitted on the other runs it made the held-out runs worse",
        "runs_held_out_with_term": {name: _rounded(errors) for name, errors in with_term.items()},
        "runs_without_term": {name: _rounded(errors) for name, errors in without.items()}})
    path = ROOT / "calibrate" / "host_models" / f"{NAME}.yaml"
    if args.write:
        save_host_model(shipped, path, "python research/cost_models/engine_model.py --write")
        print(f"wrote {path}")
    else:
        same = path.exists() and load_host_model(path).to_dict() == shipped.to_dict()
        print(f"the shipped {path.name} is {'what a fresh fit writes' if same else 'NOT what a fresh fit writes'}")
    print(f"wall_s={time.perf_counter() - started:.1f}")
    return 0


def _rounded(errors: dict) -> dict:
    return {f"{metric}_{stat}": round(value, 4) for (metric, stat), value in errors.items()}


if __name__ == "__main__":
    sys.exit(main())
