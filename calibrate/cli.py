"""`servesim calibrate profile | fit | import | show`."""
from __future__ import annotations

import shlex
import sys
from pathlib import Path

from engine.specs.errors import SpecError


def _cmd_profile(args) -> int:
    from engine.runtime import require_torch

    require_torch("servesim calibrate profile")
    from calibrate.fit import NOT_SHAPES
    from calibrate.grid import default_grid
    from calibrate.profile import profile, save_raw
    from engine.specs.loader import load_model_spec

    spec = load_model_spec(args.model)
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)  # the engine being calibrated must run with the same
    grid = args.grid or default_grid(args.device)
    raw = profile(spec, device=args.device, dtype=args.dtype, grid=grid, repeats=args.repeats,
                  block_size=args.block_size, probe_every_s=args.probe_every_s, block_sizes=args.block_sizes)
    save_raw(raw, args.out)
    kinds = raw["kind"]
    shapes = int((~kinds.isin(NOT_SHAPES)).sum())
    sizes = sorted(raw["block_size"].unique())
    print(f"wrote {shapes} profiled shapes (block sizes {', '.join(map(str, sizes))}), "
          f"{int((kinds == 'swap').sum())} swap timings, {int((kinds == 'host').sum())} iterations' host work, "
          f"{int((kinds == 'serving').sum())} served iterations re-timed alone "
          f"and {int((kinds == 'probe').sum())} speed-probe timings to {args.out}")
    return 0


def _cmd_fit(args) -> int:
    import pandas as pd

    from calibrate.fit import fit_and_save

    if not Path(args.raw).exists():
        raise SpecError(args.raw, "", "no such profile CSV")
    raw = pd.read_csv(args.raw)
    command = "servesim calibrate fit " + " ".join(shlex.quote(a) for a in sys.argv[3:]) if len(sys.argv) > 3 \
        else f"servesim calibrate fit {args.raw} --out {args.out}"
    plot = Path(args.plot) if args.plot else Path(args.out).with_suffix(".png")
    result = fit_and_save(raw, args.raw, command, args.out, plot, folds=args.folds, seed=args.seed)
    print(fit_report(result.profile))
    from calibrate.transfer_judge import fit_lines  # a GPU profile: the transfer judged with this GPU held out

    for line in fit_lines(args.raw):
        print(line)
    print(f"wrote {args.out} and {plot}")
    return 0


def _cmd_import(args) -> int:
    from calibrate.op_import import import_profile, report

    command = "servesim calibrate import " + " ".join(shlex.quote(a) for a in sys.argv[3:]) if len(sys.argv) > 3 \
        else f"servesim calibrate import {' '.join(args.tables)} --model {args.model} --out {args.out}"
    provenance = {key: value for key, value in (("source", args.source), ("licence", args.licence)) if value}
    result = import_profile(args.tables, args.all_reduce, args.model, args.measured_on, command,
                            host_profile=args.host, max_tokens=args.max_tokens, provenance=provenance)
    print(report(result))
    result.profile.save(args.out)
    print(f"wrote {args.out}: use it as cost_model: {{kind: transfer, path: {args.out}}}")
    return 0


