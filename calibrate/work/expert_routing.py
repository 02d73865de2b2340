"""How many of a mixture's experts a batch reads: the weights a layer of experts moves per iteration.

Assumption: each token's router picks experts_per_token distinct experts of num_experts, every such set equally
likely and each token independently of the others (uniform, balanced routing; a trained router is roughly
balanced by its auxiliary loss, never exactly). An expert is then left unread by one token with probability
1 - k/E, by all T tokens of a batch with (1 - k/E)^T, so a layer reads E (1 - (1 - k/E)^T) distinct experts on
average: k at T = 1, approaching all E as the batch grows. Every expert's weights are read once per iteration
however many tokens it serves (a grouped GEMM). Tensor parallelism splits every expert across the GPUs (vLLM's
default); with expert parallelism each GPU holds whole experts of its own, and calibrate/work/expert_parallel.py
counts a GPU's share from this formula over every data-parallel rank's tokens.
"""
from __future__ import annotations


def expected_experts_read(num_experts: int, experts_per_token: int, tokens: int) -> float:
    """The expected number of distinct experts a layer reads for `tokens` tokens under uniform top-k routing."""
    return num_experts * (1.0 - (1.0 - experts_per_token / num_experts) ** float(tokens))
