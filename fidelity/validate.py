"""`servesim validate`: replay one trace on the real engine and in the simulator, and measure how far apart they are.

For every system x rate the trace is built once (as `servesim run` builds it), checked against the
served model before anything runs, replayed `repeats` times on the engine and once in the simulator
with the profile cost model, over the same KV pool. Each real replay's measured iteration times are
also fed back to the simulator in order (`exact`; a speculating system's accepted counts too, and it is
validated by this alone): it must then take the engine's decisions one for one, which proves that a
real-vs-simulated difference is the cost model's error and nothing else.

A speed probe (calibrate/profiling/speed.py) is timed through every real replay; against the profile's
speed_reference it gives the machine's speed during that replay, and the simulator runs the trace
at that speed (validation.speed_correction), with the as-calibrated error reported beside.

Writes results/validation/<name>/: summary.csv, sustainable.csv, fidelity.csv, requests.csv (the
per-request join), iterations.csv (every real iteration beside the cost model's prediction),
speed.csv (each real replay's probe medians and speed factor), exact.csv, validation.json,
summary.txt, normalized_latency.png, request_scatter.png; and the verdict's (fidelity/heldout.py,
docs/concepts/fidelity.md): loo.csv (each held-out rate's fits), served.csv (every served iteration they read)
and headline.json (the headline figures, written last).
"""
from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pandas as pd

from calibrate.clock.costmodel import ScaledCostModel
from calibrate.hardware.device import device_name
from engine.core.system import SystemSpec
from fidelity.calibration import calibrate_here, with_profile
from fidelity.checks import Pool, check_profile, check_speculation_compared, check_trace, pool_for, serving_spec
from fidelity.config import ValidationConfig
from fidelity.heldout import LOO_COLUMNS, verdict_columns
from fidelity.metrics import (
    ITERATION_COLUMNS,
    REQUEST_JOIN_COLUMNS,
    SUMMARY_COLUMNS,
    iteration_errors,
    request_join,
    summary_row,
    sustainable_rates,
)
from fidelity.real import RealReplay, RealSide, torch_threads
from fidelity.replay import (
    ReplayedAcceptance,
    ReplayedTimes,
    ScheduleComparison,
    ScheduleDiverged,
    compare_schedules,
)
from fidelity.report import breakdown_text, fidelity_table, fidelity_text
from fidelity.served import SERVED_COLUMNS
from fidelity.verdict import (
    FIGURES,
    JUDGED_COLUMNS,
    VERDICT,
    VERDICT_COLUMNS,
    VERDICT_WHY,
    correction_text,
    headline_text,
    headlines,
    saturation_text,
    with_judgement,
)
from sim.core.simulate import simulate
from sim.experiment.output import write_csv, write_json, write_text
from sim.experiment.run import make_cost_model, trace_for
from sim.workload.trace import Trace

SPEED_COLUMNS = ("system", "rate", "repeat", "decode_probe_s", "prefill_probe_s", "probe_samples",
                 "decode_speed_factor", "prefill_speed_factor", "speed_factor", "real_wall_s")
EXACT_COLUMNS = ("system", "rate", "repeat", "num_iterations", "num_requests", "same_batches", "same_preemptions",
                 "max_time_diff_s", "identical", "first_mismatch")
Log = Callable[[str], None]


@dataclass
class ValidationResult:
    out_dir: Path
    summary: pd.DataFrame
    sustainable: pd.DataFrame
    fidelity: pd.DataFrame
    requests: pd.DataFrame
    iterations: pd.DataFrame
    exact: pd.DataFrame
    meta: dict = field(default_factory=dict)
    speed: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=list(SPEED_COLUMNS)))
    loo: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=list(LOO_COLUMNS)))
    served: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=list(SERVED_COLUMNS)))
    headline: dict = field(default_factory=dict)  # verdict.headlines: the figures a repeat is compared on

    @property
    def all_exact(self) -> bool:
        return bool(len(self.exact)) and bool(self.exact["identical"].all())


