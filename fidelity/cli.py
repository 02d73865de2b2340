"""`servesim validate CONFIG`: real engine vs simulator on the same traces (see fidelity/validate.py); and
`servesim validate --run PATH`: a real serving run's own records vs its simulated replay (fidelity/runs/)."""
from __future__ import annotations

import argparse
import time
from pathlib import Path


def _cmd_validate(args) -> int:
    if args.run is not None or args.config is None:
        return _cmd_validate_run(args)
    if args.workload is not None or args.experiment is not None:
        from engine.errors import SpecError

        raise SpecError("command line", "--workload" if args.workload is not None else "--config",
                        "belongs to --run PATH (a real run's replay); a validation CONFIG holds its own experiment")
    from fidelity.checked import VALIDATE_FLAGS, validate_arguments
    from fidelity.report import breakdown_text, fidelity_text
    from fidelity.validate import validate
    from fidelity.verdict import correction_text, headline_text

    if args.repeat < 1 or (args.repeat > 1 and args.exact):
        from engine.errors import SpecError

        raise SpecError("command line", "--repeat", (
            f"must be a whole number >= 1, got {args.repeat}" if args.repeat < 1 else
            "repeats the whole validation; --exact only checks the schedules once: give one of them"))
    overrides = list(args.set) + ([f"validation.repeats={args.repeats}"] if args.repeats is not None else [])
    if args.calibrate is not None:
        overrides.append(f"validation.calibrate={'true' if args.calibrate else 'false'}")
    cfg, out_dir, _ = validate_arguments(args.config, args.out, overrides, args.exact, VALIDATE_FLAGS,
                                         "servesim validate")
    exp, opts = cfg.experiment, cfg.options
    mode = "exact replay (engine times fed back to the simulator)" if args.exact else \
        f"{opts.repeats} real replays + 1 simulated per trace"
    print(f"servesim validate: {cfg.name}: {exp.model.name} on {opts.device} ({opts.resolved_dtype}), "
          f"{len(exp.systems)} systems x {len(exp.rates)} rates, {mode} -> {out_dir}")
    started = time.perf_counter()
    if args.repeat > 1:
        return _repeat(cfg, out_dir, args.repeat, started)
    result = validate(cfg, out_dir, exact_only=args.exact)
    elapsed = time.perf_counter() - started
    if args.exact:
        bad = result.exact[~result.exact["identical"]]
        print(f"exact replay: {len(result.exact) - len(bad)}/{len(result.exact)} schedules identical "
              f"({int(result.exact['num_iterations'].sum())} iterations); wrote {out_dir}/exact.csv "
              f"in {elapsed:.0f} s")
        for _, row in bad.iterrows():
            print(f"  {row['system']} at {row['rate']:g} req/s: {row['first_mismatch']}")
        return 0 if result.all_exact else 1
    print(f"warm-up: {result.meta['warmup_rule']}")
    print(fidelity_text(result.fidelity, result.sustainable))
    print(breakdown_text(result.iterations))
    print(headline_text(result.headline, "normalized-latency error over every point:"))
    print(correction_text(result.loo))
    print(f"engine and simulator schedules identical when fed the measured times: "
          f"{'yes' if result.all_exact else 'NO (see exact.csv)'}")
    print(f"wrote {out_dir}/summary.csv, sustainable.csv, fidelity.csv, requests.csv, iterations.csv, speed.csv, "
          f"exact.csv, normalized_latency.png, request_scatter.png in {elapsed:.0f} s")
    return 0 if result.all_exact else 1


def _repeat(cfg, out_dir: Path, n: int, started: float) -> int:
    """The whole validation n times, each into <out>/repeat-k (finished ones kept); the headline's spread."""
    from fidelity.repeat import run_repeats, spread_text
    from fidelity.validate import validate

    def once(folder: Path) -> dict:
        return validate(cfg, folder, log=lambda line: print(line, flush=True)).headline

    frame = run_repeats(n, out_dir, once, log=lambda line: print(line, flush=True))
    print(spread_text(frame))
    print(f"wrote {out_dir}/repeat-1..{n}, repeats.csv, repeats.txt in {time.perf_counter() - started:.0f} s")
    return 0


