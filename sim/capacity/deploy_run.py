"""`servesim plan` as one checked path, for the command and the Python API alike: the arguments and the plan config
checked before any probe runs, the search, and its files written once it is done (the probes as they come, so that
a search run again resumes: sim/capacity/probe_store.py).

Writes plan.csv (the fleets that meet the SLO, cheapest first), plan_rejected.csv (every other deployment and why),
plan_pareto.png (cost against a p90 latency) and resolved.yaml (the plan config as read) in the output folder.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.specs.arguments import API, Spelling, path_argument, strings
from sim.capacity.candidates import candidates
from sim.capacity.deploy_config import DeploymentSearch, load_plan
from sim.capacity.deploy_search import search_deployments
from sim.capacity.deploy_tables import REJECTED_COLUMNS, ranked_columns, ranked_rows, rejected_rows
from sim.capacity.pareto_plot import pareto_metric, pareto_plot
from sim.executors.spec import ExecutorSpec
from sim.experiment.output import prepare_out_dir, write_csv, write_text
from sim.experiment.setup import resolved_yaml

if TYPE_CHECKING:
    import pandas as pd

FILES = ("plan.csv", "plan_rejected.csv", "plan_pareto.png", "resolved.yaml")


@dataclass(frozen=True)
class PlanArguments:
    """A plan ready to run: its config checked, its output folder prepared, where its probes go."""
    search: DeploymentSearch
    config: str
    overrides: tuple[str, ...]
    out_dir: Path
    executor: ExecutorSpec


@dataclass
class PlanResult:
    """The two tables, as plan.csv and plan_rejected.csv hold them, and the files written."""
    ranked: pd.DataFrame
    rejected: pd.DataFrame
    files: list[str] = field(default_factory=list)


def plan_arguments(config: Any, overrides: Any, out_dir: Any, executor: Callable[[int], ExecutorSpec],
                   names: Spelling = API) -> PlanArguments:
    """The plan config (with `overrides`, --set strings), the output folder (None: results/<name>) and the workers
    (`executor`: the spec for as many searches as could use a worker each)."""
    extra = strings(overrides, names["overrides"], "['plan.rate=20']")
    path = path_argument(config, names["config"], "a plan config's path")
    search = load_plan(path, extra)
    spec = executor(len(candidates(search)))
    folder = Path("results") / search.base.name if out_dir is None or out_dir == "" \
        else path_argument(out_dir, names["out_dir"], "a folder's path")
    return PlanArguments(search, str(path), tuple(extra), prepare_out_dir(folder, name=names["out_dir"]), spec)


def run_plan(args: PlanArguments, progress: Callable[[str], object]) -> PlanResult:
    """The search on its workers, then its files."""
    import pandas as pd

    search = args.search
    with args.executor.open() as workers:
        outcomes = search_deployments(search, args.out_dir, workers, progress)
    ranked, rejected = ranked_rows(search, outcomes), rejected_rows(search, outcomes)
    result = PlanResult(pd.DataFrame(ranked, columns=list(ranked_columns(search))),
                        pd.DataFrame(rejected, columns=list(REJECTED_COLUMNS)))
    write_csv(result.ranked, args.out_dir / "plan.csv")
    write_csv(result.rejected, args.out_dir / "plan_rejected.csv")
    plot = args.out_dir / "plan_pareto.png"
    if ranked:
        metric = pareto_metric(search.targets)
        limit = next(t.limit for t in search.targets if t.metric == metric)
        pareto_plot(ranked, metric, limit, plot, f"{search.base.model.name} at {search.rate:g} req/s")
    else:
        plot.unlink(missing_ok=True)  # an earlier plan's, which this one does not draw
    raw = {**search.raw, "plan": search.section}
    write_text(resolved_yaml(raw, args.config, args.overrides), args.out_dir / "resolved.yaml")
    result.files = [name for name in FILES if (args.out_dir / name).exists()]
    for line in summary_lines(result):
        progress(line)
    return result


def summary_lines(result: PlanResult) -> list[str]:
    """What the command says of the answer: the cheapest fleet, and the rejections counted by stage."""
    lines = []
    if len(result.ranked):
        best = result.ranked.iloc[0]
        lines.append(f"cheapest: {best['replicas']} x {best['hardware']} x{best['tensor_parallel']} "
                     f"{best['precision']} ({best['engine']}, {best['fleet']}): ${best['usd_per_hour']:,.2f}/h, "
                     f"${best['usd_per_million_output_tokens']:,.3f} per million output tokens")
    else:
        lines.append("no deployment of the search space meets the SLO at that rate (plan_rejected.csv says why)")
    stages = Counter(result.rejected["stage"]) if len(result.rejected) else Counter()
    if stages:
        lines.append("rejected: " + ", ".join(f"{count} {stage}" for stage, count in sorted(stages.items())))
    return lines
