"""`servesim capacity` as one checked path, for the command and the Python API alike.

`plan_capacity` checks every argument before anything runs (the same refusals, naming the same argument,
from either door); `run_capacity` runs the searches and returns the table, the probes and what to say of
them. With one target a system has one search: its rate per replica, then the replicas a total rate needs.
With several, each target has its own rate search, and a joint one finds the rate that meets them all
(goodput under the joint SLO), for which the replicas are found. The searches of a system share their
probes: a run is judged against every target at once.
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from engine.core.system import SystemSpec
from engine.errors import SpecError
from engine.specs.arguments import API, Spelling
from engine.specs.checks import number, option, positive
from sim.capacity.saturation import PACE_KEYS
from sim.capacity.search import (
    MIN_REL_TOL,
    Probe,
    capacity_search,
    check_searchable,
    job,
    rate_ceiling,
    run_jobs,
)
from sim.capacity.targets import Target, judge, label, parse_targets
from sim.executors.workers import Workers
from sim.experiment.config import MAX_REQUESTS, Experiment
from sim.experiment.setup import setup_of
from sim.experiment.sweep import cost_models_text

if TYPE_CHECKING:
    import pandas as pd

ALL = "all"  # the metric column of the joint row
HELD_THROUGHOUT = "held at every rate probed"  # limited_by where no probe was over the target
MIN_MEASURED = 100  # fewer requests behind an answer, and its p90 (p99) rests on its top few: said beside it


@dataclass(frozen=True)
class CapacityPlan:
    """What to search, checked: the experiment, its targets, an optional total rate, the seed, the tolerance."""
    exp: Experiment
    targets: tuple[Target, ...]
    rate: float | None = None
    seed: int = 0
    tolerance: float = 0.05

    @property
    def ceiling(self) -> float:
        return rate_ceiling(self.exp)

    @property
    def start(self) -> float:
        return min(min(self.exp.rates), self.ceiling)


# the command's flags for the API's keywords
FLAGS = Spelling(target="--target", rate="--rate", seed="--seed", tolerance="--tolerance")


def plan_capacity(exp: Experiment, targets: str | Sequence[str], rate: float | None = None, seed: int = 0,
                  tolerance: float = 0.05, names: Spelling = API) -> CapacityPlan:
    """The arguments of a capacity search, each refused with a SpecError naming it as the caller spelled it
    (`names`: FLAGS from the command), before any probe runs."""
    option(positive, tolerance, names["tolerance"])
    if tolerance < MIN_REL_TOL:
        raise SpecError(names["tolerance"], "", (
            f"{tolerance:g} is finer than a float resolves between two rates (about {MIN_REL_TOL:.2g} "
            f"relative); give at least {MIN_REL_TOL:.2g}"))
    if tolerance >= 1:  # (high - low) / high is below 1 from the start: the search would not bisect at all
        raise SpecError(names["tolerance"], "", f"must be below 1 (a relative precision, e.g. 0.05), got {tolerance:g}")
    option(number, seed, names["seed"], low=0, whole=True)
    goals = parse_targets(targets, names["target"])
    check_searchable(exp)
    if rate is not None:
        option(positive, rate, names["rate"])
        _check_rate(exp, rate, names["rate"])
    return CapacityPlan(exp, goals, None if rate is None else float(rate), int(seed), float(tolerance))


def probe_runs(exp: Experiment) -> int:
    """The most workers a capacity search keeps busy: a search probes ahead, so several a system."""
    return len(exp.systems) * 8


def _check_rate(exp: Experiment, rate: float, name: str) -> None:
    """The total rate is simulated as one run's: run's request limit applies to it too."""
    if rate > rate_ceiling(exp):
        raise SpecError(name, "", (
            f"{rate:g} req/s for {exp.workload.duration_s:g} s (workload.duration_s) is about "
            f"{rate * exp.workload.duration_s:.3g} requests, more than one run simulates ({MAX_REQUESTS:,}); "
            f"give at most {rate_ceiling(exp):.4g}, or a shorter workload.duration_s"))


def colocated(exp: Experiment, splits_searched: bool, hint: str) -> Experiment:
    """The experiment a capacity search probes: colocated replicas, as many as each probe says. A config's
    `split` is read only by the splits' search (its pools' GPUs and parallelism); with no splits searched it is
    refused, since a split fleet ignores the replica count the search varies. `hint`: how to search splits. So is
    expert parallelism, whose replica count is the degree that sets each GPU's experts: no fleet of alike replicas."""
    if exp.expert_parallel:
        raise SpecError(exp.source, "expert_parallel", "a capacity search varies the replicas, which under expert "
                        "parallelism are one data-parallel group whose size sets the experts each GPU holds; simulate "
                        "each fleet size with servesim run, or remove expert_parallel")
    if exp.split is None:
        return exp
    if not splits_searched:
        raise SpecError(exp.source, "split", f"a capacity search varies colocated replicas, which a split fleet "
                        f"does not have; {hint}, or remove split")
    return dataclasses.replace(exp, split=None)


