"""The fidelity table: per system, the targets (TARGETS) beside the real engine's own noise, as CSV rows and text."""
from __future__ import annotations

import numpy as np
import pandas as pd

from fidelity.metrics import iteration_breakdown

FIDELITY_COLUMNS = ("system", "max_normalized_latency_error", "median_normalized_latency_error",
                    "rows_within_target", "rows_within_noise", "rates_below_saturation", "max_p90_request_error",
                    "max_real_request_spread_p90",
                    "sustainable_rate_error", "real_sustainable_rate", "sim_sustainable_rate",
                    "max_real_repeat_spread", "max_real_repeat_spread_at_speed",
                    "max_uncorrected_normalized_latency_error", "min_speed_factor", "max_speed_factor",
                    "mean_iteration_time_error", "exact_replay")
TARGETS = {"max_normalized_latency_error": 0.05, "max_p90_request_error": 0.10, "sustainable_rate_error": 0.05}


def noise_band(summary: pd.DataFrame) -> pd.Series:
    """How far the real engine disagrees with itself, row by row: the difference between its replays
    (max - min over mean), after each is divided by its machine-speed factor where the simulator ran at
    the measured speed; as measured where it ran as calibrated."""
    at_speed = summary["real_repeat_spread_at_speed"].where(summary["speed_corrected"].astype(bool))
    return at_speed.where(at_speed.notna(), summary["real_repeat_spread"]).fillna(0.0)


def fidelity_table(summary: pd.DataFrame, sustainable: pd.DataFrame, exact: pd.DataFrame) -> pd.DataFrame:
    """Per system, the three targets (TARGETS): normalized-latency error below saturation within 5%, p90
    per-request error (below saturation) within 10%, sustainable rate within 5%; with the real run-to-run
    spread beside them."""
    rows = []
    for system, rows_ in summary.groupby("system", sort=False):
        below = rows_[rows_["below_saturation"]]
        sust = sustainable[sustainable["system"] == system].iloc[0]
        error = below["normalized_latency_error"].abs()
        noise = np.maximum(TARGETS["max_normalized_latency_error"], noise_band(below))
        rows.append({
            "system": system,
            "max_normalized_latency_error": float(error.max()) if len(below) else float("nan"),
            "median_normalized_latency_error": float(error.median()) if len(below) else float("nan"),
            "rows_within_target": f"{int((error <= TARGETS['max_normalized_latency_error']).sum())}/{len(below)}",
            "rows_within_noise": f"{int((error <= noise).sum())}/{len(below)}",
            "rates_below_saturation": " ".join(f"{r:g}" for r in below["rate"]),
            "max_p90_request_error": float(below["p90_request_error"].max()) if len(below) else float("nan"),
            "max_real_request_spread_p90": float(below["real_request_spread_p90"].max())
            if len(below) else float("nan"),
            "sustainable_rate_error": float(sust["sustainable_rate_error"]),
            "real_sustainable_rate": float(sust["real_sustainable_rate"]),
            "sim_sustainable_rate": float(sust["sim_sustainable_rate"]),
            "max_real_repeat_spread": float(rows_["real_repeat_spread"].max()),
            "max_real_repeat_spread_at_speed": float(rows_["real_repeat_spread_at_speed"].max()),
            "max_uncorrected_normalized_latency_error": float(below["uncorrected_normalized_latency_error"].abs().max())
            if len(below) else float("nan"),
            "min_speed_factor": float(rows_["speed_factor"].min()),
            "max_speed_factor": float(rows_["speed_factor"].max()),
            "mean_iteration_time_error": float(rows_["iteration_time_error"].mean()),
            "exact_replay": bool(exact[exact["system"] == system]["identical"].all()),
        })
    return pd.DataFrame(rows, columns=list(FIDELITY_COLUMNS))


