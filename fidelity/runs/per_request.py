"""Each request, real and simulated, in the run's order: its lengths and its TTFT, TPOT and E2E latency on both
sides (seconds), and what the simulation did with it (preemptions, cached prompt tokens, replica)."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from fidelity.runs.real_run import RealRun
from sim.experiment.metrics import request_latencies


def simulated_latencies(requests: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The simulated TTFT, TPOT and E2E of each request, by the run's definitions (request_latencies'): from
    arrival to first token, (finish - first token) / (output_len - 1), from arrival to finish. NaN where never
    served or unfinished: a replay has no horizon to count them at."""
    latencies = request_latencies(requests, horizon_s=math.nan)
    return {"ttft": latencies["ttft_s"], "tpot": latencies["tpot_s"], "e2e": latencies["latency_s"]}


def request_frame(run: RealRun, sim_requests: dict[str, np.ndarray]) -> pd.DataFrame:
    real, sim = run.requests, simulated_latencies(sim_requests)
    frame = pd.DataFrame({
        "request": np.arange(len(real)), "request_id": list(real.request_id), "line": real.line,
        "arrival_s": sim_requests["arrival_s"], "prompt_len": real.prompt_len, "output_len": real.output_len,
        "real_ttft_s": real.ttft_s, "sim_ttft_s": sim["ttft"], "real_tpot_s": real.tpot_s, "sim_tpot_s": sim["tpot"],
        "real_e2e_s": real.e2e_s, "sim_e2e_s": sim["e2e"], "sim_preemptions": sim_requests["num_preemptions"],
        "sim_replica": sim_requests["replica"]})
    if "cached_tokens" in sim_requests:
        frame["sim_cached_tokens"] = sim_requests["cached_tokens"]
    return frame
