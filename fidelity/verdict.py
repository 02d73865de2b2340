"""The verdict of a validation: which error it is, whether each point is inside the real engine's own
noise, and the headline figures a repeat of the whole validation is compared on.

Within noise: the real engine replays every trace `repeats` times and disagrees with itself; a point
is within noise when the simulated normalized latency lies between the lowest and the highest of the
real replays' (error between real_low_error and real_high_error, both relative to their mean). A
simulator cannot be judged more finely than the engine repeats itself.

The verdict is the leave-one-trace-out error (fidelity/served.py): a cost model fitted on the served
iterations of the other traces of this very run, so that it is measured under the conditions it is
judged in and never on the trace it predicts. The grid profile's error (what `servesim run` uses)
is reported beside it, with and without its speed correction.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

VERDICT = "loo_normalized_latency_error"
VERDICT_WHY = (
    "leave-one-trace-out: the cost model is fitted on this run's own served iterations of the other "
    "traces (same batches, same host work, same hour as the replays it predicts) and never sees the "
    "trace it predicts; the grid profile is timed alone minutes earlier, so on a shared machine its error "
    "measures the machine's drift as much as the simulator")
# summary.csv columns beyond metrics.SUMMARY_COLUMNS, filled once every trace has been replayed
VERDICT_COLUMNS = (
    "grid_speed_corrected", "grid_normalized_latency_error",
    "loo_sim_normalized_latency", "loo_normalized_latency_error", "loo_plain_normalized_latency_error",
    "loo_at_speed_normalized_latency_error", "loo_relative_normalized_latency_error", "loo_speed_corrected",
    "loo_heldout_iteration_error",
    "within_noise", "grid_within_noise",
)
# the error columns a headline is given for: name -> (column, what it is)
FIGURES = {
    "verdict": (VERDICT, "leave-one-trace-out served fit, speed correction where it helped the training traces"),
    "loo_plain": ("loo_plain_normalized_latency_error", "leave-one-trace-out served fit, no speed correction"),
    "loo_at_speed": ("loo_at_speed_normalized_latency_error", "leave-one-trace-out served fit, speed-corrected"),
    "loo_relative": ("loo_relative_normalized_latency_error",
                     "leave-one-trace-out relative-error fit, not sum-matched, no speed correction"),
    "grid": ("grid_normalized_latency_error", "grid profile, speed correction where it helped the other traces"),
    "grid_at_speed": ("normalized_latency_error", "grid profile at the speed probe's factor"),
    "grid_as_calibrated": ("uncorrected_normalized_latency_error", "grid profile as calibrated"),
}
HEADLINE_KEYS = ("points", "mean_abs_error", "signed_mean_error", "worst_error", "within_noise", "within_10pct",
                 "under_predicted", "over_predicted")


def within_noise(error, low, high, tolerance: float = 1e-12) -> np.ndarray:
    """Whether each error lies inside the real replays' own range (low <= error <= high)."""
    error, low, high = (np.asarray(v, dtype=float) for v in (error, low, high))
    return (error >= low - tolerance) & (error <= high + tolerance)


def headline(summary: pd.DataFrame, column: str) -> dict:
    """mean |error|, signed mean, worst (signed, the largest |error|), and counts, over every point."""
    error = summary[column].to_numpy(float) if column in summary else np.array([])
    ok = np.isfinite(error)
    error, low, high = error[ok], summary["real_low_error"].to_numpy(float)[ok], \
        summary["real_high_error"].to_numpy(float)[ok]
    if not len(error):
        return {"points": 0, **{k: math.nan for k in HEADLINE_KEYS[1:4]}, "within_noise": 0, "within_10pct": 0,
                "under_predicted": 0, "over_predicted": 0}
    return {"points": int(len(error)), "mean_abs_error": float(np.abs(error).mean()),
            "signed_mean_error": float(error.mean()), "worst_error": float(error[np.argmax(np.abs(error))]),
            "within_noise": int(within_noise(error, low, high).sum()),
            "within_10pct": int((np.abs(error) <= 0.10).sum()),
            "under_predicted": int((error < 0).sum()), "over_predicted": int((error > 0).sum())}


