"""Expert parallelism's dispatch and combine, priced: every MoE layer's all-gather of the data-parallel ranks' tokens
before the experts and its reduce-scatter after them (vLLM 0.19's all2all backend `allgather_reducescatter`).

Over a group of N data-parallel ranks (calibrate/work/expert_parallel.py), each with T tokens (its equal-load
assumption), a layer's all-gather puts the N T tokens' hidden states (hidden x activation bytes each) on every GPU,
and its reduce-scatter sums each token's expert outputs from every GPU back onto the token's own rank. In a ring each
of the two moves (N - 1) / N of the gathered message, N T x hidden x bytes, through each GPU's link:
(N - 1) T x hidden x bytes each, 2 (N - 1) T x hidden x bytes the pair, which is what a ring all-reduce of the
gathered message moves (an all-reduce is a reduce-scatter and an all-gather). The link is the one tensor
parallelism's all-reduce is priced over: the sheet's nvlink_bytes_per_s, PCIe's rate where the GPU has no NVLink.
Each collective pays a fixed latency too, the cost model's (its measured all-reduce's smallest-message time where
it has a table for N GPUs, else the ring formula's).

With tensor parallelism inside a rank each of its GPUs gathers the same tokens over its own link at once, so the time
is one GPU's. One rank (N = 1) gathers nothing: expert parallelism over a rank's own GPUs costs no dispatch, its
combine being the MLP's tensor-parallel all-reduce, priced already.

Not priced: the routing that travels beside the hidden states (each token's router logits, or its k expert ids and
weights; for Qwen3-30B-A3B at most 128 fp32 logits, 512 bytes, beside 4,096 bytes of hidden state), and the
gather's wait for the slowest rank (equal load).
"""
from __future__ import annotations

from dataclasses import dataclass

from calibrate.work.expert_parallel import ExpertParallel
from engine.core.spec import ModelSpec

COLLECTIVES_PER_LAYER = 2  # the all-gather before the experts and the reduce-scatter after them


@dataclass(frozen=True)
class DispatchCost:
    """All MoE layers' dispatch and combine on one GPU: seconds per token of its rank's batch, and per iteration."""

    per_token_s: float
    fixed_s: float

    def seconds(self, tokens: int) -> float:
        return tokens * self.per_token_s + self.fixed_s


def dispatch_bytes_per_token(model: ModelSpec, group: ExpertParallel, activation_bytes: int) -> int:
    """Bytes one GPU's link carries per token of its rank's batch, over every MoE layer's all-gather and
    reduce-scatter: layers x 2 x (N - 1) x hidden x bytes."""
    ring = (group.data_parallel - 1) * model.hidden_size * activation_bytes
    return model.num_layers * COLLECTIVES_PER_LAYER * ring


def dispatch_cost(model: ModelSpec, group: ExpertParallel, activation_bytes: int, link_bytes_per_s: float,
                  latency_s: float) -> DispatchCost:
    """The dispatch and combine of `group` over links of `link_bytes_per_s`, each collective `latency_s` more; none
    for a group of one rank."""
    if group.data_parallel == 1:
        return DispatchCost(0.0, 0.0)
    per_token = dispatch_bytes_per_token(model, group, activation_bytes) / link_bytes_per_s
    return DispatchCost(per_token, model.num_layers * COLLECTIVES_PER_LAYER * latency_s)
