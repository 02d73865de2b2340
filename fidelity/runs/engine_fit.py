"""An engine model's serial host work fitted on real runs, each run left out of the fit in turn.

Under asynchronous scheduling a step's host work hides behind the GPU's (calibrate/clock/engine_clock.py), except
what stays in series: the step's synchronisation and launches, which no batch queue hides. Nothing published
measures that part for vLLM V1, so it is fitted on what the engine did: real runs replayed exactly
(fidelity/runs/command.py), the term's coefficients (paid per iteration and per prompt token) chosen to bring the
simulated mean and p90 of TTFT, TPOT and E2E latency closest to the real ones, in mean |relative error| over the
runs fitted on. The device clock and every other term of the engine model stay as they are: the fit moves only the
one term, so what it absorbs is said by its name.

The search is a pattern search on each coefficient's scale (a factor up or down, and zero), deterministic, because
a replay is a simulation, not a formula one could differentiate. Leave one run out: each run's errors are those of
the fit on the others, and the fit never sees it (tests/fidelity/test_engine_fit.py poisons it to prove it).
"""
from __future__ import annotations

import math
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from calibrate.parts.host_model import HostModel, save_host_model
from fidelity.runs.comparison import statistic
from fidelity.runs.per_request import simulated_latencies
from fidelity.runs.read import read_run
from fidelity.runs.replay_trace import ReplayTrace, replay_trace
from fidelity.runs.settings import ReplaySetup, replay_setup
from fidelity.runs.simulated import simulate_replay

SERIAL_TERM = "step_serial"
FEATURES = ("per_iteration_s", "per_prefill_token_s")
JUDGED = (("ttft", "mean"), ("ttft", "p90"), ("tpot", "mean"), ("tpot", "p90"), ("e2e", "mean"), ("e2e", "p90"))
START = {"per_iteration_s": 1e-4, "per_prefill_token_s": 1e-7}
FACTORS = (4.0, 2.0, 1.25)  # the pattern search's steps, coarse to fine
MAX_ROUNDS = 12


@dataclass(frozen=True, eq=False)
class FitRun:
    """One real run, read and set up for replay once: what the fit simulates again for each candidate."""

    name: str
    setup: ReplaySetup
    replay: ReplayTrace
    real: dict[str, np.ndarray]  # metric -> per request seconds (the publisher's definitions)
    real_end_s: float


def fit_run(name: str, path: str | Path, overrides: list[str] | None = None) -> FitRun:
    run = read_run(path)
    setup = replay_setup(run, None, overrides)
    system = setup.system
    replay = replay_trace(run, system.block_size if system.prefix_caching else None, None)
    real = {"ttft": run.requests.ttft_s, "tpot": run.requests.tpot_s, "e2e": run.requests.e2e_s}
    end = float(replay.trace.arrival_s[-1] + np.nanmax(run.requests.e2e_s))
    return FitRun(name, setup, replay, real, end)


def judged_errors(case: FitRun, engine_path: Path) -> dict[tuple[str, str], float]:
    """The replay's signed relative errors (not %) of the judged statistics, on this engine model."""
    exp = case.setup.experiment
    exp = replace(exp, cost_model=replace(exp.cost_model, host=engine_path))
    simulated = simulate_replay(replace(case.setup, experiment=exp), case.replay, case.real_end_s)
    sim = simulated_latencies(simulated.requests)
    out = {}
    for metric, name in JUDGED:
        real, predicted = statistic(case.real[metric], name), statistic(sim[metric], name)
        out[(metric, name)] = (predicted - real) / real if real and math.isfinite(predicted) else math.inf
    return out


def with_serial(base: HostModel, coefficients: dict[str, float]) -> HostModel:
    """The base engine model with the serial term at these coefficients (zeros left out), in series under overlap."""
    terms = {term: dict(c) for term, c in base.terms.items() if term != SERIAL_TERM}
    kept = {feature: value for feature, value in coefficients.items() if value > 0}
    if kept:
        terms[SERIAL_TERM] = kept
    serial = (SERIAL_TERM,) if kept else ()
    return replace(base, terms=terms, engine=replace(base.engine, serial=serial))


class Objective:
    """Mean |relative error| of the judged statistics over the runs, for candidate coefficients (cached)."""

    def __init__(self, runs: list[FitRun], base: HostModel, folder: Path):
        self.runs, self.base, self.folder = runs, base, folder
        self.seen: dict[tuple[float, ...], float] = {}

    def __call__(self, coefficients: dict[str, float]) -> float:
        key = tuple(coefficients[f] for f in FEATURES)
        if key not in self.seen:
            candidate = self.folder / f"candidate-{len(self.seen)}.yaml"
            path = save_host_model(with_serial(self.base, coefficients), candidate)
            errors = [abs(e) for run in self.runs for e in judged_errors(run, path).values()]
            self.seen[key] = float(np.mean(errors))
        return self.seen[key]


def pattern_search(objective: Callable[[dict[str, float]], float], start: dict[str, float]) -> dict[str, float]:
    """Each coefficient in turn scaled by a factor up or down, or set to zero (or from zero to its start), kept where
    the objective falls; the factors shrink when a round moves nothing."""
    best, value = dict(start), objective(start)
    for factor in FACTORS:
        for _ in range(MAX_ROUNDS):
            moved = False
            for feature in FEATURES:
                current = best[feature]
                steps = ([current * factor, current / factor, 0.0] if current > 0 else [START[feature]])
                for candidate in steps:
                    trial = {**best, feature: candidate}
                    score = objective(trial)
                    if score < value - 1e-12:
                        best, value, moved = trial, score, True
                        break
            if not moved:
                break
    return best


@dataclass(frozen=True)
class FoldResult:
    held_out: str
    coefficients: dict[str, float]
    errors: dict[tuple[str, str], float]  # on the held-out run


def fit(runs: list[FitRun], base: HostModel, start: dict[str, float] | None = None) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as folder:
        return pattern_search(Objective(runs, base, Path(folder)), start or dict(START))


def leave_one_run_out(runs: list[FitRun], base: HostModel,
                      log: Callable[[str], None] = lambda line: None) -> list[FoldResult]:
    """Each run's errors under the fit on the others."""
    results = []
    with tempfile.TemporaryDirectory() as scratch:
        for i, held in enumerate(runs):
            folder = Path(scratch) / f"fold-{i}"
            folder.mkdir()
            others = [run for run in runs if run is not held]
            coefficients = pattern_search(Objective(others, base, folder), dict(START))
            path = save_host_model(with_serial(base, coefficients), folder / "held-out.yaml")
            results.append(FoldResult(held.name, coefficients, judged_errors(held, path)))
            log(f"{held.name} held out: {coefficients}")
    return results
