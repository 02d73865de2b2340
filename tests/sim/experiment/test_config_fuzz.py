"""Hostile configs at random: every mutation of a valid config either runs, with finite and non-negative
metrics, or is refused with a one-line user error (a SpecError, or an Unservable found while serving:
the two the CLI prints as one line with exit status 2). Never a traceback, a hang or garbage.

Mutations change types and signs, set NaN, inf and huge values, remove keys and add unknown ones.
Bounded for CI: a fixed sequence of examples (derandomized), a run of a few simulated seconds each.
"""
from __future__ import annotations

import copy
import math

import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from calibrate.cost_models.profile_model import ProfileCostModel
from calibrate.fitting.profile_file import load_profile
from calibrate.parts.host import HOST_TERMS
from calibrate.work.features import TERMS
from engine.core.batch import BatchShape
from engine.errors import SpecError, Unservable
from sim.experiment.config import load_experiment
from sim.experiment.metrics import SIGNED_METRICS, SUMMARY_METRICS
from sim.experiment.run import run_one

VALID = {
    "name": "fuzz", "model": "opt-125m", "hardware": "a100-40gb", "tensor_parallel": 1, "dtype_bytes": 2,
    "kv_cache_gib": 0.5, "swap_space_gib": 1,
    "cost_model": {"kind": "roofline", "compute_efficiency": 0.68, "bandwidth_efficiency": 0.76,
                   "pcie_efficiency": 0.8, "overhead_s": 0.0},
    "workload": {"dataset": "sharegpt", "arrival": "gamma", "cv": 1.0, "duration_s": 4, "n": 1},  # cv: gamma only
    "systems": [{"preset": "vllm", "block_size": 16, "max_num_batched_tokens": 2560, "max_num_seqs": 256,
                 "watermark": 0.01, "preemption": "swap", "prefill_policy": "separate", "max_paddings": 256,
                 "delay_factor": 0.0}],  # separate: the policy that reads every vLLM key
    "rates": [2.0], "seeds": [0], "warmup_s": 0.5, "max_time_factor": 2.0, "replicas": 1,
    "router": {"kind": "power_of_two"},  # the mapping form: its keys fuzzed too
}
HOSTILE = [math.nan, math.inf, -math.inf, 0, -1, -0.5, 1e-300, 1e308, 10**18, 2**63, 0.5, 1.5, 3, 7,
           "text", "", True, False, None, [], {}, [1, 2], {"a": 1}]


def _paths(node, prefix=()) -> list[tuple]:
    """Every key path in a config, mappings and the first list entry included."""
    paths = []
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else []
    for key, value in items:
        paths.append(prefix + (key,))
        paths.extend(_paths(value, prefix + (key,)))
    return paths


PATHS = _paths(VALID)


def _parent(config: dict, path: tuple):
    node = config
    for key in path[:-1]:
        node = node[key]
    return node


def _mutate(config: dict, mutation: tuple) -> None:
    kind, path, value = mutation
    try:
        if kind == "extra":  # an unknown key beside the real ones
            target = _parent(config, path + ("bogus_key",))
            if isinstance(target, dict):
                target["bogus_key"] = value
        elif kind == "set":
            _parent(config, path)[path[-1]] = value
        else:
            del _parent(config, path)[path[-1]]
    except (KeyError, IndexError, TypeError):
        pass  # an earlier mutation replaced the mapping this one walks through: nothing to change


mutations = st.one_of(
    st.tuples(st.just("set"), st.sampled_from(PATHS), st.sampled_from(HOSTILE)),
    st.tuples(st.just("set"), st.sampled_from(PATHS), st.floats(allow_nan=True, allow_infinity=True)),
    st.tuples(st.just("delete"), st.sampled_from(PATHS), st.none()),
    st.tuples(st.just("extra"), st.sampled_from([(), ("workload",), ("cost_model",), ("systems", 0), ("router",)]),
              st.sampled_from(HOSTILE)),
)


def check_metrics(summary: dict, changes) -> None:
    """Every metric finite and non-negative (backlog_growth may be negative), or NaN: a metric with nothing to
    measure (no decode to time, nothing after the warm-up)."""
    for metric in SUMMARY_METRICS:
        value = float(summary[metric])
        signed = metric in SIGNED_METRICS
        assert math.isnan(value) or (math.isfinite(value) and (value >= 0 or signed)), f"{changes}: {metric}={value}"


def _is_user_error(err: Exception) -> bool:
    return isinstance(err, (SpecError, Unservable)) and "\n" not in str(err) and str(err) != ""