def exact_check(spec, system: SystemSpec, trace: Trace, pool: Pool, real: RealReplay) -> ScheduleComparison:
    """Feed the simulator the engine's measured times, in order (and a speculating system's accepted counts, in
    place of its draws): the schedules must be identical."""
    replayed = ReplayedTimes(real.times, real.shapes)
    acceptance = ReplayedAcceptance(real.acceptance) if system.speculative is not None else None
    try:
        records = simulate(trace, spec, system, replayed, pool.num_gpu_blocks, pool.num_cpu_blocks,
                           acceptance=acceptance)
    except ScheduleDiverged as err:
        return ScheduleComparison(len(real.iterations), len(real.requests), False, False, float("inf"), str(err))
    comparison = compare_schedules(real.requests, real.iterations, records.requests_frame(),
                                   records.iterations_frame())
    if not replayed.exhausted and not comparison.first_mismatch:
        comparison.same_batches = False
        comparison.first_mismatch = (f"the simulator ran {replayed.position} of the engine's "
                                     f"{len(real.times)} iterations")
    return comparison


# --- orchestration ----------------------------------------------------------------------------
def warmup_for(cfg: ValidationConfig, trace: Trace) -> tuple[float, str]:
    fraction = cfg.options.warmup_fraction
    if fraction is None:
        w = cfg.experiment.warmup_s
        return w, f"arrivals in the first {w:g} s excluded (the paper's rule, experiment.warmup_s)"
    w = fraction * float(trace.duration_s)
    return w, (f"arrivals in the first {fraction:.0%} of each trace excluded ({w:.3g} s of {trace.duration_s:.3g} s "
               f"at this rate): the paper's first-60-s rule, scaled to a short validation trace")


def warmup_rule(cfg: ValidationConfig) -> str:
    fraction = cfg.options.warmup_fraction
    if fraction is None:
        return f"arrivals in the first {cfg.experiment.warmup_s:g} s excluded (the paper's rule, experiment.warmup_s)"
    return (f"arrivals in the first {fraction:.0%} of each trace's duration excluded: the paper's first-60-s "
            f"rule, scaled to short validation traces (validation.warmup_fraction)")


def build_traces(cfg: ValidationConfig, spec, seed: int) -> dict[float, Trace]:
    """Every rate's trace, checked against the served model before anything runs."""
    traces = {}
    for rate in cfg.experiment.rates:
        trace = trace_for(cfg.experiment, rate, seed)
        if len(trace) == 0:
            from engine.errors import SpecError
            raise SpecError(cfg.source, "experiment.workload.duration_s",
                            f"the trace at {rate:g} req/s has no request; lengthen the workload")
        check_trace(trace, spec, cfg.source, what=f"experiment.workload (rate {rate:g} req/s)")
        traces[rate] = trace
    return traces


def _row_line(row: dict) -> str:
    exact = {True: "exact", False: "NOT EXACT", None: ""}[row["exact_replay"]]
    factor = row["speed_factor"]
    speed = "n/a" if factor != factor else f"x{factor:.2f}"  # nan: the machine was not probed
    return (f"  {row['system']:<18} {row['rate']:>6g} req/s  real {row['real_normalized_latency']:.4f} s/tok "
            f"(spread {row['real_repeat_spread']:.1%})  sim {row['sim_normalized_latency']:.4f} "
            f"({row['normalized_latency_error']:+.1%}; "
            f"as calibrated {row['uncorrected_normalized_latency_error']:+.1%}, "
            f"speed {speed})  p90 req err {row['p90_request_error']:.1%}  "
            f"batch {row['real_mean_batched_requests']:.1f}/{row['sim_mean_batched_requests']:.1f}  "
            f"preempt {row['real_preemptions']:g}/{row['sim_preemptions']:g}  {exact}  [{row['real_wall_s']:.0f} s]")


@dataclass
class Plan:
    """Everything a validation run needs, checked before the first replay."""
    spec: object  # the ModelSpec both sides serve
    seed: int
    traces: dict[float, Trace]
    pools: dict[str, Pool]
    cost_models: dict
    profile: object | None
    repeats: int


def plan(cfg: ValidationConfig, exact_only: bool) -> Plan:
    """Refuse bad input before anything runs: the profile, the served length, every trace row, the pools."""
    exp = cfg.experiment
    profile = None if exact_only else check_profile(cfg)
    spec = serving_spec(cfg)
    seed = exp.seeds[0]
    traces = build_traces(cfg, spec, seed)
    pools = {s.name: pool_for(cfg, s, spec) for s in exp.systems}
    cost_models = {} if exact_only else {s.name: make_cost_model(exp, s) for s in exp.systems}
    if cfg.options.clock == "forward":  # the real clock holds no host work: charge none
        for cost_model in cost_models.values():
            cost_model.charge_host = False
    return Plan(spec, seed, traces, pools, cost_models, profile, 1 if exact_only else cfg.options.repeats)


