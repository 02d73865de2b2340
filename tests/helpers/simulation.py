"""What the simulator's differential tests share: a small-context model, its roofline, the systems under test,
seeded random traces and two cost models that corner the clock (fast-forward against step by step, a fleet
apart against together, beam searches)."""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from calibrate.clock.costmodel import CostModel
from calibrate.clock.roofline import RooflineCostModel
from calibrate.hardware.hardware import load_hardware
from engine.core.system import PAPER_SYSTEMS, VLLM_V1
from engine.specs.loader import load_model_spec
from sim.workload.trace import Trace

MODEL = replace(load_model_spec("opt-13b"), max_seq_len=512)  # short requests: small pools queue and preempt
ROOFLINE = RooflineCostModel(MODEL, load_hardware("a100-40gb"))
SYSTEMS = {
    **PAPER_SYSTEMS,
    "vllm-recompute": replace(PAPER_SYSTEMS["vllm"], name="vLLM recompute", preemption="recompute"),
    "vllm-swap": replace(PAPER_SYSTEMS["vllm"], name="vLLM swap", preemption="swap"),
    "vllm-block8": replace(PAPER_SYSTEMS["vllm"], name="vLLM 8", block_size=8, watermark=0.0),
    "fastertransformer-b4": replace(PAPER_SYSTEMS["fastertransformer"], name="FT B=4", max_batch_size=4),
    # vLLM's later prefill policies: v0.2-v0.3's prompt-only steps, and chunked prefill at vLLM's 512 tokens
    "vllm-separate": replace(PAPER_SYSTEMS["vllm"], name="vLLM separate", prefill_policy="separate"),
    "vllm-separate-delay": replace(PAPER_SYSTEMS["vllm"], name="vLLM v0.3 delay", prefill_policy="separate",
                                   delay_factor=0.5),
    "vllm-chunked": replace(PAPER_SYSTEMS["vllm"], name="vLLM chunked", prefill_policy="chunked",
                            max_num_batched_tokens=512),
    # vLLM V1, asynchronous scheduling and all, without prefix caching (random traces carry no token identities)
    "vllm-v1": replace(VLLM_V1, prefix_caching=False, max_num_batched_tokens=512),
}


def random_trace(seed: int, count: int = 120, *, rate: float = 8.0, n: int = 1, beams: int = 1, prefix: int = 0,
                 arrivals: str = "poisson") -> Trace:
    rng = np.random.default_rng(seed)
    if arrivals == "poisson":  # in 10 ms quanta, as the workloads draw them: several requests share a time
        arrival = np.floor(np.cumsum(rng.exponential(1 / rate, count)) * 100) / 100
    elif arrivals == "burst":
        arrival = np.sort(rng.choice([0.0, 0.5, 3.0, 3.0001], count))
    else:
        arrival = np.cumsum(rng.gamma(0.0625, 16 / rate, count))  # CV 4
    prompt = rng.integers(prefix + 1, 260, count)
    output = rng.integers(1, 240, count)
    width = rng.choice([1, beams], count) if beams > 1 else 1  # beam searches among plain requests
    samples = rng.integers(1, n + 1, count) if n > 1 else 1
    return Trace(arrival, prompt, output, samples, source="test", prefix_len=prefix, beam_width=width)


def grid_trace(seed: int, count: int = 150) -> Trace:
    """Arrivals on the binary grid GridCost's iterations end on: ties of an arrival and an iteration's end, again and
    again, both ways round."""
    rng = np.random.default_rng(seed)
    return Trace(np.sort(rng.integers(0, 400, count)) * 0.125, rng.integers(5, 200, count),
                 rng.integers(2, 200, count), source="grid")


class GridCost(CostModel):
    """Times on a binary grid: iterations end exactly when requests arrive, as often as possible."""

    source = "grid(test)"

    def __init__(self, decode_s: float = 0.125):
        self.decode_s = decode_s

    def iteration_time(self, batch) -> float:
        return 0.25 if batch.num_prefills else self.decode_s

    def swap_time(self, num_blocks: int) -> float:
        return 0.0


class NanAfter(CostModel):
    """A cost model that breaks on long contexts: the run must stop with the same error either way."""

    source = "nan-after(test)"

    def iteration_time(self, batch) -> float:
        return math.nan if batch.sum_decode_context > 450 else 0.01 + 1e-5 * batch.sum_decode_context

    def swap_time(self, num_blocks: int) -> float:
        return 0.0
