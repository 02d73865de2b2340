"""What the hostile-input tests share: a small valid run config and a valid GPU profile to break."""
from __future__ import annotations

import dataclasses

from calibrate.fitting.profile_file import Profile
from calibrate.work.features import TERMS
from tests.helpers.configs import tiny

TINY = tiny(workload="{dataset: sharegpt-standin, arrival: poisson, duration_s: 20}", systems="[vllm]", rates="[1]",
            warmup_s="2")


def profile(**changes) -> Profile:
    """A valid GPU profile of OPT-13B, as the calibrator writes one."""
    base = Profile(model="opt-13b", device="cuda", device_name="NVIDIA H200", dtype="float16",
                   tensor_parallel=1, block_size=16, token_knots=[1, 512, 1024], token_costs_s=[0.01, 0.03, 0.05],
                   coefficients={**{t: 0.0 for t in TERMS}, "decode_context_s": 4e-7, "per_sequence_s": 5e-5},
                   heldout_mape=0.04, heldout_p95_ape=0.09, train_rows=80, heldout_rows=20, created="2026-11-29",
                   command="test", swap_s_per_copy=5e-6, swap_s_per_byte=4e-11)
    return dataclasses.replace(base, **changes)