def replay_speed(cfg: ValidationConfig, reals: list[RealReplay]) -> float | None:
    """The speed factor the simulator runs one trace at: the geometric mean of its real replays';
    None (as calibrated) when correction is off or a replay was not probed."""
    if not cfg.options.speed_correction or any(r.speed is None for r in reals):
        return None
    return math.exp(sum(math.log(r.speed_factor) for r in reals) / len(reals))


def compare_one(cfg: ValidationConfig, p: Plan, system: SystemSpec, rate: float, reals: list[RealReplay],
                exact: bool) -> tuple[dict, pd.DataFrame, pd.DataFrame]:
    """Simulate one trace with the cost model (at the machine speed the real replays ran at, and as
    calibrated) and line it up against its real replays."""
    trace, pool, calibrated = p.traces[rate], p.pools[system.name], p.cost_models[system.name]
    speed = replay_speed(cfg, reals)
    cost_model = calibrated if speed is None else ScaledCostModel(calibrated, speed)

    def simulated(model):
        records = simulate(trace, p.spec, system, model, pool.num_gpu_blocks, pool.num_cpu_blocks)
        return records.requests_frame(), records.iterations_frame()

    sim_requests, sim_iterations = simulated(cost_model)
    uncorrected = (sim_requests, sim_iterations) if cost_model is calibrated else simulated(calibrated)
    warmup_s, rule = warmup_for(cfg, trace)
    join = request_join(system.name, rate, [r.requests for r in reals], sim_requests, warmup_s)
    errors = pd.concat([iteration_errors(system.name, rate, i, r.times, r.shapes, calibrated,
                                         r.speed_factor if speed is not None else 1.0, r.host_s)
                        for i, r in enumerate(reals)], ignore_index=True)
    row = summary_row(system=system.name, rate=rate, seed=p.seed, join=join,
                      real_requests=[r.requests for r in reals], real_iterations=[r.iterations for r in reals],
                      sim_requests=sim_requests, sim_iterations=sim_iterations, iteration_errors=errors,
                      pool_slots=pool.num_slots, warmup_s=warmup_s, threshold=cfg.options.latency_threshold,
                      exact_replay=exact, real_wall_s=sum(r.wall_s for r in reals), cost_model=cost_model.source,
                      warmup_rule=rule, speed_factors=[r.speed_factor for r in reals],
                      sim_speed_factor=1.0 if speed is None else speed, speed_corrected=speed is not None,
                      uncorrected_requests=uncorrected[0], uncorrected_iterations=uncorrected[1])
    return row, join, errors


def speed_rows_for(system: SystemSpec, rate: float, reals: list[RealReplay]) -> list[dict]:
    """How fast the machine ran during each real replay: the probes' medians and their factor."""
    rows = []
    for r, real in enumerate(reals):
        rows.append({"system": system.name, "rate": rate, "repeat": r,
                     "decode_probe_s": real.probe_s.get("decode", math.nan),
                     "prefill_probe_s": real.probe_s.get("prefill", math.nan), "probe_samples": real.probe_samples,
                     "decode_speed_factor": real.speed.decode if real.speed else math.nan,
                     "prefill_speed_factor": real.speed.prefill if real.speed else math.nan,
                     "speed_factor": real.speed_factor, "real_wall_s": real.wall_s})
    return rows


def exact_rows_for(p: Plan, system: SystemSpec, rate: float, reals: list[RealReplay]) -> list[dict]:
    rows = []
    for r, real in enumerate(reals):
        comparison = exact_check(p.spec, system, p.traces[rate], p.pools[system.name], real)
        rows.append({"system": system.name, "rate": rate, "repeat": r, **asdict(comparison),
                     "identical": comparison.identical})
    return rows