def _cmd_validate_run(args) -> int:
    """A real run against its replay: nothing of the real engine runs, so neither torch nor a profile is needed."""
    from engine.errors import SpecError

    if args.run is None:
        raise SpecError("command line", "CONFIG", "missing: give a validation CONFIG, or --run PATH (a real run)")
    if args.config is not None:
        raise SpecError("command line", "CONFIG", f"{args.config}: with --run, give an experiment as --config CONFIG")
    engine_only = [flag for flag, given in (("--repeats", args.repeats is not None),
                                            ("--calibrate", args.calibrate is not None),
                                            ("--repeat", args.repeat != 1), ("--exact", args.exact)) if given]
    if engine_only:
        raise SpecError("command line", engine_only[0], "runs the real engine; --run compares a real run's records "
                        "with its simulated replay, and runs no engine")
    from fidelity.runs.command import title, validate_run
    from fidelity.runs.comparison import summary_text
    from fidelity.runs.outputs import FILES

    started = time.perf_counter()
    result = validate_run(args.run, workload=args.workload, config=args.experiment, overrides=list(args.set),
                          out_dir=args.out or None, log=lambda line: print(line, flush=True))
    print(f"servesim validate --run: {result.out_dir}")
    for note in (*result.run.notes, *result.setup.notes):
        print(f"  note: {note}")
    if result.simulated.dropped or result.simulated.unfinished:
        print(f"  note: {result.simulated.dropped} requests dropped and {result.simulated.unfinished} unfinished by "
              f"the simulated engine (horizon {result.simulated.horizon_s:.0f} s)")
    print(title(result, separator=": "))
    print(summary_text(result.summary))
    print(f"wrote {result.out_dir}/{', '.join(FILES)} in {time.perf_counter() - started:.1f} s")
    return 0


def register(sub) -> None:
    p = sub.add_parser("validate", help="replay traces on the real engine and in the simulator, or a real serving "
                       "run's workload in the simulator; measure the gap")
    p.add_argument("config", nargs="?", help="validation YAML, e.g. configs/validation/cpu-opt-125m.yaml (not with "
                   "--run)")
    p.add_argument("--run", metavar="PATH", help="a real serving run to compare with its simulated replay: a bench "
                   "run's folder (LLMServingSim's layout of a vLLM run) or a `vllm bench serve --save-detailed` JSON")
    p.add_argument("--workload", metavar="PATH", help="with --run: the workload JSONL[.gz] the bench run replayed, "
                   "where it is not beside or above the run")
    p.add_argument("--config", dest="experiment", metavar="CONFIG", help="with --run: an experiment YAML whose keys "
                   "override the run's settings or give what it did not record (model, hardware, systems, "
                   "cost_model, a workload's arrivals)")
    p.add_argument("--out", help="output directory (default results/validation/<name>)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a key, e.g. --set experiment.rates=[1,2] --set validation.repeats=3; with --run, "
                        "an experiment key, e.g. --set hardware=h100-sxm")
    p.add_argument("--repeats", type=int, help="real replays per trace (overrides validation.repeats)")
    p.add_argument("--calibrate", action=argparse.BooleanOptionalAction, default=None,
                   help="profile and fit the engine on this device first and validate against that profile "
                        "(written under the output folder); overrides validation.calibrate")
    p.add_argument("--repeat", type=int, default=1, metavar="N",
                   help="run the whole validation N times (calibration included), each into <out>/repeat-k, and "
                        "report the spread of its headline figures; finished repeats are kept when rerun")
    p.add_argument("--exact", action="store_true",
                   help="only prove the control planes agree: feed the simulator the engine's measured "
                        "iteration times (and a speculating system's accepted counts) and require the identical "
                        "schedule (one real replay per trace); the only validation of a speculating system")
    p.set_defaults(func=_cmd_validate)