@settings(max_examples=100, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(st.lists(mutations, min_size=1, max_size=3))
def test_a_mutated_config_runs_or_is_refused_in_one_line(tmp_path, changes):
    runs_or_is_refused(tmp_path, VALID, changes)


def runs_or_is_refused(tmp_path, valid: dict, changes) -> None:
    """The valid config with the changes made loads and runs with sane metrics, or is refused in one line."""
    config = copy.deepcopy(valid)
    for change in changes:
        _mutate(config, change)
    path = tmp_path / "fuzz.yaml"
    path.write_text(yaml.safe_dump(config))
    try:
        exp = load_experiment(path)
    except Exception as err:  # noqa: BLE001 -- the assertion is the point: which errors escape
        assert _is_user_error(err), f"{changes} -> {type(err).__name__}: {err}"
        return
    assume(max(exp.rates) * exp.workload.duration_s <= 50)  # valid but long (workload: {} is an hour of traffic)
    try:
        summary = run_one(exp, exp.systems[0], exp.rates[0], exp.seeds[0]).summary
    except Exception as err:  # noqa: BLE001
        assert _is_user_error(err), f"{changes} -> {type(err).__name__}: {err}"
        return
    check_metrics(summary, changes)


PROFILE_NUMBERS = [("coefficients", term) for term in TERMS] + [("host", term) for term in HOST_TERMS] + [
    ("token_costs_s", 0), ("token_costs_s", 1), ("swap_s_per_copy",), ("swap_s_per_byte",), ("heldout_mape",),
    ("tensor_parallel",), ("block_size",), ("token_knots", 0)]


@settings(max_examples=60, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.sampled_from(PROFILE_NUMBERS), st.sampled_from(HOSTILE)), min_size=1, max_size=2))
def test_a_mutated_profile_loads_with_sane_step_times_or_is_refused(tmp_path, changes):
    raw = {"model": "opt-125m", "device": "cuda", "device_name": "test", "dtype": "float16", "tensor_parallel": 1,
           "block_size": 16, "token_knots": [1, 512], "token_costs_s": [0.001, 0.004],
           "coefficients": {term: 1e-7 for term in TERMS}, "heldout_mape": 0.05, "heldout_p95_ape": 0.1,
           "train_rows": 10, "heldout_rows": 2, "created": "2026-01-01", "command": "fuzz",
           "swap_s_per_copy": 1e-6, "swap_s_per_byte": 1e-11,
           "host": {term: 1e-5 for term in HOST_TERMS}}
    for path, value in changes:
        _parent(raw, path)[path[-1]] = value
    file = tmp_path / "p.yaml"
    file.write_text(yaml.safe_dump(raw))
    try:
        model = ProfileCostModel(load_profile(file))
    except SpecError as err:
        assert "\n" not in str(err)
        return
    for shape in (BatchShape((100,), (), 0), BatchShape((), (50, 700), 4), BatchShape((2000,), (10,) * 200, 0)):
        seconds = model.step_time(shape)
        # never NaN or negative; inf (huge coefficients times a big batch) the simulator's clock refuses,
        # naming the cost model (tests/sim/test_hostile_inputs.py)
        assert seconds >= 0, f"{changes} -> {seconds}"


# a split fleet's config, fuzzed the same way: its pools, its link and what a full decode pool does
VALID_SPLIT = {**{k: v for k, v in VALID.items() if k not in ("replicas", "router")},
               "split": {"prefill": {"replicas": 1, "hardware": "a100-80gb", "tensor_parallel": 1, "kv_cache_gib": 0.5,
                                     "system": "vllm"},
                         "decode": {"replicas": 2, "kv_cache_gib": 0.25},
                         "kv_link": {"kind": "custom", "bytes_per_s": 2.5e10, "latency_s": 1e-5},
                         "on_decode_full": "recompute"}}
SPLIT_PATHS = [path for path in _paths(VALID_SPLIT) if path[0] == "split"]
split_mutations = st.one_of(
    st.tuples(st.just("set"), st.sampled_from(SPLIT_PATHS), st.sampled_from(HOSTILE)),
    st.tuples(st.just("delete"), st.sampled_from(SPLIT_PATHS), st.none()),
    st.tuples(st.just("extra"), st.sampled_from([("split",), ("split", "prefill"), ("split", "kv_link")]),
              st.sampled_from(HOSTILE)),
)


@settings(max_examples=60, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(st.lists(split_mutations, min_size=1, max_size=2))
def test_a_mutated_split_config_runs_or_is_refused_in_one_line(tmp_path, changes):
    runs_or_is_refused(tmp_path, VALID_SPLIT, changes)
