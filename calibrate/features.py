"""The terms an iteration's time is fitted on, computed the same way from a Batch and from a profile row."""
from __future__ import annotations

import numpy as np

from engine.core.batch import Batch

# name -> what the coefficient multiplies (seconds per unit)
TERMS = {
    "fixed_s": "1 per iteration: reading the weights once, launches, scheduling",
    "per_token_s": "tokens in the iteration (prefill + decode): linear-layer work",
    "per_token_over_knee_s": "tokens beyond the knee: extra cost once the batch turns compute-bound",
    "prefill_attention_s": "sum of prompt_len^2 over prefills: causal attention",
    "decode_context_s": "sum of context lengths over decodes: KV reads",
    "per_sequence_s": "sequences in the iteration: logits, sampling, per-sequence kernel work",
}
FEATURE_COLUMNS = ("num_tokens", "sum_prefill_sq", "sum_decode_context", "num_seqs")


def design_matrix(num_tokens, sum_prefill_sq, sum_decode_context, num_seqs, knee_tokens: float) -> np.ndarray:
    num_tokens = np.asarray(num_tokens, dtype=float)
    return np.column_stack([
        np.ones_like(num_tokens),
        num_tokens,
        np.maximum(num_tokens - knee_tokens, 0.0),
        np.asarray(sum_prefill_sq, dtype=float),
        np.asarray(sum_decode_context, dtype=float),
        np.asarray(num_seqs, dtype=float),
    ])


def batch_features(batch: Batch) -> tuple[int, int, int, int]:
    prefill_lens = batch.prefill_lens
    num_decodes = len(batch.decode_context_lens)
    return (sum(prefill_lens) + num_decodes, sum(n * n for n in prefill_lens), sum(batch.decode_context_lens),
            len(prefill_lens) + num_decodes)