def fit_report(profile) -> str:
    from calibrate.features import TERMS
    from calibrate.host import HOST_TERMS

    lines = [f"profile: {profile.model} on {profile.device_name} ({profile.device}, {profile.dtype}), "
             f"block size {profile.block_size}, tp {profile.tensor_parallel}",
             block_sizes_line(profile),
             f"made {profile.created} by: {profile.command}",
             f"shapes: {profile.grid}",
             f"held-out error: mean {profile.heldout_mape:.1%}, p95 {profile.heldout_p95_ape:.1%} "
             f"({profile.heldout_method or f'{profile.heldout_rows} shapes held out'})",
             "token-cost table (tokens in the iteration: seconds; linear between, the last slope past the end):"]
    pairs = [f"{k}: {c * 1e3:.2f} ms" for k, c in zip(profile.token_knots, profile.token_costs_s)]
    lines += ["  " + ", ".join(pairs[i:i + 6]) for i in range(0, len(pairs), 6)]
    if profile.linear:
        lines += linear_report(profile)
    lines.append("coefficients:")
    for term, meaning in TERMS.items():
        lines.append(f"  {term:<24} {profile.coefficients[term]:.4g}   ({meaning})")
    if profile.torch_threads is not None:
        lines.append(f"measured with {profile.torch_threads} torch thread(s)")
    lines.append(swap_line(profile))
    if profile.host:
        h = profile.host
        lines.append(f"host work around the forward ({h['rows']} iterations of a replay; "
                     f"mean {h['mean_s'] * 1e3:.2f} ms, held-out mean |error| "
                     f"{h['heldout_mean_abs_error_s'] * 1e3:.2f} ms):")
        lines += [f"  {term:<24} {h[term]:.4g}   ({meaning})" for term, meaning in HOST_TERMS.items()]
    else:
        lines.append("host work around the forward: not measured (the simulator charges the forward alone)")
    if profile.serving:
        v = profile.serving
        lines.append(f"serving factor {v['factor']:.3f}: {v['iterations']} iterations of a replay took "
                     f"{v['served_s']:.3f} s served and {v['alone_s']:.3f} s re-timed alone (the forward is charged "
                     f"x{v['factor']:.3f})")
    else:
        lines.append("serving factor: not measured (the forward is charged as the shapes were timed alone)")
    ref = profile.speed_reference
    if ref:
        probes = ", ".join(f"{k.removesuffix('_s')} {v * 1e3:.2f} ms" for k, v in ref.items() if k.endswith("_s"))
        lines.append(f"speed reference ({ref.get('probe', 'probe')}; median of {ref.get('samples')}): {probes}")
    else:
        lines.append("speed reference: none (profiled before the speed probe; `servesim validate` cannot "
                     "correct this machine's drift against it)")
    return "\n".join(lines)


def linear_report(profile) -> list[str]:
    """An imported profile's linear part, all-reduce table and provenance (calibrate/op_import.py)."""
    lin = profile.linear
    lines = [f"linear part (non-attention; imported, fitted on {len(lin.get('models', []))} models up to "
             f"{lin.get('max_tokens')} tokens): compute {lin['compute_efficiency']:.3f} of peak, bandwidth "
             f"{lin['bandwidth_efficiency']:.3f}, ridge efficiency {lin['ridge_efficiency']:.3f}, matmul latency "
             f"{lin['gemm_latency_s'] * 1e6:.1f} us"]
    lines += [f"  {op:<26} latency {v['latency_s'] * 1e6:5.1f} us, bandwidth {v['bandwidth_efficiency']:.3f}"
              for op, v in lin.get("elementwise", {}).items()]
    if profile.all_reduce:
        lines.append(f"all-reduce measured on {sorted(profile.all_reduce)} GPUs "
                     f"({', '.join(str(len(v['size_bytes'])) for v in profile.all_reduce.values())} sizes)")
    if profile.provenance:
        lines.append("provenance: " + "; ".join(f"{k}: {v}" for k, v in profile.provenance.items()))
    lines.append("attention is not in these measurements: use it as cost_model: {kind: transfer, path: ...}")
    return lines


def block_sizes_line(profile) -> str:
    sizes = profile.block_sizes or [profile.block_size]
    if len(sizes) > 1:
        return f"decodes timed at block sizes {', '.join(map(str, sizes))}: decode_block_s fitted"
    return (f"decodes timed at block size {sizes[0]} only: decode_block_s not measured (0; profile with "
            f"--block-sizes to fit it)")


def swap_line(profile) -> str:
    if profile.swap_s_per_transfer is None or profile.swap_s_per_byte is None:
        return "swap: not measured (the roofline's defaults over the config's PCIe)"
    per_byte = profile.swap_s_per_byte
    rate = f"{1 / per_byte / 1e9:.1f} GB/s" if per_byte > 0 else "no cost per byte"
    return (f"swap: {profile.swap_s_per_transfer * 1e6:.2f} us per transfer (a block's K or V of one layer) "
            f"+ bytes at {rate}")


