"""What a speculating system's proposer holds on each GPU beside the target (docs/speculative-decoding.md): its
weights, which come out of the memory the KV cache is sized from, and its KV of every token, which each block holds
beside the target's. vLLM loads both on the target's GPUs at the target's tensor parallelism and sizes its KV
cache after them.

- `draft`: the draft model whole, and its KV of every layer.
- `eagle` / `mtp`: the head's own weights, one decoder layer of the target and the 2h x h projection of
  [embedding, hidden state] that feeds it (EAGLE's `fc`, DeepSeek MTP's `eh_proj`: a plain torch Linear, 16-bit),
  and one layer of KV a token. The embedding and the LM head are the target's, shared (vLLM's
  EagleProposer.load_model shares both for MTP, and for an EAGLE checkpoint without its own).
- `ngram`: nothing.
"""
from __future__ import annotations

import dataclasses

from calibrate.hardware.precision import Precision
from calibrate.work.expert_parallel import ExpertParallel
from engine.core.spec import ModelSpec
from engine.core.speculative import SpeculativeSpec
from sim.experiment.kv_pool import ProposerMemory, as_precision, block_bytes, weight_bytes_per_gpu


def proposer_memory(spec: SpeculativeSpec | None, target: ModelSpec, precision: Precision | int, tp: int,
                    block_size: int, expert_parallel: ExpertParallel | None = None) -> ProposerMemory | None:
    """The proposer's memory on each GPU (module docstring); None where it holds none."""
    if spec is None or spec.method == "ngram":
        return None
    if spec.method == "draft":
        if spec.draft is None:
            raise ValueError(f"draft model {spec.draft_model!r} not loaded: an experiment loads it (with_drafts)")
        return ProposerMemory(weight_bytes_per_gpu(spec.draft, precision, tp),
                              block_bytes(spec.draft, block_size, tp, precision))
    layer = dataclasses.replace(target, num_layers=1)
    return ProposerMemory(head_weight_bytes_per_gpu(target, precision, tp, expert_parallel),
                          block_bytes(layer, block_size, tp, precision))


def head_weight_bytes_per_gpu(target: ModelSpec, precision: Precision | int, tp: int,
                              expert_parallel: ExpertParallel | None = None) -> int:
    """An EAGLE or MTP head's own weights on one GPU: what one more decoder layer of the target adds to a GPU's
    share (its matmuls at the weights' format, its norms 16-bit; a mixture's experts placed as the target's), and
    the 16-bit 2h x h projection split over the tensor-parallel GPUs."""
    precision = as_precision(precision)
    one_layer, no_layer = (dataclasses.replace(target, num_layers=n) for n in (1, 0))
    layer = (weight_bytes_per_gpu(one_layer, precision, tp, expert_parallel)
             - weight_bytes_per_gpu(no_layer, precision, tp, expert_parallel))
    projection = 2 * target.hidden_size * target.hidden_size * precision.activation_bytes
    return layer + projection // tp
