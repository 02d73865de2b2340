"""Real against simulated: the per-request join, one summary row per system x rate, sustainable rates.

Errors are relative and signed, sim / real - 1: +0.05 means the simulator predicts 5% slower.
"Real" is the mean over the repeated real replays; their spread, (max - min) / mean, is the
measurement noise to read the errors against.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from fidelity.saturation import past_saturation, queue_growth
from sim.experiment.metrics import latency_columns, summarize

REQUEST_JOIN_COLUMNS = (
    "system", "rate", "request_id", "arrival_s", "prompt_len", "output_len", "n", "measured",
    "real_latency_s", "sim_latency_s", "latency_error", "real_latency_spread",
    "real_ttft_s", "sim_ttft_s", "ttft_error",
    "real_normalized_latency", "sim_normalized_latency",
    "real_preemptions", "sim_preemptions",
)
SUMMARY_COLUMNS = (
    "system", "rate", "seed", "num_requests", "num_measured", "warmup_s",
    "real_normalized_latency", "sim_normalized_latency", "normalized_latency_error", "real_repeat_spread",
    "real_low_error", "real_high_error",
    "speed_factor", "speed_corrected", "sim_speed_factor", "real_speed_spread", "real_repeat_spread_at_speed",
    "sim_uncorrected_normalized_latency", "uncorrected_normalized_latency_error",
    "mean_request_error", "p50_request_error", "p90_request_error", "real_request_spread_p90",
    "real_ttft_mean_s", "sim_ttft_mean_s", "p90_ttft_error",
    "real_mean_batched_requests", "sim_mean_batched_requests",
    "real_preemptions", "sim_preemptions",
    "real_throughput_tokens_per_s", "sim_throughput_tokens_per_s",
    "real_num_iterations", "sim_num_iterations", "iteration_time_error", "iteration_time_bias",
    "real_makespan_s", "sim_makespan_s", "below_saturation", "exact_replay", "repeats", "real_wall_s",
    "cost_model", "warmup_rule",
    # past saturation (fidelity/saturation.py), read from the real replays only
    "real_queue_growth", "real_queue_growth_stderr", "past_saturation",
    "real_makespan_low_error", "real_makespan_high_error",
)
SUSTAINABLE_COLUMNS = ("system", "latency_threshold", "real_sustainable_rate", "sim_sustainable_rate",
                       "sustainable_rate_error", "real_bound", "sim_bound", "rates")
ITERATION_COLUMNS = ("system", "rate", "repeat", "iteration", "kind", "num_prefills", "num_prefill_tokens",
                     "sum_prefill_sq", "num_decodes", "sum_decode_context", "num_swap_blocks", "measured_s",
                     "predicted_s", "speed_factor", "error", "host_s")


def relative_error(sim, real):
    sim, real = np.asarray(sim, dtype=float), np.asarray(real, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(real > 0, sim / real - 1.0, np.nan)


def spread(values) -> np.ndarray | float:
    """(max - min) / mean along the first axis: run-to-run spread of repeated measurements."""
    values = np.asarray(values, dtype=float)
    mean = values.mean(axis=0)
    with np.errstate(divide="ignore", invalid="ignore"):
        return (values.max(axis=0) - values.min(axis=0)) / mean


def _pct(values, q: float) -> float:
    values = np.asarray(values, dtype=float)
    values = values[~np.isnan(values)]
    return float(np.percentile(values, q)) if len(values) else float("nan")


def request_join(system: str, rate: float, real_runs: list[pd.DataFrame], sim: pd.DataFrame,
                 warmup_s: float) -> pd.DataFrame:
    """One row per request: real (mean over repeats) and simulated latency, TTFT, normalized latency."""
    reals = [latency_columns(r, horizon_s=math.inf).set_index("request_id") for r in real_runs]
    sim = latency_columns(sim, horizon_s=math.inf).set_index("request_id")
    base = reals[0]
    out = pd.DataFrame({"system": system, "rate": rate, "request_id": base.index,
                        "arrival_s": base["arrival_s"].to_numpy(), "prompt_len": base["prompt_len"].to_numpy(),
                        "output_len": base["output_len"].to_numpy(), "n": base["n"].to_numpy()})
    out["measured"] = out["arrival_s"] >= warmup_s
    latency = np.stack([r.loc[base.index, "latency_s"].to_numpy(float) for r in reals])
    ttft = np.stack([r.loc[base.index, "ttft_s"].to_numpy(float) for r in reals])
    out["real_latency_s"] = latency.mean(axis=0)
    out["sim_latency_s"] = sim.loc[base.index, "latency_s"].to_numpy(float)
    out["latency_error"] = relative_error(out["sim_latency_s"], out["real_latency_s"])
    out["real_latency_spread"] = spread(latency)
    out["real_ttft_s"] = ttft.mean(axis=0)
    out["sim_ttft_s"] = sim.loc[base.index, "ttft_s"].to_numpy(float)
    out["ttft_error"] = relative_error(out["sim_ttft_s"], out["real_ttft_s"])
    out["real_normalized_latency"] = out["real_latency_s"] / out["output_len"]
    out["sim_normalized_latency"] = out["sim_latency_s"] / out["output_len"]
    preempt = np.stack([r.loc[base.index, "num_preemptions"].to_numpy(float) for r in reals])
    out["real_preemptions"] = preempt.mean(axis=0)
    out["sim_preemptions"] = sim.loc[base.index, "num_preemptions"].to_numpy()
    return out[list(REQUEST_JOIN_COLUMNS)].reset_index(drop=True)


def _summaries(requests: list[pd.DataFrame], iterations: list[pd.DataFrame], pool_slots: int,
               warmup_s: float) -> list[dict]:
    out = []
    for req, it in zip(requests, iterations):
        finished = req["finish_s"].dropna()
        horizon = float(finished.max()) if len(finished) else 0.0
        out.append(summarize(req, it, pool_slots=pool_slots, warmup_s=warmup_s, horizon_s=horizon))
    return out


def normalized_latency(requests: pd.DataFrame, iterations: pd.DataFrame, pool_slots: int, warmup_s: float) -> float:
    """One run's mean normalized latency, measured as summary_row measures every run."""
    return float(_summaries([requests], [iterations], pool_slots, warmup_s)[0]["normalized_latency"])


