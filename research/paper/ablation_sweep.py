"""The runs behind research/paper/paper_ablation.py: one ladder of rates per curve, climbed until the curve crosses.

A curve (one system of one variant of one figure) climbs its grid from the lowest rate and stops at the first rate
whose normalized latency reaches the threshold: sim.reproduce.readings.sustainable_rate reads that first crossing,
so the rates past it could not change the reading, and they are the costliest (saturated) runs. A curve already over
the threshold at the grid's lowest rate is read downwards, halving the rate up to DOWN_STEPS times. The rates a
figure reads whatever the curve does (Fig. 13's) run too. Every round, each open curve's next rates go to one
process pool; a run two curves share (the same config digest: a variant that changes only vLLM leaves the Orcas'
runs the default's) is simulated once.
"""
from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field

from engine.core.system import SystemSpec
from engine.errors import SpecError
from sim.executors.spec import ExecutorSpec
from sim.experiment.config import Experiment
from sim.experiment.fingerprint import config_digest, input_digest
from sim.experiment.progress import Eta
from sim.reproduce.readings import THRESHOLD_S_PER_TOKEN

DOWN_STEPS = 3  # halvings below the grid for a curve over the threshold at its lowest rate
SEED = 0


@dataclass
class Ladder:
    """One curve's rates: its grid, climbed while under the threshold, and the rates read whatever it does."""

    label: tuple[str, str, str]  # figure, variant, system
    exp: Experiment
    system: SystemSpec
    grid: tuple[float, ...]
    must: tuple[float, ...] = ()
    points: dict[float, dict] = field(default_factory=dict)  # rate -> the run's summary row
    _inputs: dict | None = None
    _digests: dict[float, str] = field(default_factory=dict)

    def latency(self, rate: float) -> float:
        return float(self.points[rate]["normalized_latency"])

    @property
    def first_over(self) -> float:
        """The lowest rate run whose latency reaches the threshold (inf: none yet)."""
        over = [rate for rate in self.points if self.latency(rate) >= THRESHOLD_S_PER_TOKEN]
        return min(over, default=float("inf"))

    def wanted(self) -> list[float]:
        """The rates to run next: the must-read ones not run yet, then the grid's next rate under the first
        crossing, or, with every grid rate under it run and the lowest already over, the next rate down."""
        rates = [rate for rate in self.must if rate not in self.points]
        climb = [rate for rate in self.grid if rate < self.first_over and rate not in self.points]
        if climb:
            rates.append(climb[0])
        elif self.over_at_lowest and min(self.points) > self.floor:
            rates.append(min(self.points) / 2)
        return list(dict.fromkeys(rates))

    @property
    def over_at_lowest(self) -> bool:
        return bool(self.points) and self.latency(min(self.points)) >= THRESHOLD_S_PER_TOKEN

    @property
    def floor(self) -> float:
        return self.grid[0] / 2 ** DOWN_STEPS

    def most_left(self) -> int:
        """The most runs it may still ask for."""
        over = self.first_over
        climb = sum(1 for rate in self.grid if rate < over and rate not in self.points)
        down = 0
        if self.over_at_lowest or not self.points:
            lowest = min(self.points, default=self.grid[0])
            down = sum(1 for k in range(1, DOWN_STEPS + 1) if self.grid[0] / 2 ** k < lowest)
        return sum(1 for rate in self.must if rate not in self.points) + climb + down

    def digest(self, rate: float) -> str:
        """The run's fingerprint (sim/experiment/fingerprint.py): equal for two curves' runs that compute the same."""
        if rate not in self._digests:
            if self._inputs is None:
                self._inputs = input_digest(self.exp)
            self._digests[rate] = config_digest(self.exp, self.system, rate, SEED, self._inputs)
        return self._digests[rate]


def simulate(exp: Experiment, system: SystemSpec, rate: float) -> dict:
    from sim.experiment.run import run_one

    return run_one(exp, system, rate, SEED).summary


@dataclass
class SweepStats:
    simulated: int = 0
    shared: int = 0  # asks a run another curve had already made answered
    planned: int = 0  # the most runs the ladders could have asked for
    load_averages: list[float] = field(default_factory=list)  # 1-minute load average, once per round


def check_bound(ladders: list[Ladder], max_runs: int) -> int:
    """The most runs these ladders may ask for; more than max_runs is an error before anything runs."""
    planned = sum(ladder.most_left() for ladder in ladders)
    if planned > max_runs:
        raise SpecError("research/paper/paper_ablation.py", "--max-runs",
                        f"the grid may take up to {planned} runs, over the limit of {max_runs}; run fewer variants "
                        "or figures, or raise --max-runs")
    return planned


def climb(ladders: list[Ladder], jobs: int, progress: Callable[[str], None], max_runs: int) -> SweepStats:
    """Every ladder to its crossing (or its grid's end), rounds of runs on `jobs` processes."""
    stats = SweepStats(planned=check_bound(ladders, max_runs))
    eta = Eta()
    eta.expect(stats.planned, 1.0)
    done: dict[str, dict] = {}
    with ExecutorSpec("process", jobs).open() as workers:
        while asks := [(ladder, rate) for ladder in ladders for rate in ladder.wanted()]:
            stats.load_averages.append(os.getloadavg()[0])
            todo: dict[str, tuple[Experiment, SystemSpec, float, tuple[str, str, str]]] = {}
            for ladder, rate in asks:
                key = ladder.digest(rate)
                if key not in done:
                    todo.setdefault(key, (ladder.exp, ladder.system, rate, ladder.label))
            keys, calls = list(todo), list(todo.values())
            for i, summary in workers.run_all(simulate, [call[:3] for call in calls]):
                done[keys[i]] = summary
                figure, variant, system = calls[i][3]
                progress(f"  at most {eta.finished(1.0)} {figure} {variant:<18} {system:<18} rate "
                         f"{calls[i][2]:<6g}: {summary['normalized_latency']:.3f} s/token")
            stats.simulated += len(todo)
            stats.shared += len(asks) - len(todo)
            for ladder, rate in asks:
                ladder.points[rate] = done[ladder.digest(rate)]
            left = eta.runs_done + sum(ladder.most_left() for ladder in ladders)
            eta.skip(eta.runs_expected - left, 1.0)
    return stats
