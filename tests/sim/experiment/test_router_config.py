"""`router`: a kind by name or a mapping of its kind and cache_aware's thresholds; every error one line naming
the key and what is valid."""
import pytest

from engine.errors import SpecError
from sim.core.routers import RouterSpec
from sim.experiment.config import load_experiment

CACHING = "systems:\n  - {preset: vllm, prefix_caching: true}\nreplicas: 4\n"


def fleet(small, router: str, systems: str = CACHING) -> str:
    return small.replace("systems: [fastertransformer, orca-max, orca-pow2, orca-oracle, vllm]\n", systems) + \
        f"router: {router}\n"


@pytest.mark.parametrize("router, expected", [
    ("power_of_two", RouterSpec("power_of_two")),
    ("{kind: least_outstanding}", RouterSpec("least_outstanding")),
    ("cache_aware", RouterSpec("cache_aware", 0.5, 32, 1.0001)),  # sgl-router's defaults
    ("{kind: cache_aware, cache_threshold: 0.3, balance_abs_threshold: 64, balance_rel_threshold: 1.5}",
     RouterSpec("cache_aware", 0.3, 64, 1.5)),
])
def test_the_plain_and_the_mapping_forms(write_config, small, router, expected):
    assert load_experiment(write_config(fleet(small, router))).router == expected


@pytest.mark.parametrize("router, key, words", [
    ("random", "router", "'power_of_two', 'cache_aware'"),
    ("{kind: fastest}", "router.kind", "'power_of_two', 'cache_aware'"),
    ("{cache_threshold: 0.5}", "router.kind", "missing"),
    ("{kind: cache_aware, cache_treshold: 0.5}", "router.cache_treshold", "cache_threshold"),
    ("{kind: cache_aware, cache_threshold: 1.5}", "router.cache_threshold", "[0, 1]"),
    ("{kind: cache_aware, balance_abs_threshold: 2.5}", "router.balance_abs_threshold", "non-negative integer"),
    ("{kind: cache_aware, balance_rel_threshold: 0.5}", "router.balance_rel_threshold", ">= 1"),
    ("{kind: power_of_two, cache_threshold: 0.5}", "router.cache_threshold", "only to kind cache_aware"),
    ("[cache_aware]", "router", "not one of"),
])
def test_errors_are_one_line_naming_the_key(write_config, small, router, key, words):
    path = write_config(fleet(small, router))
    with pytest.raises(SpecError) as err:
        load_experiment(path)
    message = str(err.value)
    assert err.value.key == key and words in message and str(path) in message and "\n" not in message, message


def test_cache_aware_needs_prefix_caching_on_every_system(write_config, small):
    systems = "systems:\n  - {preset: vllm, name: cached, prefix_caching: true}\n  - vllm\nreplicas: 4\n"
    with pytest.raises(SpecError) as err:
        load_experiment(write_config(fleet(small, "cache_aware", systems)))
    message = str(err.value)
    assert err.value.key == "router" and "systems[1]" in message and "prefix_caching" in message, message
    assert "\n" not in message