@dataclass(frozen=True)
class Search:
    """One search of a system: the targets it holds runs to; whether it is the row that finds replicas."""
    system: SystemSpec
    targets: tuple[Target, ...]
    finds_replicas: bool

    @property
    def metric(self) -> str:
        return self.targets[0].metric if len(self.targets) == 1 else ALL


def searches(plan: CapacityPlan) -> list[Search]:
    """Per system: one search per target and, with several, a joint one that finds the replicas."""
    found = []
    for system in plan.exp.systems:
        if len(plan.targets) > 1:
            found += [Search(system, (target,), False) for target in plan.targets]
        found.append(Search(system, plan.targets, True))
    return found


def capacity_frame(rows: list[dict]) -> pd.DataFrame:
    """capacity.csv's table: replica counts as whole numbers, empty where none was found."""
    import pandas as pd

    table = pd.DataFrame(rows)
    if "replicas_needed" in table:
        table["replicas_needed"] = table["replicas_needed"].astype("Int64")
    return table


@dataclass
class CapacityResult:
    rows: list[dict]  # capacity.csv: a row per search
    probes: list[dict] = field(default_factory=list)  # capacity_probes.csv: every distinct probe, in order
    notes: list[str] = field(default_factory=list)  # what the command says of the answers
    cost_models: str = ""  # cost_models.txt: each system's cost model, in a few words and in whole


def run_capacity(plan: CapacityPlan, workers: Workers | None = None,
                 on_probe: Callable[[str], None] = lambda line: None) -> CapacityResult:
    """Every search of the plan; each distinct probe goes to on_probe as a line when first on a path."""
    planned = searches(plan)
    shared: dict[str, dict] = {}  # a system's probes, whichever search asked for them
    jobs = [job(plan.exp, s.system, s.targets, plan.seed, _start(plan, s), shared.setdefault(s.system.name, {}))
            for s in planned]
    paths: list[list[Probe]] = [[] for _ in planned]
    printed: set[tuple[str, float, int]] = set()

    def note(i: int, p: Probe) -> None:
        paths[i].append(p)
        key = (planned[i].system.name, p.rate, p.replicas)
        if key not in printed:
            printed.add(key)
            on_probe(_probe_line(key[0], p, plan.targets))

    answers = run_jobs(jobs, workers, note)
    result = CapacityResult([], _probe_rows(planned, paths, plan.targets))
    for search, answer, path in zip(planned, answers, paths):
        result.rows.append(_row(plan, search, answer, path, result.notes))
    result.cost_models = cost_models_text([path[-1].summary for path in paths if path])
    return result


def _probe_rows(planned: list[Search], paths: list[list[Probe]], targets: tuple[Target, ...]) -> list[dict]:
    """Each distinct probe once, search by search along its path: the same rows on any number of workers
    (the order the probes came back in depends on how many ran at once)."""
    rows, seen = [], set()
    for search, path in zip(planned, paths):
        for p in path:
            key = (search.system.name, p.rate, p.replicas)
            if key not in seen:
                seen.add(key)
                rows.append(_probe_row(key[0], p, targets))
    return rows


def _start(plan: CapacityPlan, search: Search) -> Callable:
    rate = plan.rate if search.finds_replicas else None
    return lambda: capacity_search(plan.start, plan.tolerance, rate, ceiling=plan.ceiling)


def _probe_row(system: str, p: Probe, targets: tuple[Target, ...]) -> dict:
    verdict = judge(p.summary, targets)
    row = {"system": system, "rate": p.rate, "replicas": p.replicas}
    row.update({t.metric: p.summary[t.metric] for t in targets})
    row.update(saturated=p.summary["saturated"], backlog_growth=p.summary["backlog_growth"],
               **{key: p.summary[key] for key in PACE_KEYS},
               dropped=p.summary["num_ignored"] + p.summary["num_aborted"], measured=p.summary["num_measured"],
               holds=verdict.held, why=verdict.why)
    return row


def _probe_line(system: str, p: Probe, targets: tuple[Target, ...]) -> str:
    values = ", ".join(f"{t.metric} {p.summary[t.metric]:.4f}" for t in targets)
    verdict = judge(p.summary, targets)
    said = {True: "ok", False: f"over: {verdict.why}", None: f"no information ({verdict.why})"}[verdict.held]
    return f"  {system:<18} {p.replicas} replica(s) at {p.rate:8.3f} req/s: {values}: {said}"


