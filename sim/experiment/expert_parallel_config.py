"""An experiment's `expert_parallel` (vLLM's --enable-expert-parallel), checked: the replicas are then one
data-parallel group whose N x tensor_parallel GPUs hold a mixture's experts between them
(calibrate/work/expert_parallel.py)."""
from __future__ import annotations

from typing import Any

from calibrate.work.expert_parallel import ExpertParallel
from engine.core.spec import ModelSpec
from engine.errors import SpecError

KEY = "expert_parallel"


def expert_parallel_from_config(value: Any, model: ModelSpec, replicas: int, tensor_parallel: int, split: bool,
                                source: str) -> bool:
    """`expert_parallel: true|false`, valid only for a mixture of experts whose experts its degree, vLLM's EP size
    (replicas x tensor_parallel), divides, and without a split fleet."""
    if not isinstance(value, bool):
        raise SpecError(source, KEY, f"must be true or false, got {value!r}")
    if not value:
        return False
    if not model.is_moe:
        raise SpecError(source, KEY, f"{model.name} is a dense model (num_experts 1): expert parallelism spreads a "
                        "mixture of experts' experts over the GPUs; remove the key")
    if split:
        raise SpecError(source, KEY, "not supported with split: the prefill and decode pools would be two "
                        "data-parallel groups of their own GPUs, degrees and loads, and servesim prices one group, "
                        "the experiment's replicas, at equal load; leave expert_parallel out with split")
    group = ExpertParallel(replicas, tensor_parallel)
    if model.num_experts % group.degree:
        valid = [d for d in range(1, model.num_experts + 1) if model.num_experts % d == 0]
        raise SpecError(source, KEY, (
            f"its degree, replicas x tensor_parallel = {replicas} x {tensor_parallel} = {group.degree} GPUs (vLLM's "
            f"EP size, DP x TP), does not divide {model.name}'s {model.num_experts} experts; give replicas x "
            f"tensor_parallel among {valid}"))
    return True


def expert_parallel_group(enabled: bool, replicas: int, tensor_parallel: int) -> ExpertParallel | None:
    """The data-parallel group a run's clock and KV pool price, or None without expert parallelism."""
    return ExpertParallel(replicas, tensor_parallel) if enabled else None
