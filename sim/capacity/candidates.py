"""The deployments `servesim plan` considers: every GPU kind x tensor parallelism x number formats x batch limits x
system of the config (x prefill:decode unit), each built as the config would be with those keys set.

A deployment that cannot run is refused, without a probe, by the config's own checks and in their words: its weights
and one longest request's KV do not fit the GPU at that parallelism, the parallelism does not divide the heads, the
batch limits do not suit the scheduler, a split's pools do not fit or link.
"""
from __future__ import annotations

import copy
import itertools
from dataclasses import dataclass

from engine.core.system import PAPER_SYSTEMS, SystemSpec
from engine.errors import SpecError
from sim.capacity.deploy_config import DeploymentSearch
from sim.capacity.split import split_experiment, splits_of
from sim.experiment.config import Experiment, check_pools, experiment_from_dict
from sim.experiment.setup import engine_label

COLOCATED = "colocated"
# the check that refused a deployment, by the key its error names (the rest are the config's: "config")
STAGES = (("tensor_parallel", "parallelism"), ("model", "fit"), ("kv_cache_gib", "fit"), ("hardware", "fit"),
          ("systems", "batch"), ("workload.n", "batch"), ("workload.beam_width", "batch"), ("cost_model", "clock"),
          ("precision", "clock"), ("split", "split"))


@dataclass(frozen=True)
class Candidate:
    """One deployment: a replica (or a prefill:decode unit of replicas) of this shape, as many as the rate needs."""
    index: int  # its place in the search space's order
    hardware: str
    tensor_parallel: int
    weights: str
    kv_cache: str
    batch: tuple[tuple[str, int], ...]  # the batch keys it sets
    system: int  # which of the config's systems
    split: tuple[int, int] | None = None  # (prefill, decode) replicas a unit; None: a colocated replica

    @property
    def replicas_a_unit(self) -> int:
        return 1 if self.split is None else sum(self.split)

    @property
    def gpus_a_unit(self) -> int:
        return self.tensor_parallel * self.replicas_a_unit

    @property
    def fleet(self) -> str:
        return COLOCATED if self.split is None else f"{self.split[0]}P:{self.split[1]}D"

    @property
    def slug(self) -> str:
        """A file name for its probes: every field, readable."""
        batch = "-".join(f"{value}" for _, value in self.batch) or "own"
        unit = "" if self.split is None else f"_{self.split[0]}p{self.split[1]}d"
        return (f"{self.hardware}_tp{self.tensor_parallel}_{self.weights}-{self.kv_cache}_b{batch}"
                f"_s{self.system}{unit}")


@dataclass(frozen=True)
class Built:
    """A candidate as it runs: its experiment and system; or the check that refused it, and why."""
    candidate: Candidate
    exp: Experiment | None = None
    system: SystemSpec | None = None
    stage: str = ""
    reason: str = ""


def candidates(search: DeploymentSearch) -> list[Candidate]:
    """The search space in order: GPU, parallelism, formats, batch limits, system, then units."""
    units: list[tuple[int, int] | None] = [None, *(splits_of(search.splits) if search.splits else [])]
    shapes = itertools.product(search.hardware, search.tensor_parallel, search.precisions, search.batches,
                               range(len(search.base.systems)), units)
    return [Candidate(i, hw, tp, formats["weights"], formats["kv_cache"], tuple(batch.items()), system, unit)
            for i, (hw, tp, formats, batch, system, unit) in enumerate(shapes)]


def build(search: DeploymentSearch, candidate: Candidate) -> Built:
    """The candidate's experiment, checked as a config is; a refusal is the row's reason."""
    raw = copy.deepcopy(search.raw)
    raw.pop("dtype_bytes", None)
    if candidate.hardware != search.base.hardware.name:  # the config's own may be a sheet of its own, by its path
        raw["hardware"] = candidate.hardware
    raw.update(tensor_parallel=candidate.tensor_parallel, replicas=1,
               precision={"weights": candidate.weights, "kv_cache": candidate.kv_cache},
               systems=[_with_batch(_systems(raw)[candidate.system], dict(candidate.batch))])
    try:
        exp = experiment_from_dict(raw, search.source, search.base_dir)
        if candidate.split is not None:
            exp = split_experiment(exp, *candidate.split)
            check_pools(exp)
    except SpecError as err:
        return Built(candidate, stage=stage_of(err.key), reason=f"{err.key}: {err.message}" if err.key else err.message)
    return Built(candidate, exp, exp.systems[0])


def stage_of(key: str) -> str:
    return next((stage for prefix, stage in STAGES if key.startswith(prefix)), "config")


def label(built: Built) -> str:
    """A candidate in a few words, for the progress lines."""
    c = built.candidate
    engine = engine_label(built.system) if built.system is not None else dict(c.batch) or "own batch limits"
    unit = "" if c.split is None else f" {c.fleet}"
    return f"{c.hardware} x{c.tensor_parallel} {c.weights}/{c.kv_cache} ({engine}){unit}"


def _systems(raw: dict) -> list:
    return list(raw.get("systems", list(PAPER_SYSTEMS)))


def _with_batch(system, batch: dict):
    """A config's system entry (a preset's name or a mapping) with the batch keys set."""
    if not batch:
        return system
    entry = {"preset": system} if isinstance(system, str) else dict(system)
    entry.update(batch)
    return entry
