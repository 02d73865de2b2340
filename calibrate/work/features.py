"""The terms an iteration's time is fitted on, computed the same way from a Batch and from a profile row.

An iteration costs a function of its token count (reading the weights, the linear layers, and
whatever the matmul kernels do at that size) plus attention and per-sequence terms. The token
cost is a table: measured values at knots, interpolated linearly between them. Kernels do not
cost a smooth function of their rows: on the project's CPU a decode of 9 to 15 sequences takes
longer than one of 16 (the BLAS switches to a packed kernel at 16 rows) and 4 rows cost 60% more
than 3; GPU GEMMs step at tile sizes. A table measured at the sizes that occur follows all of
that; the knots are chosen from the profiled token counts (`choose_knots`), so every table value
is pinned by measurements at its size.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # only annotations here: the cost models that read these terms need no pandas
    import pandas as pd

# name -> what the coefficient multiplies (seconds per unit); all fitted non-negative
TERMS = {
    "prefill_attention_s": "sum of prompt_len^2 over prefills: causal attention",
    "decode_context_s": "sum of context lengths over decodes: KV reads",
    "decode_padded_context_s": "decodes x the longest decode context: attention padded to the longest (CPU path)",
    "per_sequence_s": "sequences in the iteration: logits, sampling, per-sequence kernel work",
    "per_prefill_s": "prompts in the iteration: the engine attends prompt by prompt, a call per layer each",
    "mixed_s": "1 when prompts and decodes share the iteration: both attention paths run",
    "decode_block_s": "KV blocks the decodes read, ceil(context / block_size) each: the kernel's work per block",
}
# Format /2 profiles had neither per_prefill_s nor mixed_s; read, they cost nothing (their value in a
# /2 fit, where the token table and per_sequence_s absorbed what they now explain apart).
TERMS_ADDED_IN_3 = ("per_prefill_s", "mixed_s")
# Nor had /3 profiles decode_block_s: fitted at one block size, their per-context and per-sequence costs
# already hold that size's per-block work, so read it costs nothing and they predict what they did.
TERMS_ADDED_IN_4 = ("decode_block_s",)
# A profile row's blocks read (engine.core.batch.ShapeMetrics.decode_blocks at the row's block_size).
# Optional: a CSV without it, or measured at one block size, cannot tell blocks from tokens apart
# (ceil(c / b) is c / b + 1/2 on average) and is fitted with decode_block_s at 0.
BLOCKS_COLUMN = "sum_decode_blocks"
FEATURE_COLUMNS = ("num_tokens", "sum_prefill_sq", "sum_decode_context", "padded_decode_context", "num_seqs",
                   "num_prefills", "num_decodes")
DENSE_UP_TO = 16  # every profiled token count up to here is a knot: small kernels are the most irregular
KNOT_SPACING = 1.2  # past it, a knot at most every 20% in tokens


def choose_knots(token_counts) -> list[int]:
    """Knots for the token-cost table: every distinct count up to DENSE_UP_TO, then counts at least
    KNOT_SPACING apart, always ending at the largest."""
    counts = sorted({int(t) for t in token_counts if t > 0})
    if not counts:
        raise ValueError("no token counts to place knots at")
    knots = [c for c in counts if c <= DENSE_UP_TO]
    for c in counts:
        if c > DENSE_UP_TO and (not knots or c >= knots[-1] * KNOT_SPACING):
            knots.append(c)
    if knots[-1] != counts[-1]:
        if knots[-1] > DENSE_UP_TO and len(knots) > 1:
            knots[-1] = counts[-1]  # a last segment of a few tokens would set the slope past the end from noise
        else:
            knots.append(counts[-1])
    return knots


def token_basis(tokens: np.ndarray, knots: list[int]) -> np.ndarray:
    """Hat functions over the knots: row i, column j is knot j's weight in tokens[i]'s interpolated cost.
    Below the first knot the first knot's cost; past the last, the last segment's line continued
    (unclamped, as a linear basis must be: fits only see rows within the knots, and predictions past
    them go through `token_costs`, which never lets the line fall)."""
    tokens = np.asarray(tokens, dtype=float)
    k = np.asarray(knots, dtype=float)
    basis = np.zeros((len(tokens), len(k)))
    if len(k) == 1:
        basis[:, 0] = 1.0
        return basis
    seg = np.clip(np.searchsorted(k, tokens, side="right") - 1, 0, len(k) - 2)
    w = (tokens - k[seg]) / (k[seg + 1] - k[seg])
    w = np.maximum(w, 0.0)  # clamp below the first knot; past the last, w > 1 extrapolates
    rows = np.arange(len(tokens))
    basis[rows, seg] = 1.0 - w
    basis[rows, seg + 1] += w
    return basis


def token_costs(tokens, knots: list[int], costs: list[float]) -> np.ndarray:
    """The table's cost at each token count: interpolated between knots, the first knot's below them,
    and past the last the last segment's slope continued (never falling)."""
    tokens = np.asarray(tokens, dtype=float)
    inside = np.interp(tokens, knots, costs)
    if len(knots) < 2:
        return inside
    slope = max((costs[-1] - costs[-2]) / (knots[-1] - knots[-2]), 0.0)
    return np.where(tokens > knots[-1], costs[-1] + slope * (tokens - knots[-1]), inside)


def term_matrix(features: pd.DataFrame) -> np.ndarray:
    """One row per iteration, one column per TERMS entry, from FEATURE_COLUMNS."""
    return np.column_stack([
        features["sum_prefill_sq"].to_numpy(dtype=float),
        features["sum_decode_context"].to_numpy(dtype=float),
        features["padded_decode_context"].to_numpy(dtype=float),
        features["num_seqs"].to_numpy(dtype=float),
        features["num_prefills"].to_numpy(dtype=float),
        mixed_indicator(features),
        features[BLOCKS_COLUMN].to_numpy(dtype=float) if BLOCKS_COLUMN in features else np.zeros(len(features)),
    ])


def block_term_measurable(features: pd.DataFrame) -> bool:
    """Whether decodes were timed at two or more block sizes: only then is decode_block_s told apart."""
    if BLOCKS_COLUMN not in features or "block_size" not in features:
        return False
    decodes = features[features["num_decodes"] > 0]
    return decodes["block_size"].nunique() >= 2 and bool(decodes[BLOCKS_COLUMN].notna().all())


def mixed_indicator(features: pd.DataFrame) -> np.ndarray:
    return ((features["num_prefills"] > 0) & (features["num_decodes"] > 0)).to_numpy(dtype=float)


def design_matrix(features: pd.DataFrame, knots: list[int]) -> np.ndarray:
    """The token table's hat columns, then the TERMS columns."""
    return np.column_stack([token_basis(features["num_tokens"].to_numpy(), knots), term_matrix(features)])
