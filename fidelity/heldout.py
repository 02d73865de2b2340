"""Once every trace has been replayed: the leave-one-trace-out simulations and the verdict's columns.

For each rate (one trace, replayed by every system) the served-iteration cost model is fitted without
that rate's iterations (fidelity/served.py) and the simulator replays the held-out trace for every
system with it, plainly and at the held-out replays' probed speed; the speed correction counts only
where it fitted the training traces better. The grid profile's correction is chosen the same way, on
the other rates' served iterations. summary.csv gets verdict.VERDICT_COLUMNS; loo.csv one row per
held-out rate (what each fit saw, how well it fitted, how well it predicted the held-out iterations).
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from calibrate.clock.costmodel import ScaledCostModel
from calibrate.cost_models.profile_model import ProfileCostModel
from fidelity.metrics import normalized_latency, relative_error
from fidelity.served import as_profile, fit_error, fit_without, replay_error, served_rows
from fidelity.verdict import grid_correction_by_rate, within_noise
from sim.core.simulate import simulate

LOO_COLUMNS = ("held_out_rate", "train_iterations", "train_error", "train_error_at_speed", "speed_corrected",
               "heldout_iterations", "heldout_iteration_error", "heldout_replay_error", "heldout_replay_error_plain",
               "heldout_replay_error_at_speed", "heldout_replay_error_relative", "grid_speed_corrected",
               "grid_other_error", "grid_other_error_at_speed")


def all_served_rows(reals_by: dict) -> pd.DataFrame:
    return pd.concat([served_rows(system, rate, i, r.times, r.shapes, r.speed_factor)
                      for (system, rate), reals in reals_by.items() for i, r in enumerate(reals)],
                     ignore_index=True)


def geometric_speed(reals) -> float:
    factors = np.array([r.speed_factor for r in reals], dtype=float)
    return float(np.exp(np.log(factors).mean())) if np.isfinite(factors).all() and (factors > 0).all() else math.nan


def simulated_error(cfg, p, system, trace, profile, scale: float, warmup_s: float,
                    real: float) -> tuple[float, float, float]:
    """The held-out trace simulated with a served fit (times `scale`): its normalized latency, that
    latency's error, and its makespan (the last request's finish: what judges a point past saturation)."""
    pool = p.pools[system.name]
    model = ProfileCostModel(profile, "served", system.block_size, cfg.experiment.precision.kv_bytes)
    model = model if scale == 1.0 else ScaledCostModel(model, scale)
    records = simulate(trace, p.spec, system, model, pool.num_gpu_blocks, pool.num_cpu_blocks)
    requests = records.requests_frame()
    sim = normalized_latency(requests, records.iterations_frame(), pool.num_slots, warmup_s)
    finished = requests["finish_s"].dropna()
    makespan = float(finished.max()) if len(finished) else math.nan
    return sim, float(relative_error(sim, real)), makespan


def verdict_columns(cfg, p, systems, reals_by: dict, rows: list[dict], iterations: pd.DataFrame,
                    speed: pd.DataFrame, warmups: dict, log=print) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Fill VERDICT_COLUMNS into each summary row (in place); returns loo.csv's frame and served.csv's (every
    served iteration the fits read). A rate whose other
    rates served too few iterations to fit (a one-rate validation) has no leave-one-trace-out figures (nan)."""
    served = all_served_rows(reals_by)
    probed = bool(len(speed)) and bool(np.isfinite(speed["speed_factor"].to_numpy(float)).all())
    correct = cfg.options.speed_correction and probed
    served = served if correct else served.assign(speed_factor=math.nan)
    grid = grid_correction_by_rate(iterations, speed) if correct else {}
    by_key = {(row["system"], row["rate"]): row for row in rows}
    loo = []
    for rate, trace in p.traces.items():
        grid_choice = grid.get(float(rate), (False, math.nan, math.nan))
        for system in systems:
            grid_columns(by_key[(system.name, rate)], grid_choice[0])
        try:
            left = fit_without(served, rate)
        except ValueError as err:
            log(f"note: no leave-one-trace-out fit for {rate:g} req/s: {err}")
            continue
        held = served[served["rate"] == rate]
        loo.append(loo_row(left, held, grid_choice))
        plain = as_profile(p.profile, left.plain, left.train_rows, left.train_error, "served, leave-one-trace-out")
        relative = as_profile(p.profile, left.relative, left.train_rows, math.nan, "served, relative fit")
        at_speed = (None if left.at_speed is None else
                    as_profile(p.profile, left.at_speed, left.train_rows, left.train_error_at_speed,
                               "served at speed, leave-one-trace-out"))
        for system in systems:
            row = by_key[(system.name, rate)]
            real = row["real_normalized_latency"]
            sim_plain, err_plain, span_plain = simulated_error(cfg, p, system, trace, plain, 1.0, warmups[rate],
                                                               real)
            sim_speed, err_speed, span_speed = (math.nan, math.nan, math.nan) if at_speed is None else \
                simulated_error(cfg, p, system, trace, at_speed, geometric_speed(reals_by[(system.name, rate)]),
                                warmups[rate], real)
            _, err_relative, _ = simulated_error(cfg, p, system, trace, relative, 1.0, warmups[rate], real)
            chosen_sim, chosen, span = ((sim_speed, err_speed, span_speed) if left.corrected
                                        else (sim_plain, err_plain, span_plain))
            row.update({
                "loo_sim_normalized_latency": chosen_sim, "loo_normalized_latency_error": chosen,
                "loo_sim_makespan_s": span,
                "loo_makespan_error": float(relative_error(span, row["real_makespan_s"])),
                "loo_plain_normalized_latency_error": err_plain, "loo_at_speed_normalized_latency_error": err_speed,
                "loo_relative_normalized_latency_error": err_relative, "loo_speed_corrected": left.corrected,
                "loo_heldout_iteration_error": loo[-1]["heldout_iteration_error"],
                "within_noise": bool(within_noise(chosen, row["real_low_error"], row["real_high_error"])),
            })
    return pd.DataFrame(loo, columns=list(LOO_COLUMNS)), served


