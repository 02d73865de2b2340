"""Profile CSV rows with known physics, for the fit and speed-reference tests."""
import numpy as np
import pandas as pd

from calibrate.features import TERMS, design_matrix
from calibrate.grid import Grid
from calibrate.profile import shape_row

TRUE = {term: 0.0 for term in TERMS}
TRUE.update({"fixed_s": 0.020, "per_token_s": 2e-5, "per_token_over_knee_s": 8e-5, "prefill_attention_s": 3e-9,
             "decode_context_s": 5e-7, "per_sequence_s": 1e-4, "step_4_tokens_s": 0.01})
KNEE = 512.0


def synthetic_raw(noise: float, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    rows = []
    for shape in Grid().shapes():
        row = shape_row(shape, [1.0])
        x = design_matrix(pd.DataFrame([row]), KNEE)[0]
        row["time_s"] = float(x @ np.array(list(TRUE.values()))) * (1 + rng.normal(0, noise))
        rows.append(row)
    return pd.DataFrame(rows).assign(model="opt-13b", device="cuda", device_name="synthetic", dtype="float16",
                                     block_size=16, tensor_parallel=1)
