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

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # names for the annotations only: nothing heavy loads with the package
    import pandas as pd

    from fidelity.validate import ValidationResult
    from sim.capacity.deploy_run import PlanResult
    from sim.experiment.config import Experiment
    from sim.experiment.run import RunResult

__all__ = ["load_experiment", "run", "simulate", "capacity", "split_capacity", "concurrency_capacity", "plan",
           "reproduce", "validate"]


def load_experiment(path: str | Path, overrides: Sequence[str] = ()) -> Experiment:
    """An experiment config, read and checked as `servesim run` reads it.

    `overrides` are `--set` strings: dotted keys, values parsed as YAML (a lone str is one override;
    None is none). A bad config or argument raises `engine.errors.SpecError` naming the file and
    the key, or the argument, and what is valid.

    Example::

        exp = servesim.load_experiment("configs/quickstart.yaml", ["rates=[1,2]"])
        print(exp.model.name, [s.name for s in exp.systems], exp.rates)
    """
    from engine.specs.arguments import Spelling
    from sim.experiment.checked import loaded

    return loaded(path, overrides, Spelling(config="path"), loaded_ok=False)


def _experiment(config: str | Path | Experiment, overrides: Sequence[str]) -> Experiment:
    """`config` and `overrides`, checked as run's and simulate's are (capacity's helper)."""
    from sim.experiment.checked import loaded

    return loaded(config, overrides)


def run(config: str | Path | Experiment, out_dir: str | Path | None, *, overrides: Sequence[str] = (), jobs: int = 1,
        iterations: str = "parquet", progress=print) -> pd.DataFrame:
    """Every system x rate x seed of an experiment (`servesim run`, without the plots).

    Each run's files go to `out_dir/runs/<system>_rate<r>_seed<s>/` as they finish (`out_dir` None:
    `results/<name>`, as the command's), and a call with the same config resumes: runs already done
    are read back, not simulated again. Returns the summary, one row per run, in `summary.csv`'s
    columns (also written to `out_dir/summary.csv`). `jobs` is the processes to use (0: one per core;
    never more than there are runs); `iterations` is `parquet`, `csv` or `none`; `progress` receives
    each progress line (None: none). Every argument is checked, as the command checks its options,
    before anything is written: a bad one raises `SpecError` naming it.

    Example::

        summary = servesim.run("configs/quickstart.yaml", "results/qs", overrides=["rates=[1]"])
        print(summary[["system", "rate", "normalized_latency"]])
    """
    from engine.specs.arguments import callback
    from sim.experiment.checked import run_arguments
    from sim.experiment.output import write_columns_csv, write_text
    from sim.experiment.sweep import cost_models_text, summary_columns, summary_frame, sweep_rows

    report = callback(progress, "progress")
    checked = run_arguments(config, overrides, out_dir, jobs, iterations)
    rows = sweep_rows(checked.exp, checked.out_dir, checked.executor, progress=report,
                      iterations=checked.iterations)
    write_columns_csv(summary_columns(rows), checked.out_dir / "summary.csv")  # as the command writes it
    summary = summary_frame(rows)
    write_text(cost_models_text(rows), checked.out_dir / "cost_models.txt")
    return summary


def simulate(config: str | Path | Experiment, *, system: str | None = None, rate: float | None = None,
             seed: int | None = None, overrides: Sequence[str] = (), concurrency: int | None = None) -> RunResult:
    """One run, in memory: one system serving the trace of one rate and seed.

    `system` is a display name (`"vLLM"`) or the system's key in the config (`"vllm"`); `rate`, `seed` and
    `concurrency` (the client's gate) are among the experiment's `rates`, `seeds` and `concurrencies`. By default
    the experiment's first of each.
    Returns a `RunResult`: `summary` (the run's row of `summary.csv`, a dict), `requests` and
    `iterations` (pandas frames in the schemas of `requests.csv.gz` and `iterations.parquet`).
    Nothing is written. A bad argument raises `SpecError` naming it.

    Example::

        one = servesim.simulate("configs/quickstart.yaml", system="vllm", rate=2.0)
        print(one.summary["normalized_latency"], len(one.iterations))
    """
    from sim.experiment.checked import simulate_arguments
    from sim.experiment.run import run_one

    chosen = simulate_arguments(config, system, rate, seed, overrides, concurrency)
    return run_one(chosen.exp, chosen.system, chosen.rate, chosen.seed)


