"""One scheduler per system: the only place that maps a SystemSpec to its policy class."""
from __future__ import annotations

from collections.abc import Callable

from engine.core.scheduler.base import Scheduler
from engine.core.scheduler.fastertransformer import FasterTransformerScheduler
from engine.core.scheduler.orca import OrcaScheduler
from engine.core.scheduler.vllm import VLLMScheduler
from engine.core.spec import ModelSpec
from engine.core.system import SystemSpec

# each takes (system, max_seq_len, num_gpu_blocks, num_cpu_blocks)
SCHEDULERS: dict[str, Callable[[SystemSpec, int, int, int], Scheduler]] = {
    "vllm": VLLMScheduler,  # each of its prefill policies (SystemSpec.prefill_policy)
    "orca": OrcaScheduler,
    "fastertransformer": FasterTransformerScheduler,
}


def make_scheduler(system: SystemSpec, model: ModelSpec, num_gpu_blocks: int, num_cpu_blocks: int) -> Scheduler:
    return SCHEDULERS[system.kind](system, model.max_seq_len, num_gpu_blocks, num_cpu_blocks)