def summary_row(*, system: str, rate: float, seed: int, join: pd.DataFrame, real_requests: list[pd.DataFrame],
                real_iterations: list[pd.DataFrame], sim_requests: pd.DataFrame, sim_iterations: pd.DataFrame,
                iteration_errors: pd.DataFrame, pool_slots: int, warmup_s: float, threshold: float,
                exact_replay: bool | None, real_wall_s: float, cost_model: str, warmup_rule: str,
                speed_factors: list[float] | None = None, sim_speed_factor: float = 1.0,
                speed_corrected: bool = False,
                uncorrected_requests: pd.DataFrame | None = None,
                uncorrected_iterations: pd.DataFrame | None = None) -> dict:
    """One system x rate. The simulator ran at `sim_speed_factor` (1: as calibrated); the uncorrected
    columns are its run as calibrated, so a reader sees both the model's and the machine's share."""
    reals = _summaries(real_requests, real_iterations, pool_slots, warmup_s)
    sim = _summaries([sim_requests], [sim_iterations], pool_slots, warmup_s)[0]
    uncorrected = sim if uncorrected_requests is None else _summaries(
        [uncorrected_requests], [uncorrected_iterations], pool_slots, warmup_s)[0]
    real_norm = np.array([r["normalized_latency"] for r in reals])
    factors = np.array(speed_factors if speed_factors is not None else [np.nan] * len(reals), dtype=float)
    probed = bool(np.isfinite(factors).all())
    measured = join[join["measured"]]
    abs_err = measured["latency_error"].abs()

    def real_mean(key: str) -> float:
        return float(np.mean([r[key] for r in reals]))

    it_err = iteration_errors["error"].to_numpy(float) if len(iteration_errors) else np.array([])
    growths = [queue_growth(r, warmup_s) for r in real_requests]
    slowest = min(growths, key=lambda g: g.slope if g.slope == g.slope else -math.inf)  # the least growth
    makespans = np.array([r["makespan_s"] for r in reals], dtype=float)
    row = {
        "system": system, "rate": rate, "seed": seed, "num_requests": len(join), "num_measured": len(measured),
        "warmup_s": warmup_s,
        "real_normalized_latency": float(real_norm.mean()),
        "sim_normalized_latency": sim["normalized_latency"],
        "normalized_latency_error": float(relative_error(sim["normalized_latency"], real_norm.mean())),
        "real_repeat_spread": float(spread(real_norm)),
        # the real replays' own range, as errors against their mean: a simulated point inside it is within noise
        "real_low_error": float(real_norm.min() / real_norm.mean() - 1.0),
        "real_high_error": float(real_norm.max() / real_norm.mean() - 1.0),
        "speed_factor": float(np.exp(np.log(factors).mean())) if probed else float("nan"),
        "speed_corrected": speed_corrected,
        "sim_speed_factor": sim_speed_factor,
        "real_speed_spread": float(spread(factors)) if probed else float("nan"),
        # what run-to-run spread is left once each replay is divided by its machine's speed
        "real_repeat_spread_at_speed": float(spread(real_norm / factors)) if probed else float("nan"),
        "sim_uncorrected_normalized_latency": uncorrected["normalized_latency"],
        "uncorrected_normalized_latency_error": float(relative_error(uncorrected["normalized_latency"],
                                                                     real_norm.mean())),
        "mean_request_error": float(abs_err.mean()) if len(abs_err) else float("nan"),
        "p50_request_error": _pct(abs_err, 50),
        "p90_request_error": _pct(abs_err, 90),
        "real_request_spread_p90": _pct(measured["real_latency_spread"], 90),
        "real_ttft_mean_s": real_mean("ttft_mean_s"),
        "sim_ttft_mean_s": sim["ttft_mean_s"],
        "p90_ttft_error": _pct(measured["ttft_error"].abs(), 90),
        "real_mean_batched_requests": real_mean("mean_batched_requests"),
        "sim_mean_batched_requests": sim["mean_batched_requests"],
        "real_preemptions": real_mean("preemptions"),
        "sim_preemptions": sim["preemptions"],
        "real_throughput_tokens_per_s": real_mean("throughput_tokens_per_s"),
        "sim_throughput_tokens_per_s": sim["throughput_tokens_per_s"],
        "real_num_iterations": real_mean("num_iterations"),
        "sim_num_iterations": sim["num_iterations"],
        "iteration_time_error": float(np.abs(it_err).mean()) if len(it_err) else float("nan"),
        "iteration_time_bias": float(it_err.mean()) if len(it_err) else float("nan"),
        "real_makespan_s": real_mean("makespan_s"),
        "sim_makespan_s": sim["makespan_s"],
        "below_saturation": bool(real_norm.mean() < threshold),
        "exact_replay": exact_replay,
        "repeats": len(reals),
        "real_wall_s": real_wall_s,
        "cost_model": cost_model,
        "warmup_rule": warmup_rule,
        "real_queue_growth": slowest.slope,
        "real_queue_growth_stderr": slowest.stderr,
        "past_saturation": past_saturation(growths),
        "real_makespan_low_error": float(makespans.min() / makespans.mean() - 1.0),
        "real_makespan_high_error": float(makespans.max() / makespans.mean() - 1.0),
    }
    return {k: row[k] for k in SUMMARY_COLUMNS}


