"""The terms an iteration's time is fitted on, computed the same way from a Batch and from a profile row."""
from __future__ import annotations

import bisect

import numpy as np
import pandas as pd

# Matmul kernels change tiles and code paths at sizes (a CPU BLAS going from 3 to 4 rows,
# a GPU GEMM crossing a 64- or 128-row tile): the cost of an iteration rises in steps there.
# Steps only rise (non-negative, like every term): a fit free to step down as well learns a
# sawtooth through the grid's sizes that is far off between them.
STEP_TOKENS = (2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048)

# name -> what the coefficient multiplies (seconds per unit)
TERMS = {
    "fixed_s": "1 per iteration: reading the weights once, launches, scheduling",
    "per_token_s": "tokens in the iteration (prefill + decode): linear-layer work",
    "per_token_over_knee_s": "tokens beyond the knee: extra cost once the batch turns compute-bound",
    "prefill_attention_s": "sum of prompt_len^2 over prefills: causal attention",
    "decode_context_s": "sum of context lengths over decodes: KV reads",
    "decode_padded_context_s": "decodes x the longest decode context: attention padded to the longest (CPU path)",
    "per_sequence_s": "sequences in the iteration: logits, sampling, per-sequence kernel work",
    **{f"step_{k}_tokens_s": f"1 once an iteration has {k} or more tokens: kernels change at sizes"
       for k in STEP_TOKENS},
}
FEATURE_COLUMNS = ("num_tokens", "sum_prefill_sq", "sum_decode_context", "padded_decode_context", "num_seqs")


def design_matrix(features: pd.DataFrame, knee_tokens: float) -> np.ndarray:
    """One row per iteration, one column per TERMS entry, from FEATURE_COLUMNS."""
    tokens = features["num_tokens"].to_numpy(dtype=float)
    columns = [
        np.ones_like(tokens),
        tokens,
        np.maximum(tokens - knee_tokens, 0.0),
        features["sum_prefill_sq"].to_numpy(dtype=float),
        features["sum_decode_context"].to_numpy(dtype=float),
        features["padded_decode_context"].to_numpy(dtype=float),
        features["num_seqs"].to_numpy(dtype=float),
    ]
    columns += [(tokens >= k).astype(float) for k in STEP_TOKENS]
    return np.column_stack(columns)


def batch_features(prefill_lens: list[int], decode_context_lens: list[int]) -> dict[str, int]:
    num_decodes = len(decode_context_lens)
    return {
        "num_tokens": sum(prefill_lens) + num_decodes,
        "sum_prefill_sq": sum(n * n for n in prefill_lens),
        "sum_decode_context": sum(decode_context_lens),
        "padded_decode_context": num_decodes * max(decode_context_lens, default=0),
        "num_seqs": len(prefill_lens) + num_decodes,
    }


class StepTable:
    """The summed step costs for any token count, by one bisect."""

    def __init__(self, coefficients: dict[str, float]):
        steps = [coefficients[f"step_{k}_tokens_s"] for k in STEP_TOKENS]
        self._cumulative = [0.0] + list(np.cumsum(steps))

    def __call__(self, tokens: int) -> float:
        return self._cumulative[bisect.bisect_right(STEP_TOKENS, tokens)]

