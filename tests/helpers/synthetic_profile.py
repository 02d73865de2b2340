"""Profile CSV rows with known physics, for the fit and speed-reference tests."""
import numpy as np
import pandas as pd

from calibrate.profiling.grid import Grid
from calibrate.profiling.rows import shape_row
from calibrate.work.features import TERMS, term_matrix

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


HOST_TRUE = {"per_iteration_s": 2e-3, "per_sequence_s": 5e-5, "per_prefill_token_s": 2e-6}
LAUNCH_S = 3e-3  # host work inside the forward: in its wall time (time_s), not in its device time (device_s)


def split_raw(noise: float, seed: int = 0) -> pd.DataFrame:
    """synthetic_raw as a profiler that measures device and host time apart writes it: device_s is the
    known device cost (TRUE and the token table), host_s the known host cost (HOST_TRUE), each with its own
    noise, and time_s the forward's wall time, the device time plus launches."""
    frame = synthetic_raw(noise, seed)
    rng = np.random.default_rng(seed + 1)
    host = (HOST_TRUE["per_iteration_s"] + HOST_TRUE["per_sequence_s"] * frame["num_seqs"]
            + HOST_TRUE["per_prefill_token_s"] * frame["num_prefill_tokens"])
    return frame.assign(device_s=frame["time_s"], time_s=frame["time_s"] + LAUNCH_S,
                        host_s=host * (1 + rng.normal(0, noise, len(frame))))
