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

from fidelity.saturation import SATURATION_WHY, judged

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
    "loo_sim_makespan_s", "loo_makespan_error",
)
# filled from the above once the summary is whole (fidelity/saturation.py): how the verdict judges each point
JUDGED_COLUMNS = ("judged_by", "judged_error", "judged_within_target")
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
# the makespan error a figure's points past saturation are judged by; a figure without one is judged by latency
MAKESPAN = {"verdict": "loo_makespan_error"}
HEADLINE_KEYS = ("points", "mean_abs_error", "signed_mean_error", "worst_error", "within_noise", "within_10pct",
                 "under_predicted", "over_predicted",
                 # the per-point target (within 10% or inside the real spread) without and with the saturation rule
                 "past_saturation", "worst_below_saturation", "within_target", "within_target_with_rule",
                 "worst_makespan_past_saturation")


def within_noise(error, low, high, tolerance: float = 1e-12) -> np.ndarray:
    """Whether each error lies inside the real replays' own range (low <= error <= high)."""
    error, low, high = (np.asarray(v, dtype=float) for v in (error, low, high))
    return (error >= low - tolerance) & (error <= high + tolerance)


def worst(error: np.ndarray) -> float:
    """The signed error of the largest |error| (nan if none)."""
    return float(error[np.argmax(np.abs(error))]) if len(error) else math.nan


def headline(summary: pd.DataFrame, column: str, makespan: str | None = None) -> dict:
    """mean |error|, signed mean, worst (signed, the largest |error|), and counts, over every point; and the
    per-point target without and with the saturation rule (points past saturation judged by `makespan`)."""
    error = summary[column].to_numpy(float) if column in summary else np.array([])
    ok = np.isfinite(error)
    kept = summary[ok] if len(error) else summary.iloc[:0]
    error, low, high = error[ok], summary["real_low_error"].to_numpy(float)[ok], \
        summary["real_high_error"].to_numpy(float)[ok]
    if not len(error):
        return {"points": 0, **{k: math.nan for k in HEADLINE_KEYS[1:4]}, "within_noise": 0, "within_10pct": 0,
                "under_predicted": 0, "over_predicted": 0, "past_saturation": 0,
                "worst_below_saturation": math.nan, "within_target": 0, "within_target_with_rule": 0,
                "worst_makespan_past_saturation": math.nan}
    points = judged(kept, column, makespan)
    past = points["past_saturation"].to_numpy(bool)
    by_makespan = points["judged_by"].to_numpy() == "makespan"
    return {"points": int(len(error)), "mean_abs_error": float(np.abs(error).mean()),
            "signed_mean_error": float(error.mean()), "worst_error": worst(error),
            "within_noise": int(within_noise(error, low, high).sum()),
            "within_10pct": int((np.abs(error) <= 0.10).sum()),
            "under_predicted": int((error < 0).sum()), "over_predicted": int((error > 0).sum()),
            "past_saturation": int(past.sum()), "worst_below_saturation": worst(error[~past]),
            "within_target": int(points["latency_within_target"].sum()),
            "within_target_with_rule": int(points["judged_within_target"].sum()),
            "worst_makespan_past_saturation": worst(points["judged_error"].to_numpy(float)[by_makespan])}


def headlines(summary: pd.DataFrame) -> dict:
    return {name: headline(summary, column, MAKESPAN.get(name)) for name, (column, _) in FIGURES.items()}


def with_judgement(summary: pd.DataFrame) -> pd.DataFrame:
    """summary.csv's JUDGED_COLUMNS: how the verdict judges each point (its latency error stays beside)."""
    points = judged(summary, VERDICT, MAKESPAN["verdict"])
    return summary.assign(**{c: points[c].to_numpy() for c in JUDGED_COLUMNS})


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
    lines.extend(target_lines(figures.get("verdict")))
    lines.append(f"verdict: {FIGURES['verdict'][0]}: {VERDICT_WHY}")
    lines.append("within noise: the simulated normalized latency lies between the lowest and the highest of the "
                 "real engine's own replays of that trace")
    return "\n".join(lines)


def target_lines(h: dict | None) -> list[str]:
    """The per-point target (every point within 10% or inside the real engine's own spread), for the verdict,
    without and with the saturation rule."""
    if not h or not h["points"] or "within_target" not in h:  # a headline written before the rule has none
        return []
    n, past = h["points"], h.get("past_saturation", 0)

    def met(count: int) -> str:
        return "met" if count == n else f"missed ({n - count} point(s) outside)"

    def pct(v) -> str:
        return "n/a" if v != v else f"{v:+.1%}"

    return [f"per-point target (every point within 10% or inside the real replays' spread), verdict: without the "
            f"saturation rule {met(h['within_target'])}, {h['within_target']}/{n} (worst latency error "
            f"{pct(h['worst_error'])}); with it {met(h['within_target_with_rule'])}, "
            f"{h['within_target_with_rule']}/{n} "
            f"({past} point(s) past saturation judged by makespan, worst {pct(h['worst_makespan_past_saturation'])}; "
            f"worst latency error below saturation {pct(h['worst_below_saturation'])})"]


def saturation_text(summary: pd.DataFrame) -> str:
    """Every point's latency error, which criterion judged it and why (fidelity/saturation.py)."""
    if not len(summary) or "judged_by" not in summary:
        return ""
    lines = ["points and how the verdict judged them (every point's latency error is shown; "
             f"{SATURATION_WHY}):"]
    for _, r in summary.iterrows():
        growth = r["real_queue_growth"]
        growth_text = "n/a" if growth != growth else f"{growth:+.2f} s/s (se {r['real_queue_growth_stderr']:.2f})"
        judged_error = r["judged_error"]
        lines.append(
            f"  {r['system']:<18} {r['rate']:>5g} req/s  latency error {r[VERDICT]:+6.1%}  "
            f"real queue growth {growth_text}  "
            f"{'PAST SATURATION' if r['past_saturation'] else 'below saturation'}: judged by {r['judged_by']} "
            f"{'n/a' if judged_error != judged_error else f'{judged_error:+.1%}'} "
            f"({'within' if r['judged_within_target'] else 'OUTSIDE'} the target)")
    return "\n".join(lines)