def iteration_kind(num_prefills: int, num_decodes: int) -> str:
    if num_prefills and num_decodes:
        return "mixed"
    return "prefill" if num_prefills else "decode"


def iteration_errors(system: str, rate: float, repeat: int, times: list[float], shapes, cost_model,
                     speed_factor: float = 1.0, host_s: list[float] | None = None) -> pd.DataFrame:
    """Every real iteration beside what the cost model predicts for its batch: which term is wrong.
    predicted_s is as calibrated; error compares it, times the replay's speed factor, with the measurement.
    host_s is the wall time of the engine's step outside the timed forward (not on the replay's clock)."""
    rows = []
    host_s = host_s if host_s is not None and len(host_s) == len(times) else [float("nan")] * len(times)
    for i, (measured, shape, host) in enumerate(zip(times, shapes, host_s)):
        predicted = cost_model.step_time(shape)
        prefills, decodes = shape.prefill_lens, shape.decode_context_lens
        rows.append((system, rate, repeat, i, iteration_kind(len(prefills), len(decodes)), len(prefills),
                     sum(prefills), sum(n * n for n in prefills), len(decodes), sum(decodes),
                     shape.num_swap_blocks, measured, predicted, speed_factor,
                     predicted * speed_factor / measured - 1.0 if measured > 0 else float("nan"), host))
    return pd.DataFrame(rows, columns=list(ITERATION_COLUMNS))


