"""A mixture's measured block judged (calibrate/judging/moe_judge.py) as the cost model prices a layer of it: one
bend over the router's and the activated experts' matmuls, a latency per matmul, each expert's activation."""
import numpy as np
import pandas as pd
import pytest

from calibrate.hardware.hardware import load_hardware
from calibrate.judging.moe_judge import moe_block_time, moe_errors
from calibrate.parts.linear_model import LinearFit
from engine.specs.loader import load_model_spec

# a hard max (ridge efficiency 1), so the block's time can be written out by hand
FIT = LinearFit(0.5, 0.8, 1.0, 4e-6, {"mlp_act": (2e-6, 0.5)})


def test_one_token_to_eight_experts_is_the_router_and_eight_experts_weights_read_with_their_latencies():
    spec, hw = load_model_spec("qwen3-30b-a3b"), load_hardware("rtx-pro-6000-server")
    h, f, e = spec.hidden_size, spec.ffn_dim, spec.num_experts  # 2048, 768 (gate and up 2 x 768), 128
    weights = (h * e + 8 * (h * 2 * f + f * h)) * 2  # the router and 8 experts, 16-bit
    reads = weights / (hw.hbm_bytes_per_s * 0.8)  # one token: the weights' read is the roof
    activation = 8 * (2e-6 + 3 * f * 2 / (hw.hbm_bytes_per_s * 0.5))  # one routed row per expert
    want = 4e-6 + 2 * 8 * 4e-6 + reads + activation
    assert moe_block_time(FIT, spec, hw, 1, 8) == pytest.approx(want, rel=1e-12)


def test_the_judge_reports_the_fit_and_the_roofline_on_the_rows():
    spec, hw = load_model_spec("qwen3-30b-a3b"), load_hardware("rtx-pro-6000-server")
    rows = pd.DataFrame({"tokens": [1, 64, 2048], "activated_experts": [8, 64, 128]})
    rows["time_s"] = moe_block_time(FIT, spec, hw, rows["tokens"], rows["activated_experts"])
    errors = moe_errors(FIT, spec, hw, rows)
    assert errors["fit"]["mean"] < 1e-12 and errors["fit"]["rows"] == 3
    assert errors["roofline"]["mean"] > 0.05 and np.isfinite(errors["roofline"]["p95"])
