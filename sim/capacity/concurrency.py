"""`servesim capacity --concurrency`: the highest max_concurrency that meets the targets, as vLLM's users sweep
`vllm bench serve --request-rate inf --max-concurrency 1, 2, 4, ...`.

Each probe is a closed loop: every request arrives at 0 s (rate inf) and a client's gate keeps at most C in flight
(sim/core/client_gate.py), each sent as another finishes, with its latencies counted from its sending. The search
(sim/capacity/search.py's concurrency_search) doubles C from the lowest of the config's `concurrencies` (1 without
them) until a probe misses a target, then bisects the integers, on the config's replicas; C never passes the
requests there are (workload.num_requests, or a replayed trace's), past which a gate holds nothing back. A
concurrency holds as a rate does (sim/capacity/targets.py): served, nothing dropped, every target met. Its answer is
given as the concurrency and as the request rate it served (requests finished over the run's makespan, vLLM's
request throughput). With several targets each has its search and a joint one meets them all, as the rate's.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from engine.errors import SpecError
from engine.specs.arguments import API, Spelling
from engine.specs.checks import number, option
from sim.capacity.search import Probe, concurrency_job, concurrency_search, run_jobs
from sim.capacity.targets import Target, judge, label, parse_targets
from sim.executors.workers import Workers
from sim.experiment.config import Experiment
from sim.experiment.sweep import cost_models_text
from sim.workload.config import recorded

ALL = "all"  # the metric column of the joint row
MIN_MEASURED = 100  # fewer requests behind an answer, and its percentile rests on its top few: said beside it

__all__ = ["ConcurrencyPlan", "plan_concurrency", "run_concurrency"]


@dataclass(frozen=True)
class ConcurrencyPlan:
    """A search over concurrency, checked: the experiment, its targets, the seed, where it starts and its ceiling
    (the requests there are)."""
    exp: Experiment
    targets: tuple[Target, ...]
    seed: int
    start: int
    ceiling: int


@dataclass
class ConcurrencyResult:
    rows: list[dict]  # capacity_concurrency.csv: a row per search
    probes: list[dict] = field(default_factory=list)  # capacity_concurrency_probes.csv: every distinct probe
    notes: list[str] = field(default_factory=list)  # what the command says of the answers
    cost_models: str = ""  # cost_models.txt


def plan_concurrency(exp: Experiment, targets: str | Sequence[str], seed: int = 0,
                     names: Spelling = API) -> ConcurrencyPlan:
    """The search's arguments and experiment, each refused with a SpecError naming it before any probe runs."""
    option(number, seed, names["seed"], low=0, whole=True)
    goals = parse_targets(targets, names["target"])
    if exp.split is not None:
        raise SpecError(exp.source, "split", "a search over concurrency gates colocated replicas, which a split "
                        "fleet does not have; remove split")
    workload = exp.workload
    if workload.is_replay:
        ceiling = len(recorded(workload, exp.model.max_seq_len))
    elif workload.num_requests is None:
        raise SpecError(exp.source, "workload.num_requests", (
            "a search over concurrency sends every request at 0 s (rate inf), so the requests must be counted, not "
            "drawn for workload.duration_s: give workload.num_requests (vLLM's --num-prompts)"))
    else:
        ceiling = workload.num_requests
    gates = [c for c in exp.concurrencies if c is not None]
    return ConcurrencyPlan(exp, goals, int(seed), min(min(gates, default=1), ceiling), ceiling)


@dataclass(frozen=True)
class _Search:
    system_name: str
    targets: tuple[Target, ...]

    @property
    def metric(self) -> str:
        return self.targets[0].metric if len(self.targets) == 1 else ALL


def run_concurrency(plan: ConcurrencyPlan, workers: Workers | None = None,
                    on_probe: Callable[[str], None] = lambda line: None) -> ConcurrencyResult:
    """Every search of the plan (per system: one per target and, with several, the joint one); each distinct probe
    goes to on_probe as a line when first on a path."""
    planned = [(system, _Search(system.name, goals)) for system in plan.exp.systems
               for goals in ([(t,) for t in plan.targets] if len(plan.targets) > 1 else []) + [plan.targets]]
    shared: dict[str, dict] = {}  # a system's probes, whichever search asked for them
    jobs = [concurrency_job(plan.exp, system, search.targets, plan.seed,
                            lambda: concurrency_search(plan.start, plan.ceiling), shared.setdefault(system.name, {}))
            for system, search in planned]
    paths: list[list[Probe]] = [[] for _ in planned]
    printed: set[tuple[str, int]] = set()

    def note(i: int, p: Probe) -> None:
        paths[i].append(p)
        key = (planned[i][1].system_name, gate(p))
        if key not in printed:
            printed.add(key)
            on_probe(_probe_line(key[0], p, plan.targets))

    answers = run_jobs(jobs, workers, note)
    result = ConcurrencyResult([])
    seen: set[tuple[str, int]] = set()
    for (_, search), answer, path in zip(planned, answers, paths):
        result.rows.append(_row(plan, search, answer, path, result.notes))
        for p in path:  # each distinct probe once, search by search along its path: the same on any workers
            if (search.system_name, gate(p)) not in seen:
                seen.add((search.system_name, gate(p)))
                result.probes.append(_probe_row(search.system_name, p, plan.targets))
    result.cost_models = cost_models_text([path[-1].summary for path in paths if path])
    return result


