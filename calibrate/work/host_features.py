"""What a host model's coefficients multiply: the batch, the model's size and the tensor-parallel workers.

A host model (calibrate/parts/host_model.py) prices each of its terms as a sum of coefficients, each times one
feature below. A feature is paid once per iteration, once per sequence in the batch, or once per prompt token,
and may scale with the model's size (its vocabulary or its context length, the two sizes the public
measurements order the engines' host work by) or with the tensor-parallel degree. So for any (model,
tensor_parallel) a host model folds into calibrate/parts/host.py's three HOST_TERMS, which the cost models charge.
"""
from __future__ import annotations

from dataclasses import dataclass

from engine.core.spec import ModelSpec

ITERATION, SEQUENCE, PREFILL_TOKEN = "per_iteration_s", "per_sequence_s", "per_prefill_token_s"  # HOST_TERMS
VOCAB, CONTEXT = "vocab_size", "max_seq_len"  # the sizes a feature may scale with
PER_K = 1000.0  # sizes in thousands of tokens, so coefficients read as seconds per 1k


@dataclass(frozen=True)
class ModelSize:
    """The two sizes of a model that host work was seen to grow with."""

    vocab_size: int  # the sampler's logits per sequence
    max_seq_len: int  # the context a block table is sized for

    @classmethod
    def of(cls, spec: ModelSpec) -> ModelSize:
        return cls(spec.vocab_size, spec.max_seq_len)

    def get(self, size: str) -> float:
        return float(getattr(self, size))


@dataclass(frozen=True)
class Feature:
    paid: str  # ITERATION, SEQUENCE or PREFILL_TOKEN: which HOST_TERMS it folds into
    size: str | None  # VOCAB or CONTEXT where it scales with the model's size
    workers: str | None  # "multi": only at tensor_parallel > 1; "extra": per worker beyond two
    meaning: str

    def scale(self, size: ModelSize, tp: int) -> float:
        """What the coefficient is multiplied by, besides the batch's sequences or prompt tokens."""
        value = size.get(self.size) / PER_K if self.size else 1.0
        if self.workers == "multi":
            value *= 1.0 if tp > 1 else 0.0
        elif self.workers == "extra":
            value *= max(tp - 2, 0)
        return value


FEATURES = {
    "per_iteration_s": Feature(ITERATION, None, None, "every iteration"),
    "per_sequence_s": Feature(SEQUENCE, None, None, "each sequence in the batch"),
    "per_prefill_token_s": Feature(PREFILL_TOKEN, None, None, "each prompt token"),
    "per_iteration_per_kvocab_s": Feature(ITERATION, VOCAB, None, "every iteration, per 1k tokens of vocabulary"),
    "per_sequence_per_kvocab_s": Feature(SEQUENCE, VOCAB, None, "each sequence, per 1k tokens of vocabulary"),
    "per_sequence_per_kcontext_s": Feature(SEQUENCE, CONTEXT, None, "each sequence, per 1k tokens of context"),
    "multi_worker_per_iteration_s": Feature(ITERATION, None, "multi", "every iteration at tensor_parallel > 1"),
    "multi_worker_per_sequence_s": Feature(SEQUENCE, None, "multi", "each sequence at tensor_parallel > 1"),
    "multi_worker_per_sequence_per_kcontext_s": Feature(
        SEQUENCE, CONTEXT, "multi", "each sequence at tensor_parallel > 1, per 1k tokens of context"),
    "per_extra_worker_per_iteration_s": Feature(ITERATION, None, "extra", "every iteration, per worker beyond two"),
    "per_extra_worker_per_sequence_s": Feature(SEQUENCE, None, "extra", "each sequence, per worker beyond two"),
}