def capacity(config: str | Path | Experiment, target: str | Sequence[str] | Mapping[str, float], *,
             rate: float | None = None, seed: int = 0, tolerance: float = 0.05, overrides: Sequence[str] = (),
             jobs: int = 1, progress=print) -> pd.DataFrame:
    """The highest rate per replica that meets latency targets, per system (`servesim capacity`).

    `target` is `METRIC=LIMIT`, e.g. `"normalized_latency=0.1"` (the metrics are
    `sim.capacity.targets.TARGET_METRICS`), or several (a list, a comma list, or a mapping {METRIC: LIMIT}):
    then each target's rate and the rate that meets them all (metric `all`). With a total `rate` (req/s) it also
    finds the replicas that rate needs. A run meets a target only if it served its load: not saturated, no request
    dropped. Returns a frame in `capacity.csv`'s columns; a rate of 0 means no probed rate met the target,
    and `limited_by` says what failed. `jobs` is the processes the probes run on (0: one per core);
    `progress` receives each probe's line as the command prints it, then what the command says of the
    answers (None: none). The arguments are checked as the command checks them (SpecError naming the
    argument) before any probe runs. Nothing is written.

    Example::

        table = servesim.capacity("configs/quickstart.yaml", "normalized_latency=0.1", rate=20)
        print(table[["system", "max_rate_per_replica_rps", "replicas_needed"]])
    """
    from engine.specs.arguments import callback
    from sim.capacity.plan import capacity_frame, colocated, plan_capacity, run_capacity

    report = callback(progress, "progress")
    asked = _jobs(jobs)
    exp = colocated(_experiment(config, overrides), False, "servesim.split_capacity searches its prefill:decode splits")
    plan = plan_capacity(exp, target, rate, seed, tolerance)
    with _executor(asked, exp).open() as workers:
        result = run_capacity(plan, workers, report)
    for line in result.notes:
        report(line)
    return capacity_frame(result.rows)


def split_capacity(config: str | Path | Experiment, target: str | Sequence[str] | Mapping[str, float], *,
                   splits: int, seed: int = 0,
                   tolerance: float = 0.05, overrides: Sequence[str] = (), jobs: int = 1,
                   progress=print) -> pd.DataFrame:
    """Disaggregated serving's capacity (`servesim capacity --splits N`): every prefill:decode split of at most
    `splits` replicas in all, each with the rate it holds under every target at once and that rate per GPU,
    beside the colocated replica's (docs/disaggregated.md). Returns a frame in `capacity_split.csv`'s columns.
    `jobs` is the processes the probes run on (0: one per core); `progress` receives the lines the command
    prints under its splits' header, that line first (None: none). The arguments, and the splits as the search
    will run them, are checked as the command checks them (SpecError naming what is wrong) before any probe
    runs. Nothing is written.

    Example::

        table = servesim.split_capacity("configs/examples/split_llama3_70b_h100.yaml",
                                        ["ttft_p90_s=2", "tpot_p90_s=0.05"], splits=3)
    """
    import pandas as pd

    from engine.specs.arguments import callback
    from sim.capacity.plan import plan_capacity
    from sim.capacity.split import check_split_search, check_splits, header
    from sim.capacity.split import split_capacity as search_splits

    report = callback(progress, "progress")
    asked = _jobs(jobs)
    total = check_splits(splits, "splits")
    exp = _experiment(config, overrides)
    plan = plan_capacity(exp, target, None, seed, tolerance)
    check_split_search(exp, total)
    report(header(total))
    with _executor(asked, exp).open() as workers:
        return pd.DataFrame(search_splits(plan, total, workers, report))


def plan(config: str | Path, out_dir: str | Path | None = None, *, overrides: Sequence[str] = (), jobs: int = 1,
         progress=print) -> PlanResult:
    """The cheapest fleet that serves a total rate under a joint SLO, and why every other deployment is not it
    (`servesim plan`; docs/deployment-search.md).

    `config` is a plan config: an experiment with a `plan:` section (the rate, the targets, the price table and the
    GPUs, tensor parallelisms, batch limits and number formats to try); `overrides` are `--set` strings, e.g.
    `"plan.rate=20"`. Writes the command's files under `out_dir` (None: `results/<name>`), `plan.csv`,
    `plan_rejected.csv`, `plan_pareto.png` and `resolved.yaml`, keeping every probe in `plan_probes/`: a call with
    the same config resumes, simulating nothing twice. `jobs` is the processes the searches run on (0: one per
    core); `progress` receives each line the command prints (None: none). The config, the prices and the arguments
    are checked as the command checks them (a SpecError naming the file and key, or the argument) before any probe
    runs. Returns a `PlanResult`: `ranked` (plan.csv: the fleets that meet the SLO, cheapest first) and `rejected`
    (plan_rejected.csv: every other deployment, its stage and reason).

    Example::

        result = servesim.plan("configs/examples/plan_llama3_70b.yaml", "results/plan", overrides=["plan.rate=20"])
        print(result.ranked[["rank", "hardware", "tensor_parallel", "replicas", "usd_per_hour"]])
    """
    from engine.specs.arguments import callback
    from sim.capacity.deploy_run import plan_arguments, run_plan

    report = callback(progress, "progress")
    asked = _jobs(jobs)
    checked = plan_arguments(config, overrides, out_dir, lambda runs: _pool(asked, runs))
    return run_plan(checked, report)


def _pool(jobs: int, runs: int):
    """Local processes, as the command's --jobs gives them (0: one per core), at most one a search."""
    from engine.specs.arguments import per_core
    from sim.executors.spec import ExecutorSpec

    return ExecutorSpec("process", per_core(jobs, runs))


