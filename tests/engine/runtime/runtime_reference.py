"""Helpers for the runtime tests: a dense no-cache reference, a step recorder, and a replay checked against the
simulator."""
from collections import defaultdict

import pytest

torch = pytest.importorskip("torch")

from calibrate.clock.costmodel import CostModel  # noqa: E402
from engine.runtime.model import AttentionMetadata, Decoder  # noqa: E402

BACKEND = "torch"
ATOL = 1e-4  # fp32 paged vs dense: only summation order differs


@torch.inference_mode()
def dense_logits(model: Decoder, tokens: list[int]) -> torch.Tensor:
    """Logits at every position of `tokens`: plain causal attention, no KV cache."""
    ids = torch.tensor(tokens, device=model.device)
    positions = torch.arange(len(tokens), device=model.device)
    hidden = model(ids, positions, AttentionMetadata.dense(len(tokens)))
    return model.logits(hidden).float().cpu()


def dense_greedy(model: Decoder, prompt: list[int], max_new_tokens: int) -> list[int]:
    """Recompute the whole sequence every step and take the argmax."""
    tokens = list(prompt)
    for _ in range(max_new_tokens):
        tokens.append(int(dense_logits(model, tokens)[-1].argmax()))
    return tokens[len(prompt):]


class StepRecorder:
    """Wraps a runner's execute: for every sampled token, the sequence's tokens before it,
    the logits it was sampled from, and the token."""

    def __init__(self, runner):
        self.steps = defaultdict(list)  # seq_id -> [(prefix tokens, logits row, token)]
        self.batches = []
        execute = runner.execute

        def recording_execute(batch, tokens, block_table_fn, sampling="greedy"):
            rows = {}
            runner.logits_hook = lambda ids, logits: rows.update(
                {s: logits[r].float().cpu() for r, group in enumerate(ids) for s in group})
            sampled, seconds = execute(batch, tokens, block_table_fn, sampling)
            self.batches.append(batch)
            for seq_id, token in sampled.items():
                self.steps[seq_id].append((list(tokens[seq_id]), rows[seq_id], token))
            return sampled, seconds

        runner.execute = recording_execute

    def full_tokens(self, seq_id: int) -> list[int]:
        prefix, _, token = self.steps[seq_id][-1]
        return prefix + [token]

    def check_against_dense(self, model: Decoder, atol: float = ATOL) -> int:
        """Every step's logits equal the dense forward over that sequence's own tokens."""
        checked = 0
        for seq_id, steps in self.steps.items():
            full = self.full_tokens(seq_id)
            reference = dense_logits(model, full)
            for prefix, logits, _token in steps:
                assert prefix == full[:len(prefix)], f"sequence {seq_id}: tokens changed under it"
                where = f"sequence {seq_id} at length {len(prefix)}"
                torch.testing.assert_close(logits, reference[len(prefix) - 1], atol=atol, rtol=0,
                                           msg=lambda m, where=where: f"{where}: {m}")
                checked += 1
        return checked


class AffineCost(CostModel):
    """Iteration times the engine's replay and the simulator both take."""

    source = "test"

    def iteration_time(self, batch):
        return 0.005 + 1e-4 * batch.num_prefill_tokens + 2e-5 * batch.sum_decode_context

    def swap_time(self, num_blocks):
        return 1e-4 * num_blocks


def replay_as_simulated(spec, system, trace, num_gpu_blocks: int, num_cpu_blocks: int, run_model: bool) -> dict:
    """Replays trace on the engine at AffineCost's iteration times, asserts every iteration and request equal the
    simulator's on the same pools, and returns the engine's request columns: the same trace and times give the
    same decisions, so a real-vs-simulated difference is the cost model's error and nothing else."""
    pytest.importorskip("simpy")
    from engine.runtime.engine import Engine
    from sim.core.simulate import simulate

    cost = AffineCost()
    expected = simulate(trace, spec, system, cost, num_gpu_blocks, num_cpu_blocks, horizon_s=1e9)
    engine = Engine(spec, system, "cpu", num_gpu_blocks=num_gpu_blocks, num_cpu_blocks=num_cpu_blocks,
                    attention_backend=BACKEND, run_model=run_model, time_fn=cost.step_time)
    result = engine.replay(trace)
    requests = result.request_columns()
    assert result.iteration_columns() == expected.iterations
    assert requests == expected.requests_frame().to_dict("list")
    return requests