def validate(cfg: ValidationConfig, out_dir: str | Path, *, exact_only: bool = False,
             log: Log = print) -> ValidationResult:
    started, load_before = time.perf_counter(), _loadavg()
    if not exact_only:
        check_speculation_compared(cfg)
    if cfg.options.calibrate and not exact_only:
        plan(cfg, exact_only=True)  # refuse bad traces and pools before minutes of profiling
        cfg = with_profile(cfg, calibrate_here(cfg, Path(out_dir), log))
    p = plan(cfg, exact_only)
    reference = {} if exact_only or p.profile is None else p.profile.speed_reference
    if not exact_only and not reference:
        log(f"note: {cfg.experiment.cost_model.profile_path} has no speed reference (profiled before the speed "
            f"probe): replays are simulated as calibrated; re-profile to correct for this machine's drift")
    real_side = RealSide(cfg, p.spec, p.seed, reference)
    systems = list(cfg.experiment.systems)
    compared, exact_rows, speed_rows, reals_by = [], [], [], {}
    with torch_threads(cfg.options.torch_threads) as threads:
        engines = {s.name: real_side.engine(s, p.pools[s.name]) for s in systems}
        clocks = {name: real_side.clock_for(engine) for name, engine in engines.items()}
        # every system at one rate, then the next rate: a slow spell of the machine then falls on
        # all systems alike instead of on whichever system ran during it
        progress = Progress(len(p.traces) * len(systems), time.perf_counter())
        log(f"replaying {progress.total} traces x {p.repeats} on the real engine, each then simulated "
            f"(a line per trace, with the time left)")
        for rate, trace in p.traces.items():
            for system in systems:
                engine, clock = engines[system.name], clocks[system.name]
                reals = [real_side.replay(engine, clock, trace) for _ in range(p.repeats)]
                rows = exact_rows_for(p, system, rate, reals)
                exact_rows.extend(rows)
                speed_rows.extend(speed_rows_for(system, rate, reals))
                exact = all(row["identical"] for row in rows)
                if exact_only:
                    log(f"{progress.step()} {system.name:<18} {rate:>6g} req/s  {len(reals[0].iterations)} "
                        f"iterations: "
                        f"{'identical schedule' if exact else 'DIFFERENT: ' + rows[-1]['first_mismatch']}")
                    continue
                reals_by[(system.name, rate)] = reals  # for the leave-one-trace-out fits once all have run
                compared.append(((systems.index(system), rate), *compare_one(cfg, p, system, rate, reals, exact)))
                log(f"{progress.step()}{_row_line(compared[-1][1])}")
        del engines, clocks
    compared.sort(key=lambda c: c[0])  # outputs read system by system, rate by rate
    summary_rows = [c[1] for c in compared]
    joins = [c[2] for c in compared]
    iteration_frames = [c[3] for c in compared]
    rank = {s.name: i for i, s in enumerate(systems)}
    exact_rows.sort(key=lambda r: (rank[r["system"]], r["rate"], r["repeat"]))
    speed_rows.sort(key=lambda r: (rank[r["system"]], r["rate"], r["repeat"]))
    iterations = (pd.concat(iteration_frames, ignore_index=True) if iteration_frames
                  else pd.DataFrame(columns=list(ITERATION_COLUMNS)))
    speed = pd.DataFrame(speed_rows, columns=list(SPEED_COLUMNS))
    loo, served = pd.DataFrame(columns=list(LOO_COLUMNS)), pd.DataFrame(columns=list(SERVED_COLUMNS))
    if summary_rows:
        log("fitting the served iterations leave-one-trace-out and simulating each held-out trace")
        warmups = {rate: warmup_for(cfg, trace)[0] for rate, trace in p.traces.items()}
        loo, served = verdict_columns(cfg, p, systems, reals_by, summary_rows, iterations, speed, warmups, log)
    del reals_by
    summary = pd.DataFrame(summary_rows, columns=list(SUMMARY_COLUMNS) + list(VERDICT_COLUMNS))
    summary = with_judgement(summary) if len(summary) else summary.reindex(
        columns=[*summary.columns, *JUDGED_COLUMNS])
    exact_frame = pd.DataFrame(exact_rows, columns=list(EXACT_COLUMNS))
    sustainable = sustainable_rates(summary, cfg.options.latency_threshold) if len(summary) else pd.DataFrame()
    fidelity = fidelity_table(summary, sustainable, exact_frame) if len(summary) else pd.DataFrame()
    requests = pd.concat(joins, ignore_index=True) if joins else pd.DataFrame(columns=list(REQUEST_JOIN_COLUMNS))
    meta = run_meta(cfg, p, threads, exact_only, load_before, started)
    figures = headlines(summary) if len(summary) else {}
    if figures:
        meta["verdict"] = {"column": VERDICT, "why": VERDICT_WHY,
                           "figures": {name: what for name, (_, what) in FIGURES.items()}}
    result = ValidationResult(Path(out_dir), summary, sustainable, fidelity, requests, iterations, exact_frame, meta,
                              speed, loo=loo, headline=figures, served=served)
    write_outputs(result, cfg, exact_only)
    return result


