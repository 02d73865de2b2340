"""Fidelity: how far the simulator lands from the real engine, against the fidelity targets.

Runs `servesim validate` on a validation config (default: configs/validation/cpu-opt-125m.yaml, about
8-10 minutes on a 2-core CPU) and prints, per system: the largest mean normalized-latency error at
rates below saturation, the largest p90 per-request end-to-end error there, the sustainable rate real
vs simulated, the real run-to-run spread beside them, and the cost model's mean per-iteration error on
the batches the engine actually ran, and the same error with the simulator as calibrated (no
machine-speed correction). Targets: <= 5%, <= 10%, within 5%. It prints numbers; it never
fails on them (exit 0 unless the run itself fails).

    python benchmarks/fidelity/fidelity.py [CONFIG] [--out DIR] [--set KEY=VALUE ...] [--from DIR]
                                  [--other-profile PROFILE]

--from DIR re-prints the table of an earlier run without replaying anything, with its headline figures
(the verdict first: leave-one-trace-out on the run's own served iterations; docs/concepts/fidelity.md).
--other-profile PROFILE (with --from) re-simulates that run's traces with a profile measured elsewhere
(e.g. the shipped calibrate/profiles/cpu-opt-125m.yaml, from another VM of the same CPU model), as
calibrated and at the speed the run's probes measured against that profile's probe times, and gives both
headlines against the run's real replays: no real replay runs again.
Ends with: max_norm_err=<float> max_p90_err=<float> max_sust_err=<float> max_spread=<float>
           max_uncorrected_norm_err=<float> wall_s=<float>
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import pandas as pd  # noqa: E402

DEFAULT_CONFIG = ROOT / "configs" / "validation" / "cpu-opt-125m.yaml"


def _max(values) -> float:
    values = [abs(v) for v in values if isinstance(v, (int, float)) and not math.isnan(v)]
    return max(values) if values else float("nan")


def report(fidelity: pd.DataFrame, sustainable: pd.DataFrame, iterations: pd.DataFrame, meta: dict) -> str:
    from fidelity.report import TARGETS, breakdown_text, fidelity_text

    def verdict(value: float, target: float) -> str:
        return "n/a" if math.isnan(value) else ("meets" if value <= target else "misses")

    norm = _max(fidelity["max_normalized_latency_error"])
    p90 = _max(fidelity["max_p90_request_error"])
    sust = _max(fidelity["sustainable_rate_error"])
    spread = _max(fidelity["max_real_repeat_spread"])
    uncorrected = _max(fidelity.get("max_uncorrected_normalized_latency_error", []))
    speeds = [v for v in list(fidelity.get("min_speed_factor", [])) + list(fidelity.get("max_speed_factor", []))
              if v == v]
    speed_line = (f"machine speed during the real replays: {min(speeds):.2f}-{max(speeds):.2f}x the profile's "
                  f"(speed probe); the simulator ran each trace at its replays' speed"
                  if speeds and meta.get("speed_correction") else
                  "machine speed: not corrected "
                  "(validation.speed_correction off, or no speed reference in the profile)")
    load = meta.get("load_average_before"), meta.get("load_average_after")
    lines = [
        f"fidelity: {meta.get('name')}: {meta.get('model')} (max_model_len {meta.get('max_model_len')}) on "
        f"{meta.get('device_name')}, {meta.get('dtype')}, {meta.get('torch_threads')} torch thread(s), "
        f"{meta.get('repeats')} real replays per trace",
        f"conditions: load average {load[0]} before, {load[1]} after; {meta.get('cpu_count')} CPUs; "
        f"run took {meta.get('wall_s')} s",
        f"warm-up: {meta.get('warmup_rule')}",
        f"cost model: {meta.get('cost_model')} (held-out error of its fit: "
        f"{(meta.get('profile') or {}).get('heldout_mape', float('nan')):.1%})",
        speed_line,
        "",
        fidelity_text(fidelity, sustainable),
        breakdown_text(iterations),
        "",
        f"worst system: normalized-latency error {norm:.1%} ({verdict(norm, TARGETS['max_normalized_latency_error'])}"
        f" <= {TARGETS['max_normalized_latency_error']:.0%}), p90 request error {p90:.1%} "
        f"({verdict(p90, TARGETS['max_p90_request_error'])} <= {TARGETS['max_p90_request_error']:.0%}), "
        f"sustainable rate {sust:.1%} ({verdict(sust, TARGETS['sustainable_rate_error'])} <= "
        f"{TARGETS['sustainable_rate_error']:.0%}); real run-to-run spread up to {spread:.1%}; "
        f"as calibrated (no speed correction) the normalized-latency error reaches {uncorrected:.1%}",
        "(published: Vidur < 9%, LLMServingSim ~4% against real serving)",
        f"max_norm_err={norm:.4f} max_p90_err={p90:.4f} max_sust_err={sust:.4f} max_spread={spread:.4f} "
        f"max_uncorrected_norm_err={uncorrected:.4f} wall_s={meta.get('wall_s')}",
    ]
    return "\n".join(lines)


def other_profile_headline(config: str, sets: list[str], run_dir: Path, profile: str,
                           at_speed: bool = False) -> dict:
    """A profile from elsewhere on an earlier run's traces: each system x rate simulated as calibrated, or with
    at_speed at the speed this run's probes measured against that profile's own probe times (carried to this
    machine as validate carries its own profile), its normalized latency against the run's real mean
    (summary.csv), as verdict.headline reads it."""
    from calibrate.fitting.profile_file import load_profile
    from fidelity.calibration import with_profile
    from fidelity.config import load_validation
    from fidelity.heldout import simulated_error
    from fidelity.validate import plan, warmup_for
    from fidelity.verdict import headline

    cfg = with_profile(load_validation(config, sets), Path(profile).resolve())
    p = plan(cfg, exact_only=False)
    other = load_profile(profile)
    summary = pd.read_csv(run_dir / "summary.csv")
    speeds = probed_speeds(pd.read_csv(run_dir / "speed.csv"), other.speed_reference, profile) if at_speed else {}
    systems = {s.name: s for s in cfg.experiment.systems}
    errors = []
    for _, row in summary.iterrows():
        rate = float(row["rate"])
        trace = p.traces[rate]
        scale = speeds[(row["system"], rate)] if at_speed else 1.0
        _, err, _ = simulated_error(cfg, p, systems[row["system"]], trace, other, scale,
                                    warmup_for(cfg, trace)[0], float(row["real_normalized_latency"]))
        errors.append(err)
    return headline(summary.assign(other_profile_error=errors), "other_profile_error")


def probed_speeds(speed: pd.DataFrame, reference: dict, profile: str) -> dict[tuple[str, float], float]:
    """Per (system, rate): the geometric mean over its real replays of the machine's speed factor, each replay's
    probe medians against `reference` (a profile's speed_reference), as validate computes it for its own."""
    from calibrate.profiling.speed import machine_speed

    if not reference:
        raise SystemExit(f"{profile}: no speed_reference (made without the speed probe): use it as calibrated")
    factors: dict[tuple[str, float], list[float]] = {}
    for _, row in speed.iterrows():
        measured = machine_speed({"decode": row["decode_probe_s"], "prefill": row["prefill_probe_s"]}, reference)
        if measured is None:
            raise SystemExit(f"speed.csv: {row['system']} at {row['rate']:g} req/s has no probe times")
        factors.setdefault((row["system"], float(row["rate"])), []).append(math.log(measured.factor))
    return {key: math.exp(sum(logs) / len(logs)) for key, logs in factors.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("config", nargs="?", default=str(DEFAULT_CONFIG))
    parser.add_argument("--out", help="output directory (default results/validation/<name>)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--from", dest="from_dir", help="print the table of an earlier run's directory")
    parser.add_argument("--other-profile", help="with --from: that run's traces simulated with this profile")
    args = parser.parse_args(argv)
    if args.from_dir:
        out = Path(args.from_dir)
        fidelity, sustainable = pd.read_csv(out / "fidelity.csv"), pd.read_csv(out / "sustainable.csv")
        iterations = pd.read_csv(out / "iterations.csv")
        print(report(fidelity, sustainable, iterations, json.loads((out / "validation.json").read_text())))
        if (out / "headline.json").exists():
            from fidelity.verdict import headline_text

            print(headline_text(json.loads((out / "headline.json").read_text()), "headline figures:"))
        if args.other_profile:
            for at_speed, how in ((False, "as calibrated"), (True, "at the speed this run's probes measured")):
                h = other_profile_headline(args.config, args.set, out, args.other_profile, at_speed)
                print(f"{args.other_profile} ({how}) on this run's traces: mean |err| {h['mean_abs_error']:.1%}, "
                      f"signed {h['signed_mean_error']:+.1%}, worst {h['worst_error']:+.1%}, within noise "
                      f"{h['within_noise']}/{h['points']}, within 10% {h['within_10pct']}/{h['points']}")
        return 0

    from fidelity.config import load_validation
    from fidelity.validate import default_out_dir, validate

    cfg = load_validation(args.config, args.set)
    out = Path(args.out) if args.out else default_out_dir(cfg)
    started = time.perf_counter()
    result = validate(cfg, out, log=lambda line: print(line, flush=True))
    result.meta["wall_s"] = round(time.perf_counter() - started, 1)
    print()
    print(report(result.fidelity, result.sustainable, result.iterations, result.meta))
    from fidelity.verdict import headline_text

    print(headline_text(result.headline, "headline figures:"))
    print(f"outputs: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
