"""servesim from Python: the commands' work, for notebooks and scripts.

Each function does what one `servesim` command does and returns what the command prints or writes,
as a value. Importing this package is cheap: the simulator (SimPy, numpy, pandas), the calibration
and the real engine (torch) load only when a function that needs them runs.

>>> import servesim
>>> exp = servesim.load_experiment("configs/quickstart.yaml", ["rates=[1]", "workload.duration_s=60"])
>>> one = servesim.simulate(exp, system="vllm")          # one trace, in memory
>>> summary = servesim.run(exp, "results/quick-look")    # every system x rate x seed, written to disk
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # names for the annotations only: nothing heavy loads with the package
    import pandas as pd

    from fidelity.validate import ValidationResult
    from sim.experiment.config import Experiment
    from sim.experiment.run import RunResult

__all__ = ["load_experiment", "run", "simulate", "capacity", "reproduce", "validate"]


def load_experiment(path: str | Path, overrides: Sequence[str] = ()) -> Experiment:
    """An experiment config, read and checked as `servesim run` reads it.

    `overrides` are `--set` strings: dotted keys, values parsed as YAML. A bad config raises
    `engine.specs.errors.SpecError` naming the file, the key and what is valid.

    Example::

        exp = servesim.load_experiment("configs/quickstart.yaml", ["rates=[1,2]"])
        print(exp.model.name, [s.name for s in exp.systems], exp.rates)
    """
    from sim.experiment.config import load_experiment as load

    return load(path, list(overrides))


def _experiment(config: str | Path | Experiment, overrides: Sequence[str]) -> Experiment:
    if isinstance(config, (str, Path)):
        return load_experiment(config, overrides)
    if overrides:
        raise ValueError("overrides apply to a config file; pass the path, or load_experiment(path, overrides)")
    return config


def run(config: str | Path | Experiment, out_dir: str | Path, *, overrides: Sequence[str] = (), jobs: int = 1,
        iterations: str = "parquet", progress=print) -> pd.DataFrame:
    """Every system x rate x seed of an experiment (`servesim run`, without the plots).

    Each run's files go to `out_dir/runs/<system>_rate<r>_seed<s>/` as they finish, and a call
    with the same config resumes: runs already done are read back, not simulated again. Returns
    the summary, one row per run, in `summary.csv`'s columns (also written to
    `out_dir/summary.csv`). `jobs` is the processes to use; `iterations` is `parquet`, `csv`
    or `none`; `progress` receives each progress line.

    Example::

        summary = servesim.run("configs/quickstart.yaml", "results/qs", overrides=["rates=[1]"])
        print(summary[["system", "rate", "normalized_latency"]])
    """
    from sim.executors.pool import ExecutorSpec
    from sim.experiment.output import write_csv
    from sim.experiment.sweep import sweep

    exp = _experiment(config, overrides)
    summary = sweep(exp, Path(out_dir), ExecutorSpec("process", max(1, jobs)), progress=progress,
                    iterations=iterations)
    write_csv(summary, Path(out_dir) / "summary.csv")
    return summary


def _one(named: Sequence, name: str | None, what: str, label=lambda x: x):
    if name is None:
        return named[0]
    for item in named:
        if label(item) == name:
            return item
    raise ValueError(f"{what} {name!r} is not in the experiment; it has {[label(i) for i in named]}")


def simulate(config: str | Path | Experiment, *, system: str | None = None, rate: float | None = None,
             seed: int | None = None, overrides: Sequence[str] = ()) -> RunResult:
    """One run, in memory: one system serving the trace of one rate and seed.

    By default the experiment's first system, first rate and first seed. Returns a `RunResult`:
    `summary` (the run's row of `summary.csv`, a dict), `requests` and `iterations` (pandas
    frames in the schemas of `requests.csv.gz` and `iterations.parquet`). Nothing is written.

    Example::

        one = servesim.simulate("configs/quickstart.yaml", system="vllm", rate=2.0)
        print(one.summary["normalized_latency"], len(one.iterations))
    """
    from sim.experiment.run import run_one

    exp = _experiment(config, overrides)
    chosen = _one(exp.systems, system, "system", lambda s: s.name)
    return run_one(exp, chosen, _one(exp.rates, rate, "rate"), _one(exp.seeds, seed, "seed"))


def capacity(config: str | Path | Experiment, target: str | Sequence[str], *, rate: float | None = None,
             seed: int = 0, tolerance: float = 0.05, overrides: Sequence[str] = ()) -> pd.DataFrame:
    """The highest rate per replica that meets latency targets, per system (`servesim capacity`).

    `target` is `METRIC=LIMIT`, e.g. `"normalized_latency=0.1"` (the metrics are
    `sim.capacity.targets.TARGET_METRICS`), or several (a list, or a comma list): then each target's rate
    and the rate that meets them all (metric `all`). With a total `rate` (req/s) it also finds the
    replicas that rate needs. A run meets a target only if it served its load: not saturated, no request
    dropped. Returns a frame in `capacity.csv`'s columns; a rate of 0 means no probed rate met the target,
    and `limited_by` says what failed. The arguments are checked as the command checks them (SpecError
    naming the argument). Nothing is written.

    Example::

        table = servesim.capacity("configs/quickstart.yaml", "normalized_latency=0.1", rate=20)
        print(table[["system", "max_rate_per_replica_rps", "replicas_needed"]])
    """
    import pandas as pd

    from sim.capacity.plan import plan_capacity, run_capacity

    plan = plan_capacity(_experiment(config, overrides), target, rate, seed, tolerance)
    return pd.DataFrame(run_capacity(plan).rows)


def reproduce(figures: Sequence[str] = ("all",), out_dir: str | Path = "results/reproduce", *, quick: bool = False,
              jobs: int = 1, progress=print) -> pd.DataFrame:
    """The paper's figures and its claims against the simulation (`servesim reproduce`).

    `figures` are names such as `"fig12"` and `"fig19"`, or `"all"`. `quick` cuts every trace to
    5 minutes and keeps at most 4 rates per curve (every output says so). Writes each figure's
    folder and `paper_vs_sim.md`/`.csv` under `out_dir`, resuming runs already done, and returns
    the claims table, one row per claim.

    Example::

        table = servesim.reproduce(["fig19"], "results/reproduce", quick=True)
        print(table[["claim", "simulated", "lands"]])
    """
    from sim.reproduce import scale
    from sim.reproduce.runner import reproduce as reproduce_figures

    return reproduce_figures(list(figures), Path(out_dir), scale.QUICK if quick else scale.PAPER,
                             jobs=max(1, jobs), progress=progress)


def validate(config: str | Path, out_dir: str | Path | None = None, *, overrides: Sequence[str] = (),
             exact: bool = False, log=print) -> ValidationResult:
    """Replay the same traces on the real engine and in the simulator, and compare (`servesim validate`).

    Needs the `engine` extra (torch). `config` is a validation YAML (`configs/validation/`);
    `overrides` are `--set` strings such as `"validation.repeats=1"`. `exact` only checks that the
    simulator, fed the engine's measured iteration times, makes the identical schedule. Writes the
    validation's files under `out_dir` (default `results/validation/<name>/`) and returns a
    `ValidationResult` (`summary`, `fidelity`, `sustainable`, `exact` frames; `all_exact`).

    Example::

        result = servesim.validate("configs/validation/cpu-opt-125m.yaml", exact=True)
        print(result.all_exact)
    """
    from engine.runtime import require_torch

    require_torch("servesim.validate")
    from fidelity.config import load_validation
    from fidelity.validate import default_out_dir
    from fidelity.validate import validate as compare

    cfg = load_validation(config, list(overrides))
    return compare(cfg, Path(out_dir) if out_dir else default_out_dir(cfg), exact_only=exact, log=log)