def fidelity_text(fidelity: pd.DataFrame, sustainable: pd.DataFrame | None = None) -> str:
    def pct(v: float) -> str:
        return "   n/a" if v != v else f"{v:6.1%}"

    within = f"<={TARGETS['max_normalized_latency_error']:.0%}"
    header = (f"{'system':<18} {'|norm err|':>10} {'median':>7} {within:>5} {'<=noise':>7} {'p90 req':>8} "
              f"{'req noise':>9} {'sust. real':>10} {'sust. sim':>9} {'sust err':>8} {'spread':>7} {'at speed':>8} "
              f"{'as calib.':>9} {'speed':>10} {'iter err':>8}  exact")
    lines = [header, "-" * len(header)]
    for _, r in fidelity.iterrows():
        probed = r["min_speed_factor"] == r["min_speed_factor"]  # nan when the machine was not probed
        speed = f"{r['min_speed_factor']:.2f}-{r['max_speed_factor']:.2f}" if probed else "n/a"
        lines.append(f"{r['system']:<18} {pct(r['max_normalized_latency_error']):>10} "
                     f"{pct(r['median_normalized_latency_error']):>7} {r['rows_within_target']:>5} "
                     f"{r['rows_within_noise']:>7} {pct(r['max_p90_request_error']):>8} "
                     f"{pct(r['max_real_request_spread_p90']):>9} {r['real_sustainable_rate']:>10.3g} "
                     f"{r['sim_sustainable_rate']:>9.3g} {pct(abs(r['sustainable_rate_error'])):>8} "
                     f"{pct(r['max_real_repeat_spread']):>7} {pct(r['max_real_repeat_spread_at_speed']):>8} "
                     f"{pct(r['max_uncorrected_normalized_latency_error']):>9} {speed:>10} "
                     f"{pct(r['mean_iteration_time_error']):>8}  {'yes' if r['exact_replay'] else 'NO'}")
    lines.append(f"targets: |norm err| <= {TARGETS['max_normalized_latency_error']:.0%} and p90 request error <= "
                 f"{TARGETS['max_p90_request_error']:.0%} at rates below saturation (real normalized latency under "
                 f"the threshold), sustainable rate within {TARGETS['sustainable_rate_error']:.0%}.")
    lines.append("columns: |norm err| the largest and median the median over those rates; <=5% rows within the target; "
                 "<=noise rows whose error is no larger than the difference between the real replays themselves "
                 "(at speed where the simulator ran at the measured speed; or 5%); "
                 "req noise the real replays' p90 per-request spread (the floor under p90 req); spread the real "
                 "run-to-run (max-min)/mean, at speed the same after dividing each replay by its speed factor; "
                 "as calib. the largest |norm err| with the simulator as calibrated; speed the range of speed "
                 "factors (1 = as fast as when profiled; the simulator ran each trace at its replays'); iter err the "
                 "cost model's mean |error| per real iteration, at speed")
    if sustainable is not None and len(sustainable):
        off_range = (sustainable["real_bound"] != "interpolated") | (sustainable["sim_bound"] != "interpolated")
        bounds = sustainable[off_range]
        for _, r in bounds.iterrows():
            lines.append(f"note: {r['system']}: sustainable rate real {r['real_bound']}, sim {r['sim_bound']} "
                         f"(rates {r['rates']}); widen experiment.rates to bracket it")
    return "\n".join(lines)


def breakdown_text(iterations: pd.DataFrame) -> str:
    lines = ["cost model on the engine's own iterations (predicted / measured - 1), by kind:"]
    for _, r in iteration_breakdown(iterations).iterrows():
        lines.append(f"  {r['kind']:<8} {int(r['count']):>6} iterations  "
                     f"median measured {r['median_measured_s'] * 1e3:8.1f} ms"
                     f"  predicted {r['median_predicted_s'] * 1e3:8.1f} ms  mean error {r['mean_error']:+6.1%}"
                     f"  mean |error| {r['mean_abs_error']:5.1%}  host outside {r['median_host_s'] * 1e3:5.1f} ms")
    lines.append("  (host outside: the engine's wall time per step beyond the timed forward (scheduling, inputs, "
                 "completion, records), median; on the real clock, and charged by the simulator from the "
                 "profile's host terms, when validation.clock is step)")
    return "\n".join(lines)
