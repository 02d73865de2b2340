"""Profile CSV rows with known physics, for the fit and speed-reference tests."""
import numpy as np
import pandas as pd

from calibrate.features import TERMS, term_matrix
from calibrate.grid import Grid
from calibrate.rows import shape_row

TRUE = {term: 0.0 for term in TERMS}
TRUE.update({"prefill_attention_s": 3e-9, "decode_context_s": 5e-7, "per_sequence_s": 1e-4,
             "per_prefill_s": 4e-3, "mixed_s": 2e-3})  # a host-bound engine's per-prompt and mixed costs


def gpu_like_token_cost(tokens):
    """Weights read once, linear layers, steeper past 512 tokens, a kernel step at 4 rows."""
    tokens = np.asarray(tokens, dtype=float)
    return 0.020 + 2e-5 * tokens + 8e-5 * np.maximum(tokens - 512, 0) + 0.01 * (tokens >= 4)


def synthetic_raw(noise: float, seed: int = 0, grid: Grid | None = None, token_cost=gpu_like_token_cost,
                  block_sizes: tuple[int, ...] = (), decode_block_s: float = 0.0) -> pd.DataFrame:
    """The grid at block size 16; with `block_sizes`, its block-sweep decodes at each of those sizes too.
    Each decode costs `decode_block_s` per KV block it reads, on top of TRUE."""
    rng = np.random.default_rng(seed)
    grid = grid or Grid()
    rows = [shape_row(shape, [1.0], 16) for shape in grid.shapes()]
    rows += [shape_row(shape, [1.0], size) for size in block_sizes for shape in grid.block_sweep_shapes()]
    frame = pd.DataFrame(rows)
    truth = np.array(list({**TRUE, "decode_block_s": decode_block_s}.values()))
    exact = token_cost(frame["num_tokens"]) + term_matrix(frame) @ truth
    frame["time_s"] = exact * (1 + rng.normal(0, noise, len(frame)))
    return frame.assign(model="opt-13b", device="cuda", device_name="synthetic", dtype="float16",
                        tensor_parallel=1)