def headlines(summary: pd.DataFrame) -> dict:
    return {name: headline(summary, column) for name, (column, _) in FIGURES.items()}


def correction_helps(measured, predicted, factor) -> tuple[float, float]:
    """Mean |error| of a cost model's predictions (of iterations, or of replays' summed times) as they are,
    and times the speed factor."""
    measured, predicted, factor = (np.asarray(v, dtype=float) for v in (measured, predicted, factor))
    if not len(measured) or not np.isfinite(factor).all():
        return math.nan, math.nan
    return (float(np.mean(np.abs(predicted / measured - 1.0))),
            float(np.mean(np.abs(predicted * factor / measured - 1.0))))


def grid_correction_by_rate(iterations: pd.DataFrame, speed: pd.DataFrame) -> dict[float, tuple[bool, float, float]]:
    """For each rate: whether the grid profile's speed correction fits the *other* rates' replays better than
    the profile as calibrated (each replay's summed iteration time, which is what latency sums), with both
    errors. iterations: metrics.ITERATION_COLUMNS (predicted_s as calibrated); speed: each replay's speed_factor."""
    keys = ["system", "rate", "repeat"]
    sums = iterations.groupby(keys)[["measured_s", "predicted_s"]].sum()
    sums = sums.join(speed.set_index(keys)["speed_factor"].rename("probe_factor")).reset_index()
    out = {}
    for rate in sorted(iterations["rate"].unique()):
        other = sums[sums["rate"] != rate]
        plain, at_speed = correction_helps(other["measured_s"], other["predicted_s"], other["probe_factor"])
        out[float(rate)] = (bool(at_speed < plain), plain, at_speed)
    return out


def correction_text(loo: pd.DataFrame) -> str:
    """Where each speed correction was applied, and the training errors that decided it."""
    if not len(loo):
        return "speed correction: no leave-one-trace-out fit (a validation of one rate has no other trace to fit)"
    n = len(loo)

    def pct(v) -> str:
        return "n/a" if v != v else f"{v:.1%}"

    loo_line = (f"speed correction, leave-one-trace-out: applied for {int(loo['speed_corrected'].sum())} of {n} "
                f"held-out rates (mean |error| of each training replay's summed time, plain / at speed: "
                + ", ".join(f"{r['held_out_rate']:g} req/s {pct(r['train_error'])} / {pct(r['train_error_at_speed'])}"
                            for _, r in loo.iterrows()) + ")")
    grid_line = (f"speed correction, grid profile: applied for {int(loo['grid_speed_corrected'].sum())} of {n} rates "
                 f"(mean |error| of the other rates' replays' summed times as calibrated / at speed: "
                 + ", ".join(f"{r['held_out_rate']:g} req/s {pct(r['grid_other_error'])} / "
                             f"{pct(r['grid_other_error_at_speed'])}" for _, r in loo.iterrows()) + ")")
    return f"{loo_line}\n{grid_line}\n(each is applied only where it fits the other traces better)"


def headline_text(figures: dict, title: str = "") -> str:
    """The headline figures, the verdict first, one line each."""
    lines = [title] if title else []
    for name, (_, what) in FIGURES.items():
        h = figures.get(name)
        if not h or not h["points"]:
            continue
        mark = "VERDICT " if name == "verdict" else "        "
        lines.append(f"{mark}{name:<19} mean |err| {h['mean_abs_error']:6.1%}  signed {h['signed_mean_error']:+6.1%}  "
                     f"worst {h['worst_error']:+6.1%}  within noise {h['within_noise']:>2}/{h['points']}  "
                     f"within 10% {h['within_10pct']:>2}/{h['points']}  under/over {h['under_predicted']}/"
                     f"{h['over_predicted']}  ({what})")
    lines.append(f"verdict: {FIGURES['verdict'][0]}: {VERDICT_WHY}")
    lines.append("within noise: the simulated normalized latency lies between the lowest and the highest of the "
                 "real engine's own replays of that trace")
    return "\n".join(lines)
