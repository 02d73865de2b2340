"""What an answer was computed on, carried beside it: the model, the GPU and its tensor parallelism, the number
formats, the engine, the workload, and the config as it was resolved (its --set overrides applied).

A capacity table read a month later, or next to another one, must say what deployment each row is; `servesim
capacity` and `servesim plan` write these columns beside each answer, and `resolved.yaml` beside the table.
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import yaml

from calibrate.hardware.precision import Precision
from engine.core.system import SystemSpec
from sim.experiment.config import Experiment
from sim.workload.config import WorkloadConfig

# the columns setup_of gives, in this order, after an answer's own
SETUP_COLUMNS = ("model", "hardware", "tensor_parallel", "precision", "engine", "workload")


def workload_label(workload: WorkloadConfig, rates: tuple[float, ...] = ()) -> str:
    """A workload in a few words: the dataset and its arrivals (all at once where every one of `rates` is inf), or
    the trace replayed."""
    if workload.is_replay:
        return f"replay of {Path(workload.trace).name}"
    dataset = Path(workload.dataset).name if "/" in str(workload.dataset) else workload.dataset
    if rates and all(workload.all_at_once(rate) for rate in rates):
        return f"{dataset}, {workload.num_requests} requests at once"
    return f"{dataset}, {workload.arrival} arrivals"


# the legacy dtype_bytes (every byte count alike, a config's default at 2) by the format it amounts to
UNIFORM_FORMATS = {1: "8-bit/8-bit", 2: "fp16/fp16", 4: "fp32/fp32"}


def precision_label(precision: Precision) -> str:
    """weights/KV cache formats, e.g. fp8/fp16; the legacy dtype_bytes by the format it amounts to."""
    if precision.dtype_bytes is not None:
        return UNIFORM_FORMATS[precision.dtype_bytes]
    return f"{precision.weights}/{precision.kv_cache}"


def engine_label(system: SystemSpec) -> str:
    """The scheduler a system runs and its batch limits: vllm v1, 1024 seqs, 8192 tokens."""
    kind = {"vllm": f"vllm {system.prefill_policy}", "orca": f"orca {system.reservation}"}.get(system.kind, system.kind)
    tokens = "" if system.max_num_batched_tokens is None or system.kind != "vllm" \
        else f", {system.max_num_batched_tokens} tokens"
    return f"{kind}, {system.max_seqs_per_batch} seqs{tokens}"


def setup_of(exp: Experiment, system: SystemSpec) -> dict:
    """SETUP_COLUMNS for one system of an experiment."""
    return {"model": exp.model.name, "hardware": exp.hardware.name, "tensor_parallel": exp.tensor_parallel,
            "precision": precision_label(exp.precision), "engine": engine_label(system),
            "workload": workload_label(exp.workload)}


def resolved_yaml(raw: dict, source: str, overrides: Sequence[str] = ()) -> str:
    """resolved.yaml: the config as the command read it, its overrides applied, headed by where it came from."""
    head = f"# {source}" + (f", with --set {' --set '.join(overrides)}" if overrides else "") + "\n"
    return head + yaml.safe_dump(raw, sort_keys=False)
