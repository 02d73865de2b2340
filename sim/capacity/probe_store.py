"""Where `servesim plan` keeps every probe it ran, so that a search interrupted and run again simulates none twice.

Each deployment's probes are one JSON file, out/plan_probes/<deployment>.json: a digest of what a probe of it depends
on (its config, every file and spec it reads, the seed: sim/experiment/fingerprint.py) and each probe's (rate,
replicas) and summary. A file whose digest differs (the config, a spec or a data file changed) is not read; one written
by a killed run is whole or absent (atomic writes). The searches themselves are replayed from the probes, so a resumed
plan takes the same paths and writes the same tables.
"""
from __future__ import annotations

import json
from pathlib import Path

from engine.core.system import SystemSpec
from sim.capacity.search import Point, Probe
from sim.experiment.config import Experiment
from sim.experiment.fingerprint import config_digest, input_digest
from sim.experiment.output import write_json

FOLDER = "plan_probes"


def digest(exp: Experiment, system: SystemSpec, seed: int, unit: str) -> str:
    """What every probe of a deployment depends on but its rate and replicas; `unit`: its prefill:decode unit."""
    return f"{config_digest(exp, system, 0.0, seed, input_digest(exp))}-{unit}"


def kept(out_dir: Path, slug: str) -> bool:
    """Whether an earlier run kept probes of this deployment (of whatever digest)."""
    return (Path(out_dir) / FOLDER / f"{slug}.json").is_file()


def load(out_dir: Path, slug: str, expected: str) -> dict[Point, Probe]:
    """The probes an earlier run made of a deployment of the same digest; none if there is no such file."""
    path = Path(out_dir) / FOLDER / f"{slug}.json"
    if not path.is_file():
        return {}
    saved = json.loads(path.read_text())
    if saved.get("digest") != expected:
        return {}
    return {(p["rate"], p["replicas"]): Probe(p["rate"], p["replicas"], p["summary"]) for p in saved["probes"]}


def save(out_dir: Path, slug: str, expected: str, known: dict[Point, Probe]) -> None:
    probes = [{"rate": p.rate, "replicas": p.replicas, "summary": p.summary} for p in known.values()]
    write_json({"digest": expected, "probes": probes}, Path(out_dir) / FOLDER / f"{slug}.json")
