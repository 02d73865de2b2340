"""What expert parallelism leaves one GPU of a mixture's layer to run and read.

vLLM's `--data-parallel-size N --enable-expert-parallel` over N data-parallel ranks of TP GPUs each: every rank runs
attention for its own requests (tensor-parallel over its TP GPUs), and the EP = N x TP GPUs hold each MoE layer's
E experts between them, E / EP whole experts a GPU. Before each MoE layer every GPU gathers the N ranks' tokens
(calibrate/parts/expert_dispatch.py prices the gather and the scatter back); it runs its own experts on the
gathered tokens routed to them, and the combine sums each token's experts back to its rank.

The simulator prices one rank at a time, so it needs the other ranks' batches: it assumes them equal, **every rank's
iteration runs T tokens, as this one's**. Under that, and calibrate/work/expert_routing.py's uniform routing (each
token's k experts a uniformly drawn set of k distinct experts of E, independently of every other token), one GPU's
share of a layer, holding the set S of E / EP experts, is:

- **Routed rows.** A token's k picks fall in S k |S| / E = k / EP times on average, so the N T gathered tokens send
  N T k / EP = T k / TP rows to this GPU, each an expert of full width. Tensor parallelism alone runs all T k rows
  on every GPU at 1 / TP of each expert's width: the same FLOPs, so the roofline's compute term is unchanged.
- **Distinct experts read.** An expert of S is missed by one token with probability 1 - k/E, by all N T gathered
  tokens with (1 - k/E)^(N T), so this GPU reads |S| (1 - (1 - k/E)^(N T)) = D(N T) / EP of its experts on average,
  D(n) = E (1 - (1 - k/E)^n) being expected_experts_read over the gathered tokens; each read whole. Tensor
  parallelism alone reads D(T) experts at 1 / TP of each, D(T) / TP experts' worth; expert parallelism
  D(N T) / EP. At large batches (D near E) that is 1 / N of the tensor-parallel read; at one token a rank,
  D(N) / N is near k, no saving, since each rank's token needs its own experts wherever they are.
- **Launches.** A measured kernel's latency is paid once per distinct expert a GPU runs: D(N T) / EP of them.

What equal load misses: the ranks step in lockstep (the MoE collectives must line up), so a step takes the slowest
rank's time, and a rank with less work (or none: it runs dummy steps) waits for it. A rank that holds more requests
than another sends more tokens into the all-gather and leaves the others' steps priced too low; an idle rank's
dummy steps are not simulated at all.
"""
from __future__ import annotations

from dataclasses import dataclass

from calibrate.work.expert_routing import expected_experts_read


@dataclass(frozen=True)
class ExpertParallel:
    """One data-parallel group serving a mixture with expert parallelism: its ranks and each rank's GPUs."""

    data_parallel: int  # ranks whose tokens every MoE layer gathers (vLLM's --data-parallel-size)
    tensor_parallel: int  # GPUs of each rank

    @property
    def degree(self) -> int:
        """GPUs the experts are spread over: vLLM's EP size, DP x TP."""
        return self.data_parallel * self.tensor_parallel

    def describe(self) -> str:
        return f"expert parallel over {self.data_parallel} x {self.tensor_parallel} GPUs (EP {self.degree})"


def expected_local_experts_read(num_experts: int, experts_per_token: int, tokens: int, group: ExpertParallel) -> float:
    """The distinct experts one GPU of `group` is expected to run per layer when every rank runs `tokens` tokens:
    D(N T) / EP (the module's derivation)."""
    return expected_experts_read(num_experts, experts_per_token, group.data_parallel * tokens) / group.degree
