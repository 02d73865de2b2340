"""`servesim plan`'s tables: the fleets that meet the SLO, cheapest first, and every deployment rejected with its
reason; each row carries its setup (sim/experiment/setup.py) and its GPU's price and where the price came from.

A fleet's dollars per million output tokens are its dollars an hour over the output tokens the total rate brings an
hour: the rate times the mean tokens a request generated in the probe the answer rests on.
"""
from __future__ import annotations

import math

from sim.capacity.candidates import Built
from sim.capacity.deploy_config import DeploymentSearch
from sim.capacity.deploy_search import RANKED, Outcome
from sim.capacity.plan import stopped_by
from sim.capacity.search import Probe, rate_ceiling
from sim.experiment.setup import setup_of

SECONDS_AN_HOUR = 3600.0
SHAPE = ("hardware", "tensor_parallel", "precision", "fleet", "max_num_seqs", "max_num_batched_tokens")
SETUP = ("system", "engine", "model", "workload", "cost_model")
PRICE = ("usd_per_gpu_hour", "price_source", "price_date")
REJECTED_COLUMNS = (*SHAPE, "stage", "reason", "usd_per_hour_at_least", "rate_bound_rps", *SETUP, *PRICE)


def ranked_columns(search: DeploymentSearch) -> tuple[str, ...]:
    """plan.csv's columns, whether or not any fleet made it."""
    return ("rank", *SHAPE, "replicas", "gpus", "usd_per_hour", "usd_per_million_output_tokens", "rate_per_replica_rps",
            "rate_bound_rps", *(t.metric for t in search.targets), "limited_by", *SETUP, *PRICE)


def ranked_rows(search: DeploymentSearch, outcomes: list[Outcome]) -> list[dict]:
    """plan.csv: a row per fleet that meets the SLO, cheapest first (then the most a replica holds)."""
    ranked = sorted((o for o in outcomes if o.stage == RANKED), key=lambda o: (o.usd_per_hour, -o.rate,
                                                                                 o.built.candidate.index))
    return [{"rank": i + 1, **_ranked_row(search, o)} for i, o in enumerate(ranked)]


def rejected_rows(search: DeploymentSearch, outcomes: list[Outcome]) -> list[dict]:
    """plan_rejected.csv: a row per deployment that is not in plan.csv, in the search space's order."""
    return [{**_shape(o.built), "stage": o.stage, "reason": o.reason,
             "usd_per_hour_at_least": _cents(o.usd_per_hour), "rate_bound_rps": o.bound_rps, **_setup(o), **_price(o)}
            for o in outcomes if o.stage != RANKED]


def _ranked_row(search: DeploymentSearch, outcome: Outcome) -> dict:
    answer = _answer(outcome)
    tokens = answer.summary["throughput_tokens_per_s"] / answer.summary["throughput_rps"]
    exp = outcome.built.exp
    assert exp is not None
    row = {**_shape(outcome.built), "replicas": outcome.units,
           "gpus": outcome.units * outcome.built.candidate.gpus_a_unit if outcome.units else 0,
           "usd_per_hour": _cents(outcome.usd_per_hour),
           "usd_per_million_output_tokens": round(outcome.usd_per_hour / (search.rate * tokens * SECONDS_AN_HOUR) * 1e6,
                                                  6),
           "rate_per_replica_rps": outcome.rate, "rate_bound_rps": outcome.bound_rps}
    row.update({t.metric: answer.summary[t.metric] for t in search.targets})
    row["limited_by"] = stopped_by(outcome.rate, outcome.path, search.targets, rate_ceiling(exp))
    return {**row, **_setup(outcome), **_price(outcome)}


def _cents(usd: float) -> float:
    """Dollars an hour to a hundredth of a cent: a price times a GPU count, without a float's last digits."""
    return round(usd, 4)


def _answer(outcome: Outcome) -> Probe:
    """The probe at the rate the search found: what the fleet's latency and tokens are read from."""
    return next(p for p in outcome.path if p.rate == outcome.rate)


def _shape(built: Built) -> dict:
    c = built.candidate
    batch = dict(c.batch)
    system = built.system
    return {"hardware": c.hardware, "tensor_parallel": c.tensor_parallel, "precision": f"{c.weights}/{c.kv_cache}",
            "fleet": c.fleet,
            "max_num_seqs": system.max_seqs_per_batch if system is not None else batch.get("max_num_seqs", math.nan),
            "max_num_batched_tokens": _tokens(built, batch)}


def _tokens(built: Built, batch: dict):
    system = built.system
    if system is None:
        return batch.get("max_num_batched_tokens", math.nan)
    return system.max_num_batched_tokens if system.kind == "vllm" and system.max_num_batched_tokens else math.nan


def _setup(outcome: Outcome) -> dict:
    """The setup columns but those _shape gave; empty where the deployment never built."""
    built = outcome.built
    if built.exp is None or built.system is None:
        return {"system": "", "engine": "", "model": "", "workload": "", "cost_model": ""}
    setup = setup_of(built.exp, built.system)
    return {"system": built.system.name, "engine": setup["engine"], "model": setup["model"],
            "workload": setup["workload"], "cost_model": outcome.clock}


def _price(outcome: Outcome) -> dict:
    return {"usd_per_gpu_hour": outcome.price.usd_per_gpu_hour, "price_source": outcome.price.source,
            "price_date": outcome.price.date}