def gate(p: Probe) -> int:
    return int(p.summary["max_concurrency"])


def _probe_row(system: str, p: Probe, targets: tuple[Target, ...]) -> dict:
    verdict = judge(p.summary, targets)
    return {"system": system, "max_concurrency": gate(p), "replicas": p.replicas,
            "request_rate_rps": p.summary["throughput_rps"], **{t.metric: p.summary[t.metric] for t in targets},
            "dropped": p.summary["num_ignored"] + p.summary["num_aborted"], "measured": p.summary["num_measured"],
            "holds": verdict.held, "why": verdict.why}


def _probe_line(system: str, p: Probe, targets: tuple[Target, ...]) -> str:
    values = ", ".join(f"{t.metric} {p.summary[t.metric]:.4f}" for t in targets)
    verdict = judge(p.summary, targets)
    said = {True: "ok", False: f"over: {verdict.why}", None: f"no information ({verdict.why})"}[verdict.held]
    return (f"  {system:<18} concurrency {gate(p):>5} on {p.replicas} replica(s), "
            f"{p.summary['throughput_rps']:8.3f} req/s served: {values}: {said}")


def _row(plan: ConcurrencyPlan, search: _Search, answer: int, path: list[Probe], notes: list[str]) -> dict:
    at = next((p for p in path if gate(p) == answer), None)
    over = [p for p in path if gate(p) > answer and judge(p.summary, search.targets).held is False]
    if over:
        lowest = min(over, key=gate)
        limited_by = f"at concurrency {gate(lowest)}: {judge(lowest.summary, search.targets).why}"
    elif answer >= plan.ceiling:
        limited_by = f"every request in flight at once ({plan.ceiling}: the requests there are)"
    else:
        limited_by = judge(path[-1].summary, search.targets).why if path else ""
    what = "" if len(plan.targets) == 1 else f" [{label(search.targets)}]"
    notes.extend(f"  {search.system_name:<18}{what} {line}" for line in _notes(plan, answer, at, path, search))
    return {"system": search.system_name, "metric": search.metric,
            "limit": search.targets[0].limit if len(search.targets) == 1 else math.nan,
            "replicas": plan.exp.replicas, "max_concurrency": answer,
            "request_rate_rps": at.summary["throughput_rps"] if at is not None else math.nan,
            "limited_by": limited_by, "cost_model": path[-1].summary["cost_model"] if path else ""}


def _notes(plan: ConcurrencyPlan, answer: int, at: Probe | None, path: list[Probe], search: _Search) -> list[str]:
    """What to say of an answer where the number alone would mislead."""
    if not path:
        return []
    if all(judge(p.summary, search.targets).held is None for p in path):
        return [f"no probe measured its targets up to concurrency {max(map(gate, path))} "
                f"({judge(path[-1].summary, search.targets).why}): lower warmup_s, which leaves out the requests "
                "sent before it, or raise workload.num_requests"]
    if answer == 0:
        lowest = min(path, key=gate)
        return [f"not even concurrency {gate(lowest)} meets the target ({judge(lowest.summary, search.targets).why})"]
    notes = []
    if answer >= plan.ceiling:
        longer = "replay a longer trace" if plan.exp.workload.is_replay else "raise workload.num_requests"
        notes.append(f"holds with all {plan.ceiling} requests in flight at once: the capacity is at least that; "
                     f"{longer} to search higher")
    if at is not None and at.summary["num_measured"] < MIN_MEASURED:
        notes.append(f"the answer rests on {at.summary['num_measured']} requests measured at concurrency {answer}: "
                     "a percentile of so few is noise; raise workload.num_requests")
    return notes


def concurrency_frame(rows: list[dict]):
    """capacity_concurrency.csv's table."""
    import pandas as pd

    return pd.DataFrame(rows)
