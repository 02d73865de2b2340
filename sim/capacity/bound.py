"""What a deployment's own clock says before anything is simulated: the most decode tokens a replica can emit a second,
hence the most requests a second it could ever be found to hold, and the fastest a decode step can be.

Every output token after a request's first takes one iteration in which that sequence decodes, and an iteration of B
decodes takes about at least the clock's time for B decodes at the shortest context (2 tokens) without CUDA-graph
padding: a longer context, a prefill chunk beside them, a swap add time, and padding only adds it (decodes beside a
prompt may pass the largest captured size and run unpadded). So a replica emits at most about max over B of
B / step_time(B) decode tokens a second, B up to the batch limits and the KV blocks (priced at every B up to 25 and on
a 4% grid past it, each bounded by the next size over this one's time), and a rate r needs r x (mean output length
- 1) of them. It is a throughput argument, not a proof: a tile-quantized GEMM can make a mixed iteration a little
faster than its decodes alone, and a search's judgment of keeping pace forgives a short trace's small shortfall (a
backlog within 3 sqrt(N) of N arrivals). SLACK covers them with room: over 75 deployments searched in full, no answer
passed 0.65 of the bound (0.97 of it before its slack; benchmarks/measurements/plan_search.md). Each TPOT is at least
the fastest step, whatever the rate: a TPOT target under it is missed at every rate. A speculating system emits several
tokens a step: no bound.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from calibrate.clock.costmodel import CostModel
from calibrate.clock.engine_clock import EngineCostModel
from engine.core.batch import BatchShape
from engine.core.system import SystemSpec
from sim.experiment.config import Experiment, clock_for
from sim.experiment.run import trace_for

SLACK = 1.5
SAMPLE_REQUESTS = 20_000  # the most requests the workload's mean output is read from
SHORTEST_CONTEXT = 2  # a prompt of one token, and the first output token: the least a decode attends over
GRID_STEP = 1.04  # the batch sizes priced past 25: the bound is loose by at most this


@dataclass(frozen=True)
class Roofline:
    """A replica's most decode tokens a second (inf: unbounded), its fastest decode step (0: unknown), and the clock's
    label (summary.csv's cost_model)."""
    decode_tokens_per_s: float
    fastest_step_s: float
    clock: str = ""

    def rate_bound(self, decode_tokens_per_request: float) -> float:
        """The most requests a second a search can find one replica to hold (inf: no bound)."""
        if not math.isfinite(self.decode_tokens_per_s) or decode_tokens_per_request <= 0:
            return math.inf
        return SLACK * self.decode_tokens_per_s / decode_tokens_per_request


def roofline(exp: Experiment, system: SystemSpec) -> Roofline:
    """The replica's decode ceiling from its own clock (clock_for: what every probe of it runs on)."""
    clock = clock_for(exp, system)
    if system.speculative is not None:
        return Roofline(math.inf, 0.0, clock.label)
    fastest = unpadded(clock)
    tokens = system.max_num_batched_tokens if system.kind == "vllm" else None  # only vLLM's scheduler caps tokens
    most = min(system.max_seqs_per_batch, tokens or system.max_seqs_per_batch, exp.kv_pool(system).num_gpu_blocks)
    sizes = batch_sizes(most)
    # plain ints: the compiled control plane's BatchShape takes no numpy integers
    times = np.array([fastest.step_time(BatchShape((), (SHORTEST_CONTEXT,) * b, 0, 0, b)) for b in sizes.tolist()])
    # between two sizes priced, a batch is no larger than the next and takes no less than this one's time
    most_per_s = np.append(sizes[1:], sizes[-1]) / times
    return Roofline(float(most_per_s.max()), float(times.min()), clock.label)  # the least any step takes


def unpadded(clock: CostModel) -> CostModel:
    """The clock without CUDA-graph padding: decodes alone replay a graph padded to its captured size, but the same
    decodes beside a prompt's tokens may pass the largest size and run eagerly, unpadded, in less time; the least any
    iteration of B decodes takes is the unpadded time of B decodes alone."""
    if isinstance(clock, EngineCostModel) and clock.graph_sizes:
        return EngineCostModel(clock.base, clock.overlap, (), clock.serial)
    return clock


def batch_sizes(most: int) -> np.ndarray:
    """The batch sizes priced: every one up to 25, then each about GRID_STEP times the last, and `most`."""
    sizes = {min(b, most) for b in range(1, 26)}
    b = 25.0
    while b < most:
        b *= GRID_STEP
        sizes.add(min(int(round(b)), most))
    return np.array(sorted(sizes))


def decode_tokens_per_request(exp: Experiment, rate: float, seed: int) -> float:
    """The mean output tokens after the first of the workload's requests at `rate` (a trace as a probe draws it), at
    most SAMPLE_REQUESTS of them."""
    if not exp.workload.is_replay:
        rate = min(rate, SAMPLE_REQUESTS / exp.workload.duration_s)
    trace = trace_for(exp, rate, seed)
    return float(np.maximum(trace.output_len - 1, 0).mean()) if len(trace.output_len) else 0.0
