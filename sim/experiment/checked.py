"""`run`'s and `simulate`'s arguments, checked on one path for the command line and the Python API.

Everything is checked before anything is written or simulated: the config, then each argument, then
the output folder. A bad value is a SpecError naming the argument as the caller wrote it (a
`Spelling`: `--out` on the command line, `out_dir` in Python).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.core.system import PAPER_SYSTEMS, SystemSpec
from engine.errors import SpecError
from engine.specs.arguments import API, Spelling, path_argument, per_core, strings
from engine.specs.arguments import jobs as jobs_argument
from engine.specs.checks import number, option, positive_int
from sim.executors.spec import ExecutorSpec
from sim.experiment.closed_loop import rate_value
from sim.experiment.config import Experiment, load_experiment
from sim.experiment.output import check_iterations_format, prepare_out_dir

OVERRIDE_EXAMPLE = "['rates=[1,2]', 'workload.duration_s=600']"


def loaded(config: Any, overrides: Any, names: Spelling = API, *, loaded_ok: bool = True) -> Experiment:
    """The experiment `config` names: a config file's path (with `overrides`, `--set` strings) or, where
    `loaded_ok`, an Experiment already loaded (which takes no overrides)."""
    extra = strings(overrides, names["overrides"], OVERRIDE_EXAMPLE)
    if loaded_ok and isinstance(config, Experiment):
        if extra:
            raise SpecError(names["overrides"], "", "apply to a config file; pass its path, or "
                            "servesim.load_experiment(path, overrides)")
        return config
    what = "an Experiment, or an experiment config's path" if loaded_ok else "an experiment config's path"
    return load_experiment(path_argument(config, names["config"], what), extra)


@dataclass(frozen=True)
class RunArguments:
    """A sweep ready to run: every argument checked, the output folder prepared (nothing written yet)."""

    exp: Experiment
    out_dir: Path
    executor: ExecutorSpec
    iterations: str


def run_arguments(config: Any, overrides: Any, out_dir: Any, jobs: Any, iterations: Any,
                  names: Spelling = API, executor=None) -> RunArguments:
    """`servesim run`'s and `servesim.run`'s arguments. `out_dir` None is results/<name>; `jobs` 0 is
    one process per core (at most one per run). `executor` builds the command line's own choice of
    executor (--executor, --scheduler) from the checked experiment; by default a local process pool."""
    exp = loaded(config, overrides, names)
    runs = len(exp.systems) * len(exp.rates) * len(exp.concurrencies) * len(exp.seeds)
    if executor is None:
        spec = ExecutorSpec("process", per_core(jobs_argument(jobs, names["jobs"]), runs))
    else:
        spec = executor(runs)
    check_iterations_format(iterations, names["iterations"])
    # None (the command line's --out not given, or given as "") is results/<name>
    folder = Path("results") / exp.name if out_dir is None or out_dir == "" \
        else path_argument(out_dir, names["out_dir"], "a folder's path")
    return RunArguments(exp, prepare_out_dir(folder, name=names["out_dir"]), spec, iterations)


@dataclass(frozen=True)
class OneRun:
    """What `simulate` runs: one system of the experiment, at one of its rates, concurrencies and seeds (`exp` is
    the experiment gated at that concurrency: Experiment.at_concurrency)."""

    exp: Experiment
    system: SystemSpec
    rate: float
    seed: int


def simulate_arguments(config: Any, system: Any, rate: Any, seed: Any, overrides: Any,
                       concurrency: Any = None) -> OneRun:
    """`servesim.simulate`'s arguments: each None is the experiment's first."""
    rate = None if rate is None else option(rate_value, rate, "rate")
    seed = None if seed is None else option(number, seed, "seed", low=0, whole=True)
    concurrency = None if concurrency is None else option(positive_int, concurrency, "concurrency")
    exp = loaded(config, overrides)
    gate = exp.concurrencies[0] if concurrency is None else \
        _member(exp.concurrencies, concurrency, "concurrency", "concurrencies")
    return OneRun(exp.at_concurrency(gate), exp.systems[0] if system is None else pick_system(exp, system),
                  exp.rates[0] if rate is None else _member(exp.rates, rate, "rate", "rates"),
                  exp.seeds[0] if seed is None else _member(exp.seeds, seed, "seed", "seeds"))


def _member(values: tuple, value, name: str, key: str):
    if value not in values:
        raise SpecError(name, "", f"{value:g} is not one of the experiment's {key} {list(values)}; give one of "
                        f"them, or add it to the config (overrides=['{key}=[{value:g}]'])")
    return value


def pick_system(exp: Experiment, name: Any) -> SystemSpec:
    """The system named by its display name (`vLLM`) or by its key in the config (`vllm`, a preset); a
    display name first, since the config makes those unique."""
    if isinstance(name, str):
        for system in exp.systems:
            if system.name == name:
                return system
        keyed = [s for s, key in zip(exp.systems, system_keys(exp)) if key == name]
        if len(keyed) == 1:
            return keyed[0]
        if keyed:
            raise SpecError("system", "", f"{name!r} is the key of several systems "
                            f"({', '.join(repr(s.name) for s in keyed)}); give one's display name")
    listed = ", ".join(f"{s.name!r}" + (f" (key {key!r})" if key and key != s.name else "")
                       for s, key in zip(exp.systems, system_keys(exp)))
    raise SpecError("system", "", f"{name!r} is not a system of the experiment; give a display name or a "
                    f"config key: {listed}")


def system_keys(exp: Experiment) -> list[str | None]:
    """Each system's key as the config wrote it: a preset's name (`vllm`), alone or under `preset:`; None
    for a system written out in full. No `systems` key is every preset, in order."""
    raw = exp.raw.get("systems", list(PAPER_SYSTEMS)) if isinstance(exp.raw, dict) else None
    items = raw if isinstance(raw, list) and len(raw) == len(exp.systems) else [None] * len(exp.systems)
    return [_key(item, system) for item, system in zip(items, exp.systems)]


def _key(item: Any, system: SystemSpec) -> str | None:
    if isinstance(item, str):
        return item
    if isinstance(item, dict) and isinstance(item.get("preset"), str):
        return item["preset"]
    # an Experiment built in code keeps no config: a preset is known by its spec
    return next((key for key, spec in PAPER_SYSTEMS.items() if spec == system), None)