def concurrency_capacity(config: str | Path | Experiment, target: str | Sequence[str] | Mapping[str, float], *,
                         seed: int = 0, overrides: Sequence[str] = (), jobs: int = 1, progress=print) -> pd.DataFrame:
    """The highest max_concurrency that meets latency targets, per system (`servesim capacity --concurrency`):
    every request at 0 s (rate inf) and a client's gate of that many in flight, each sent as another finishes, as
    vLLM's `bench serve --max-concurrency` drives a server; the answer given as the concurrency and as the request
    rate it served. `target` as `capacity`'s; the workload needs `num_requests` (a replay: its trace's), which the
    concurrency never passes. Returns a frame in `capacity_concurrency.csv`'s columns. `jobs` is the processes the
    probes run on (0: one per core); `progress` receives each probe's line, then the command's notes on the
    answers (None: none). The arguments are checked as the command checks them before any probe runs. Nothing is
    written.

    Example::

        table = servesim.concurrency_capacity("configs/quickstart.yaml", "ttft_p90_s=1",
                                              overrides=["workload={dataset: sharegpt, num_requests: 300}"])
        print(table[["system", "max_concurrency", "request_rate_rps"]])
    """
    from engine.specs.arguments import callback
    from sim.capacity.concurrency import concurrency_frame, plan_concurrency, run_concurrency

    report = callback(progress, "progress")
    asked = _jobs(jobs)
    plan = plan_concurrency(_experiment(config, overrides), target, seed)
    with _executor(asked, plan.exp).open() as workers:
        result = run_concurrency(plan, workers, report)
    for line in result.notes:
        report(line)
    return concurrency_frame(result.rows)


def _jobs(value: object) -> int:
    from engine.specs.arguments import jobs

    return jobs(value, "jobs")


def _executor(jobs: int, exp: Experiment):
    """A capacity search's local processes, as the command's --jobs gives them (0: one per core)."""
    from engine.specs.arguments import per_core
    from sim.capacity.plan import probe_runs
    from sim.executors.spec import ExecutorSpec

    return ExecutorSpec("process", per_core(jobs, probe_runs(exp)))


def reproduce(figures: Sequence[str] = ("all",), out_dir: str | Path = "results/reproduce", *, quick: bool = False,
              jobs: int = 1, progress=print) -> pd.DataFrame:
    """The paper's figures and its claims against the simulation (`servesim reproduce`).

    `figures` are names such as `"fig12"` and `"fig19"` (a lone str is one name), or `"all"` (as are
    None and an empty list, as for the command given no names). `quick`
    (True or False) cuts every trace to 5 minutes and keeps at most 4 rates per curve (every output
    says so). `jobs` is the processes to use (0: one per core); `progress` receives each progress line
    (None: none). Every argument is checked, as the command checks its own, before anything is
    written: a bad one raises `SpecError` naming it. Writes each figure's folder and
    `paper_vs_sim.md`/`.csv` under `out_dir`, resuming runs already done, and returns the claims
    table, one row per claim.

    Example::

        table = servesim.reproduce(["fig19"], "results/reproduce", quick=True)
        print(table[["claim", "simulated", "lands"]])
    """
    from engine.specs.arguments import callback
    from sim.reproduce.checked import reproduce_arguments
    from sim.reproduce.runner import reproduce as reproduce_figures

    report = callback(progress, "progress")
    checked = reproduce_arguments(figures, out_dir, quick, jobs)
    return reproduce_figures(checked.figures, checked.out_dir, checked.scale, jobs=checked.jobs, progress=report)


def validate(config: str | Path, out_dir: str | Path | None = None, *, overrides: Sequence[str] = (),
             exact: bool = False, log=print) -> ValidationResult:
    """Replay the same traces on the real engine and in the simulator, and compare (`servesim validate`).

    Needs the `engine` extra (torch). `config` is a validation YAML (`configs/validation/`);
    `overrides` are `--set` strings such as `"validation.repeats=1"`. `exact` (True or False) only
    checks that the simulator, fed the engine's measured iteration times, makes the identical
    schedule. `log` receives each progress line (None: none). The arguments and the config's device
    are checked, as the command checks them, before anything is written: a bad one raises `SpecError`
    naming it. Writes the validation's files under `out_dir` (default `results/validation/<name>/`)
    and returns a `ValidationResult` (`summary`, `fidelity`, `sustainable`, `exact` frames; `all_exact`).

    Example::

        result = servesim.validate("configs/validation/cpu-opt-125m.yaml", exact=True)
        print(result.all_exact)
    """
    from engine.specs.arguments import callback
    from fidelity.checked import validate_arguments

    report = callback(log, "log")
    cfg, folder, exact = validate_arguments(config, out_dir, overrides, exact)
    from fidelity.validate import validate as compare

    return compare(cfg, folder, exact_only=exact, log=report)
