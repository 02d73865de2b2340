"""The engine's host work per iteration: what a step costs beyond its timed forward.

A serving step schedules, builds the inputs and block tables, runs the forward, and completes and
records; the profiler's grid times the forward alone. This measures the rest on the engine itself:
a short replay of a seeded synthetic trace (its own, never a validation's), with the engine's
clock="step" accounting, gives each iteration's host seconds beside its shape; a non-negative fit
per iteration, per sequence and per prompt token is the profile's `host` term, which the simulator
charges on top of the forward.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from engine.core.spec import ModelSpec

HOST_TERMS = {
    "per_iteration_s": "every step: scheduling, launching, recording",
    "per_sequence_s": "each sequence in the batch: its block table, inputs, sampled token, completion",
    "per_prefill_token_s": "each prompt token: its token ids and slot mapping built on the host",
}
NUM_BURST = 48  # arriving within a few seconds: batches of every size from one up, with and without prompts
NUM_TRICKLE = 16  # then one about every second: the small batches a lightly loaded server runs
TRICKLE_GAP_S = 1.0


def calibration_trace(spec: ModelSpec, seed: int = 0) -> list[tuple[float, int, int, int]]:
    """(arrival_s, prompt_len, output_len, n): short chat-like requests, a burst and then a trickle.

    Both matter: a served batch costs more than the same batch timed alone by an amount that
    does not scale with its size (calibrate/profiling/serving.py), so a replay of large batches alone
    under-states it for the small ones a lightly loaded server runs."""
    rng = np.random.default_rng(seed)
    count = NUM_BURST + NUM_TRICKLE
    longest_prompt = max(16, min(128, spec.max_seq_len // 2))
    prompts = np.exp(rng.uniform(np.log(8), np.log(longest_prompt), count)).astype(int)
    outputs = rng.integers(4, 33, count)
    burst = np.cumsum(rng.exponential(0.05, NUM_BURST))
    trickle = burst[-1] + np.cumsum(rng.exponential(TRICKLE_GAP_S, NUM_TRICKLE))
    arrivals = np.concatenate([burst, trickle])
    return [(float(a), int(p), int(o), 1) for a, p, o in zip(arrivals, prompts, outputs)]


def calibration_replay(runner, block_size: int, num_blocks: int = 256):
    """Replay the calibration trace on a vLLM engine sharing the runner's weights, with clock="step".
    Returns the replay's records, and every iteration's batch shape and timed forward in order."""
    from engine.core.system import PAPER_SYSTEMS
    from engine.runtime.engine import Engine

    system = replace(PAPER_SYSTEMS["vllm"], block_size=block_size)
    engine = Engine(runner.spec, system, runner.device, runner.dtype, num_gpu_blocks=num_blocks, num_cpu_blocks=0,
                    attention_backend=runner.attention_backend, model=runner.model, clock="step",
                    cuda_graphs=runner.cuda_graphs)
    shapes, forwards = [], []
    execute = engine.runner.execute

    def timed_execute(batch, *args, **kwargs):
        sampled, seconds = execute(batch, *args, **kwargs)
        shapes.append(batch.shape())
        forwards.append(seconds)
        return sampled, seconds

    engine.runner.execute = timed_execute
    result = engine.replay(calibration_trace(runner.spec))
    return engine.runner, result, shapes, forwards


def host_rows(result) -> list[dict]:
    """One row per iteration of a calibration replay (kind "host"): its shape, its host seconds outside the
    timed step (time_s, as always), and its whole step split: device_s, the span of its device work, and
    host_s, the rest of the step's wall time (its duration on the step clock less device_s)."""
    rows = []
    device = result.device_s or [float("nan")] * len(result.iterations)
    for it, host, device_s in zip(result.iterations, result.host_s, device):
        rows.append({"kind": "host", "num_prefills": it.num_prefills, "num_prefill_tokens": it.num_prefill_tokens,
                     "num_decodes": it.num_decodes, "num_seqs": it.num_prefills + it.num_decodes, "time_s": host,
                     "device_s": device_s, "host_s": max(it.duration_s - device_s, 0.0)})
    return rows[1:]  # the first step pays one-off costs no later one does


def host_time(host: dict, num_seqs: int, num_prefill_tokens: int) -> float:
    return (host["per_iteration_s"] + host["per_sequence_s"] * num_seqs
            + host["per_prefill_token_s"] * num_prefill_tokens)


def host_parts(host: dict, num_seqs: int, num_prefill_tokens: int) -> dict[str, float]:
    """host_time by term, in the order it adds them (so that they add up to it to the bit)."""
    return {"per_iteration": host["per_iteration_s"], "per_sequence": host["per_sequence_s"] * num_seqs,
            "per_prefill_token": host["per_prefill_token_s"] * num_prefill_tokens}