@dataclass
class Progress:
    """'[3/20, 1m05s left]': traces done, and the time left at the pace so far."""
    total: int
    started: float
    done: int = 0

    def step(self) -> str:
        self.done += 1
        elapsed = time.perf_counter() - self.started
        left = elapsed / self.done * (self.total - self.done)
        return f"[{self.done}/{self.total}, {int(left // 60)}m{int(left % 60):02d}s left]"


def run_meta(cfg: ValidationConfig, p: Plan, threads: int, exact_only: bool, load_before, started: float) -> dict:
    """validation.json: what ran, where, under what load, and which rules applied."""
    exp, opts, profile = cfg.experiment, cfg.options, p.profile
    return {
        "name": cfg.name, "config": cfg.source, "mode": "exact" if exact_only else "validate",
        "model": exp.model.name, "max_model_len": p.spec.max_seq_len, "device": opts.device,
        "device_name": _device_name(opts.device), "dtype": opts.resolved_dtype, "torch_threads": threads,
        "attention_backend": opts.attention_backend, "cuda_graphs": cfg.engine.cuda_graphs,
        "repeats": p.repeats, "seed": p.seed,
        "systems": [s.name for s in exp.systems], "rates": list(exp.rates),
        "pool": {s: asdict(pool) for s, pool in p.pools.items()},
        "workload": {str(rate): t.source for rate, t in p.traces.items()},
        "requests_per_rate": {str(rate): len(t) for rate, t in p.traces.items()},
        "warmup_rule": warmup_rule(cfg),
        "engine_warmup": "one untimed prefill + decode per engine before its first replay",
        "latency_threshold_s_per_token": opts.latency_threshold,
        "cost_model": None if exact_only else str(exp.cost_model.profile_path),
        "profile": None if profile is None else {
            "model": profile.model, "device": profile.device, "device_name": profile.device_name,
            "dtype": profile.dtype, "heldout_mape": profile.heldout_mape, "created": profile.created,
            "speed_reference": profile.speed_reference},
        "speed_correction": opts.speed_correction and bool(profile and profile.speed_reference),
        "speed_probe_every_s": opts.speed_probe_every_s,
        "load_average_before": load_before, "load_average_after": _loadavg(),
        "cpu_count": os.cpu_count(), "wall_s": round(time.perf_counter() - started, 1),
    }


def write_outputs(result: ValidationResult, cfg: ValidationConfig, exact_only: bool) -> None:
    out = result.out_dir
    write_csv(result.exact, out / "exact.csv")
    write_json(result.meta, out / "validation.json")
    if exact_only:
        return
    from fidelity.plots import fidelity_plot, request_scatter

    write_csv(result.summary, out / "summary.csv")
    write_csv(result.sustainable, out / "sustainable.csv")
    write_csv(result.fidelity, out / "fidelity.csv")
    write_csv(result.requests, out / "requests.csv")
    write_csv(result.iterations, out / "iterations.csv")
    write_csv(result.speed, out / "speed.csv")
    write_csv(result.loo, out / "loo.csv")
    write_csv(result.served, out / "served.csv")
    exp = cfg.experiment
    title = (f"{exp.model.name} on {result.meta['device_name']} ({cfg.options.device}, {cfg.options.resolved_dtype}): "
             f"real (solid), sim at measured speed (dashed), as calibrated (dotted)")
    fidelity_plot(result.summary, out / "normalized_latency.png", title=title,
                  threshold=cfg.options.latency_threshold)
    request_scatter(result.requests, out / "request_scatter.png", title=f"{exp.model.name}: per-request latency")
    text = fidelity_text(result.fidelity, result.sustainable)
    write_text(f"{cfg.name}: {result.meta['warmup_rule']}\n{text}\n{breakdown_text(result.iterations)}\n"
               f"{headline_text(result.headline, 'normalized-latency error over every point:')}\n"
               f"{saturation_text(result.summary)}\n"
               f"{correction_text(result.loo)}\n",
               out / "summary.txt")
    # last: a repeat of the whole validation counts as done once its headline is written (fidelity/repeat.py)
    write_json(result.headline, out / "headline.json")


def _loadavg() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def _device_name(device: str) -> str:
    """The device, as a profile names it; a CPU with its core count (the report reads 'AMD EPYC x2')."""
    name = device_name(device)
    return name if device == "cuda" else f"{name} x{os.cpu_count()}"


def default_out_dir(cfg: ValidationConfig) -> Path:
    return Path("results") / "validation" / cfg.name