def grid_columns(row: dict, correction_helps: bool) -> None:
    """The grid profile's error: at the probed speed where that fitted the other rates' iterations better."""
    corrected = bool(correction_helps and row["speed_corrected"])
    error = row["normalized_latency_error"] if corrected else row["uncorrected_normalized_latency_error"]
    row.update({"grid_speed_corrected": corrected, "grid_normalized_latency_error": error,
                "grid_within_noise": bool(within_noise(error, row["real_low_error"], row["real_high_error"])),
                "loo_sim_normalized_latency": math.nan, "loo_normalized_latency_error": math.nan,
                "loo_sim_makespan_s": math.nan, "loo_makespan_error": math.nan,
                "loo_plain_normalized_latency_error": math.nan, "loo_at_speed_normalized_latency_error": math.nan,
                "loo_relative_normalized_latency_error": math.nan,
                "loo_speed_corrected": False, "loo_heldout_iteration_error": math.nan, "within_noise": False})


def loo_row(left, held: pd.DataFrame, grid_choice) -> dict:
    """loo.csv: what one held-out rate's fits saw, how well they fitted (each training replay's summed time),
    how well they predict the held-out replays' summed times, and the chosen fit's error per held-out iteration."""
    if not len(held):
        return {"held_out_rate": left.held_out_rate, "train_iterations": left.train_rows, "heldout_iterations": 0}
    factor = held["speed_factor"].to_numpy(float)
    chosen, chosen_factor = (left.at_speed, factor) if left.corrected else (left.plain, 1.0)
    speed_err = replay_error(left.at_speed, held, factor) if left.at_speed is not None else math.nan
    return {"held_out_rate": left.held_out_rate, "train_iterations": left.train_rows,
            "train_error": left.train_error, "train_error_at_speed": left.train_error_at_speed,
            "speed_corrected": left.corrected, "heldout_iterations": len(held),
            "heldout_iteration_error": fit_error(chosen, held, chosen_factor),
            "heldout_replay_error": replay_error(chosen, held, chosen_factor),
            "heldout_replay_error_plain": replay_error(left.plain, held),
            "heldout_replay_error_at_speed": speed_err,
            "heldout_replay_error_relative": replay_error(left.relative, held),
            "grid_speed_corrected": grid_choice[0], "grid_other_error": grid_choice[1],
            "grid_other_error_at_speed": grid_choice[2]}