def _row(plan: CapacityPlan, search: Search, answer: tuple, path: list[Probe], notes: list[str]) -> dict:
    rate, needed = answer
    name = search.system.name
    row = {"system": name, "metric": search.metric,
           "limit": search.targets[0].limit if len(search.targets) == 1 else math.nan,
           "max_rate_per_replica_rps": rate}
    limited_by = stopped_by(rate, path, search.targets, plan.ceiling)
    what = "" if len(plan.targets) == 1 else f" [{label(search.targets)}]"
    notes.extend(f"  {name:<18}{what} {note}" for note in _rate_notes(plan, search, rate, path, limited_by))
    if plan.rate is not None:
        row["target_rate_rps"] = plan.rate if search.finds_replicas else math.nan
        row["replicas_needed"] = needed
        if search.finds_replicas and rate and needed is None:
            last = path[-1]
            verdict = judge(last.summary, search.targets)
            if verdict.held is None:
                notes.append(f"  {name:<18}{what} at {plan.rate:g} req/s on {last.replicas} replica(s), "
                             f"{verdict.why}: the replicas needed cannot be told; lower warmup_s or raise "
                             "workload.duration_s")
            else:
                notes.append(f"  {name:<18}{what} even {max(p.replicas for p in path)} replicas do not meet the "
                             f"target at {plan.rate:g} req/s")
    row["limited_by"] = limited_by
    # what priced the answer, in a few words (its whole description: cost_models.txt beside capacity.csv)
    row["cost_model"] = path[-1].summary["cost_model"] if path else ""
    row.update(setup_of(plan.exp, search.system))  # the rest of what the answer was computed on
    return row


def _rate_notes(plan: CapacityPlan, search: Search, rate: float, path: list[Probe], limited_by: str) -> list[str]:
    """What to say of a rate search's answer where the number alone would mislead."""
    measured = [p for p in path if judge(p.summary, search.targets).held is not None]
    if not measured:
        return [f"no probe measured its targets up to {max(p.rate for p in path):.4g} req/s "
                f"({judge(path[-1].summary, search.targets).why}): lower warmup_s or raise workload.duration_s"]
    if rate == 0.0:
        lowest = min(measured, key=lambda p: p.rate)
        note = (f"no rate probed meets the target, down to {lowest.rate:.4g} req/s "
                f"({judge(lowest.summary, search.targets).why}); the search walks down to a 256th of the first "
                "of `rates`: give lower rates to search below")
        growth = lowest.summary["backlog_growth"]
        if lowest.summary["num_unfinished"] and not growth > 0:  # cut off by the horizon, not fallen behind
            note += ("; requests unfinished at the horizon of a short trace may only be long ones: raise "
                     "workload.duration_s or max_time_factor")
        return [note]
    notes = []
    if rate >= plan.ceiling:
        notes.append(f"holds even at {rate:.4g} req/s, the most one run simulates over workload.duration_s: the "
                     "capacity is at least that")
    elif limited_by == HELD_THROUGHOUT:
        replay = " (a replay serves its trace's requests at any rate: they may be too few to load a replica)"
        notes.append(f"holds at every rate probed, up to {rate:.4g} req/s: the capacity is at least that"
                     + (replay if plan.exp.workload.is_replay else ""))
    behind = next((p for p in path if p.rate == rate and p.replicas == path[0].replicas), None)
    if behind is not None and behind.summary["num_measured"] < MIN_MEASURED:
        longer = "replay a longer trace" if plan.exp.workload.is_replay else "raise workload.duration_s"
        notes.append(f"the answer rests on {behind.summary['num_measured']} requests measured after the warm-up at "
                     f"{rate:.4g} req/s: a percentile of so few is noise; {longer}")
    return notes


def stopped_by(rate: float, path: list[Probe], targets: tuple[Target, ...], ceiling: float) -> str:
    """Why the search stopped where it did: what failed at the lowest rate above the answer that failed."""
    over = [p for p in path if p.replicas == path[0].replicas and p.rate > rate
            and judge(p.summary, targets).held is False]
    if over:
        lowest = min(over, key=lambda p: p.rate)
        return f"at {lowest.rate:.4g} req/s: {judge(lowest.summary, targets).why}"
    if rate >= ceiling:
        return "the most one run simulates (workload.duration_s)"
    if rate > 0:
        return HELD_THROUGHOUT
    return judge(path[-1].summary, targets).why