def _cmd_show(args) -> int:
    from calibrate.profile_file import load_profile

    print(fit_report(load_profile(args.profile)))
    return 0


def _positive_seconds(text: str) -> float:
    import argparse

    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text}")
    return value


def parse_block_sizes(text: str) -> tuple[int, ...]:
    import argparse

    try:
        sizes = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of block sizes") from None
    if not sizes or any(size <= 0 for size in sizes):
        raise argparse.ArgumentTypeError(f"block sizes must be positive whole numbers of tokens, got {text}")
    return sizes


def register(sub) -> None:
    from calibrate.grid import GRIDS
    from calibrate.hardware import available_hardware

    cal = sub.add_parser("calibrate", help="profile the engine, fit a cost model, import per-operation GPU timings, "
                                           "show a profile")
    cmds = cal.add_subparsers(dest="calibrate_command", required=True)
    prof = cmds.add_parser("profile", help="time the engine over a grid of batch shapes (needs servesim[engine])")
    prof.add_argument("--model", required=True)
    prof.add_argument("--device", default="cpu", help="cpu | cuda")
    prof.add_argument("--dtype", default=None, help="default: float32 on cpu, float16 on cuda")
    prof.add_argument("--grid", default=None, choices=sorted(GRIDS),
                      help="shapes to time; default: cpu on a CPU, default on a GPU")
    prof.add_argument("--repeats", type=int, default=3, help="passes over the grid, each in a shuffled order")
    prof.add_argument("--probe-every-s", type=_positive_seconds, default=1.0,
                      help="seconds between speed-probe samples (the profile's speed reference)")
    prof.add_argument("--block-size", type=int, default=16)
    prof.add_argument("--block-sizes", type=parse_block_sizes, default=(),
                      help="comma-separated block sizes to also time decodes and swaps at (e.g. 1,4,16,64,256): "
                           "fits the cost per KV block read and per swap transfer")
    prof.add_argument("--threads", type=int, default=0, help="CPU: torch intra-op threads (default: torch's)")
    prof.add_argument("--out", required=True)
    prof.set_defaults(func=_cmd_profile)
    fit = cmds.add_parser("fit", help="fit a cost model to a profile CSV, report held-out error")
    fit.add_argument("raw")
    fit.add_argument("--out", required=True)
    fit.add_argument("--plot", help="predicted-vs-measured PNG (default: beside --out)")
    fit.add_argument("--folds", type=int, default=5, help="cross-validation folds for the held-out error")
    fit.add_argument("--seed", type=int, default=0)
    fit.set_defaults(func=_cmd_fit)
    imp = cmds.add_parser("import", help="per-operation GPU timings (Vidur's profiling tables) into a profile of "
                                         "an iteration's linear part, with held-out error")
    imp.add_argument("tables", nargs="+", help="per-operation tables, one per model (Vidur's mlp.csv)")
    imp.add_argument("--all-reduce", help="all-reduce times by message size (Vidur's network/*.all_reduce.csv)")
    imp.add_argument("--model", required=True,
                     help="the servesim model whose measured linear part becomes the profile's token-cost table")
    imp.add_argument("--measured-on", default="a100-80gb", choices=available_hardware(),
                     help="the shipped hardware spec of the GPU the tables were measured on")
    imp.add_argument("--host", help="a profile that measured the engine's host work, charged in series")
    imp.add_argument("--max-tokens", type=int, default=4096, help="fit rows up to this many tokens")
    imp.add_argument("--source", default="", help="where the tables came from, kept in the profile")
    imp.add_argument("--licence", default="", help="the tables' licence, kept in the profile")
    imp.add_argument("--out", required=True)
    imp.set_defaults(func=_cmd_import)
    show = cmds.add_parser("show", help="print a profile's fit report")
    show.add_argument("profile")
    show.set_defaults(func=_cmd_show)