def iteration_breakdown(iterations: pd.DataFrame) -> pd.DataFrame:
    """The cost model's error on the engine's own batches, by kind of iteration: which term is off."""
    if not len(iterations):
        return pd.DataFrame(columns=["kind", "count", "median_measured_s", "median_predicted_s", "mean_error",
                                     "mean_abs_error", "median_host_s"])
    scaled = iterations["predicted_s"] * iterations["speed_factor"]
    grouped = iterations.assign(abs_error=iterations["error"].abs(), scaled_s=scaled).groupby("kind", sort=True)
    return grouped.agg(count=("error", "size"), median_measured_s=("measured_s", "median"),
                       median_predicted_s=("scaled_s", "median"), mean_error=("error", "mean"),
                       mean_abs_error=("abs_error", "mean"), median_host_s=("host_s", "median")).reset_index()


def crossing_rate(rates, latencies, threshold: float) -> tuple[float, str]:
    """Where normalized latency first reaches `threshold`, interpolated linearly between the two rates
    around it. Off the measured range: the highest rate (bound 'above_highest_rate') or nan
    ('below_lowest_rate')."""
    order = np.argsort(rates)
    rates, latencies = np.asarray(rates, float)[order], np.asarray(latencies, float)[order]
    over = np.flatnonzero(latencies >= threshold)
    if not len(over):
        return float(rates[-1]), "above_highest_rate"
    i = int(over[0])
    if i == 0:
        return float("nan"), "below_lowest_rate"
    r0, r1, l0, l1 = rates[i - 1], rates[i], latencies[i - 1], latencies[i]
    return float(r0 + (threshold - l0) * (r1 - r0) / (l1 - l0)), "interpolated"


def sustainable_rates(summary: pd.DataFrame, threshold: float) -> pd.DataFrame:
    rows = []
    for system, rows_ in summary.groupby("system", sort=False):
        real, real_bound = crossing_rate(rows_["rate"], rows_["real_normalized_latency"], threshold)
        sim, sim_bound = crossing_rate(rows_["rate"], rows_["sim_normalized_latency"], threshold)
        both = real_bound == sim_bound == "interpolated"  # off the measured range, the error is unknown
        rows.append({"system": system, "latency_threshold": threshold, "real_sustainable_rate": real,
                     "sim_sustainable_rate": sim,
                     "sustainable_rate_error": float(relative_error(sim, real)) if both else float("nan"),
                     "real_bound": real_bound, "sim_bound": sim_bound,
                     "rates": " ".join(f"{r:g}" for r in sorted(rows_["rate"]))})
    return pd.DataFrame(rows, columns=list(SUSTAINABLE_COLUMNS))
