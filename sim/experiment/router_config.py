"""An experiment's `router`: a kind by name, or a mapping of its kind and parameters, checked."""
from __future__ import annotations

from typing import Any

from engine.core.system import SystemSpec
from engine.errors import SpecError
from engine.specs.checks import choice, known_keys, number
from sim.core.routers import (
    DEFAULT_BALANCE_ABS_THRESHOLD,
    DEFAULT_BALANCE_REL_THRESHOLD,
    DEFAULT_CACHE_THRESHOLD,
    ROUTER_KINDS,
    RouterSpec,
)

# cache_aware's parameters, as sgl-router names them
CACHE_AWARE_KEYS = ("cache_threshold", "balance_abs_threshold", "balance_rel_threshold")
ROUTER_KEYS = ("kind", *CACHE_AWARE_KEYS)


def router_from_config(value: Any, source: str) -> RouterSpec:
    """`router: least_outstanding`, or `router: {kind: cache_aware, cache_threshold: 0.5, ...}`."""
    if not isinstance(value, dict):
        return RouterSpec(choice(value, source, "router", ROUTER_KINDS))
    known_keys(value, ROUTER_KEYS, source, "router")
    if "kind" not in value:
        raise SpecError(source, "router.kind", f"missing required key (one of {list(ROUTER_KINDS)})")
    kind = choice(value["kind"], source, "router.kind", ROUTER_KINDS)
    if kind != "cache_aware":
        for key in CACHE_AWARE_KEYS:
            if key in value:
                raise SpecError(source, f"router.{key}", f"applies only to kind cache_aware, not {kind}")
        return RouterSpec(kind)
    return RouterSpec(
        kind,
        cache_threshold=number(value.get("cache_threshold", DEFAULT_CACHE_THRESHOLD), source,
                               "router.cache_threshold", low=0, high=1),
        balance_abs_threshold=number(value.get("balance_abs_threshold", DEFAULT_BALANCE_ABS_THRESHOLD), source,
                                     "router.balance_abs_threshold", low=0, whole=True),
        # max > rel x min: below 1 it holds whatever the loads (the most is never below the fewest), no test at all
        balance_rel_threshold=number(value.get("balance_rel_threshold", DEFAULT_BALANCE_REL_THRESHOLD), source,
                                     "router.balance_rel_threshold", low=1),
    )


def check_router(router: RouterSpec, routed: list[tuple[str, SystemSpec]], source: str) -> None:
    """cache_aware reads the prefix cache of each replica it routes to, however many there are: every system it
    routes to (`routed`: each with its key, sim.experiment.split_config.routed_systems) must have one."""
    if router.kind != "cache_aware":
        return
    for key, system in routed:
        if not system.prefix_caching:
            raise SpecError(source, "router", f"cache_aware needs prefix caching, which {key} ({system.name}) "
                            "has not: set its prefix_caching: true, or choose another router")
