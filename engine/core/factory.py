"""One scheduler per system: the only place that maps a SystemSpec to its policy class."""
from __future__ import annotations

from collections.abc import Callable

from engine.core.scheduler.base import Scheduler
from engine.core.scheduler.fastertransformer import FasterTransformerScheduler
from engine.core.scheduler.orca import OrcaScheduler
from engine.core.scheduler.vllm import VLLMScheduler
from engine.core.scheduler.vllm_chunked import VLLMChunkedScheduler
from engine.core.scheduler.vllm_separate import VLLMSeparateScheduler
from engine.core.spec import ModelSpec
from engine.core.system import SystemSpec

# each takes (system, max_seq_len, num_gpu_blocks, num_cpu_blocks)
SCHEDULERS: dict[str, Callable[[SystemSpec, int, int, int], Scheduler]] = {
    "vllm": VLLMScheduler,
    "orca": OrcaScheduler,
    "fastertransformer": FasterTransformerScheduler,
}


# vLLM's prefill policies (SystemSpec.prefill_policy): mixed is VLLMScheduler itself
VLLM_POLICIES: dict[str, Callable[[SystemSpec, int, int, int], Scheduler]] = {
    "mixed": VLLMScheduler,
    "separate": VLLMSeparateScheduler,
    "chunked": VLLMChunkedScheduler,
}


def make_scheduler(system: SystemSpec, model: ModelSpec, num_gpu_blocks: int, num_cpu_blocks: int) -> Scheduler:
    kind = VLLM_POLICIES[system.prefill_policy] if system.kind == "vllm" else SCHEDULERS[system.kind]
    return kind(system, model.max_seq_len, num_gpu_blocks, num_cpu_blocks)
