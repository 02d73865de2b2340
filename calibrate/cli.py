"""`servesim calibrate profile | fit | import | host | show`."""
from __future__ import annotations

import shlex
import sys
from pathlib import Path

from engine.errors import SpecError
from engine.specs.checks import existing_file, number, option, output_file, positive_int


def _cmd_profile(args) -> int:
    from engine.runtime import require_torch

    option(positive_int, args.repeats, "--repeats")
    option(positive_int, args.block_size, "--block-size")
    option(number, args.threads, "--threads", low=0, whole=True)
    output_file(args.out, "--out")

    require_torch("servesim calibrate profile")
    check_device(args.device)
    from calibrate.fitting.fit import NOT_SHAPES
    from calibrate.profiling.grid import default_grid
    from calibrate.profiling.profile import profile, save_raw
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
    from calibrate.fitting.fit import check_raw, fit_and_save

    fit_options(args)
    raw = check_raw(read_raw(args.raw), args.raw)
    check_folds(args.folds, raw, args.raw)
    command = "servesim calibrate fit " + " ".join(shlex.quote(a) for a in sys.argv[3:]) if len(sys.argv) > 3 \
        else f"servesim calibrate fit {args.raw} --out {args.out}"
    plot = Path(args.plot) if args.plot else Path(args.out).with_suffix(".png")
    result = fit_and_save(raw, args.raw, command, args.out, plot, folds=args.folds, seed=args.seed)
    print(fit_report(result.profile))
    from calibrate.judging.transfer_judge import fit_lines  # a GPU profile: the transfer judged with this GPU held out

    for line in fit_lines(args.raw):
        print(line)
    print(f"wrote {args.out} and {plot}")
    return 0


def _cmd_import(args) -> int:
    option(positive_int, args.max_tokens, "--max-tokens")
    output_file(args.out, "--out")
    command = "servesim calibrate import " + " ".join(shlex.quote(a) for a in sys.argv[3:]) if len(sys.argv) > 3 \
        else f"servesim calibrate import {' '.join(args.tables)} --model {args.model} --out {args.out}"
    provenance = {key: value for key, value in (("source", args.source), ("licence", args.licence)) if value}
    if import_format(args) == "llmservingsim":
        result, text = _import_bundles(args, command, provenance)
    else:
        result, text = _import_vidur(args, command, provenance)
    print(text)
    result.profile.save(args.out)
    print(f"wrote {args.out}: use it as cost_model: {{kind: transfer, path: {args.out}}}")
    return 0


def import_format(args) -> str:
    """--format, or under `auto` what the paths are: LLMServingSim bundle folders, or Vidur's tables."""
    from calibrate.tables.llmservingsim_bundle import is_bundle

    if args.format != "auto":
        return args.format
    bundles = [is_bundle(path) for path in args.tables]
    if any(bundles) and not all(bundles):
        raise SpecError("--format", "", "the paths mix LLMServingSim bundle folders and per-operation tables; give "
                        "one kind (or --format vidur or llmservingsim)")
    return "llmservingsim" if bundles[0] else "vidur"


def _import_vidur(args, command: str, provenance: dict):
    from calibrate.judging.op_import import import_profile, report

    for table in (*args.tables, *args.also):
        existing_file(table, table, what="a per-operation table (Vidur's mlp.csv)")
    for name, path in (("--all-reduce", args.all_reduce), ("--host", args.host), ("--attention", args.attention)):
        if path is not None:
            existing_file(path, name)
    result = import_profile(args.tables, args.all_reduce, args.model, args.measured_on or "a100-80gb", command,
                            host_profile=args.host, max_tokens=args.max_tokens, provenance=provenance,
                            also_tables=args.also, also_measured_on=args.also_measured_on,
                            attention_path=args.attention)
    return result, report(result)


def _import_bundles(args, command: str, provenance: dict):
    """LLMServingSim bundles carry their own attention and no all-reduce or host work: those options are refused."""
    from calibrate.judging.bundle_import import import_bundles
    from calibrate.judging.bundle_report import bundle_report

    for name, given in (("--all-reduce", args.all_reduce), ("--attention", args.attention), ("--host", args.host),
                        ("--also", args.also)):
        if given:
            raise SpecError(name, "", "not read with LLMServingSim bundles: a bundle carries its attention.csv, and "
                            "no all-reduce or host work was measured in it (the profile names a host model instead); "
                            "a second GPU's bundles make a profile of their own")
    result = import_bundles(args.tables, args.model, args.measured_on, command, provenance, args.max_tokens)
    return result, bundle_report(result)


def check_device(device: str) -> None:
    """The device the engine is profiled on exists here: torch's own error would read as a bug."""
    import torch

    if device.split(":")[0] not in ("cpu", "cuda"):
        raise SpecError("--device", "", f"{device!r} is not one of ['cpu', 'cuda'] (or cuda:N)")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise SpecError("--device", "", f"{device}, but torch finds no CUDA device on this machine; use --device cpu")


# each fold holds its shapes out and fits on the others: one fold would fit on nothing (and zero divides
# nothing), so cross-validation needs two; at most one per shape, or a fold holds nothing out
MIN_FOLDS = 2


def fit_options(args) -> None:
    """`calibrate fit`'s arguments, checked before the CSV is read."""
    existing_file(args.raw, args.raw, what="a profile CSV (servesim calibrate profile --out)")
    option(number, args.folds, "--folds", low=MIN_FOLDS, whole=True)
    option(number, args.seed, "--seed", low=0, whole=True)
    output_file(args.out, "--out")
    if args.plot is not None:
        output_file(args.plot, "--plot")


def read_raw(path: str):
    """A profile CSV as a DataFrame; an empty or unparsable file is a SpecError naming it."""
    import pandas as pd

    try:
        return pd.read_csv(path)
    except (UnicodeDecodeError, pd.errors.ParserError, pd.errors.EmptyDataError) as err:
        reason = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise SpecError(path, "", f"not a profile CSV: {reason}") from None


def check_folds(folds: int, raw, source: str) -> None:
    """At most one fold per profiled shape: a fold with no shape to hold out measures nothing."""
    from calibrate.fitting.fit import NOT_SHAPES

    shapes = int((~raw["kind"].isin(NOT_SHAPES)).sum()) if "kind" in raw.columns else len(raw)
    if folds > shapes:
        raise SpecError("--folds", "", f"{folds} folds for the {shapes} profiled shapes of {source}; "
                        f"give {MIN_FOLDS} to {max(shapes, MIN_FOLDS)}")


def fit_report(profile) -> str:
    lines = [f"profile: {profile.model} on {profile.device_name} ({profile.device}, {profile.dtype}), "
             f"block size {profile.block_size}, tp {profile.tensor_parallel}",
             block_sizes_line(profile),
             f"made {profile.created} by: {profile.command}",
             f"shapes: {profile.grid}"]
    lines += device_report(profile)
    if profile.torch_threads is not None:
        lines.append(f"measured with {profile.torch_threads} torch thread(s)")
    lines += host_report(profile)
    lines.append(swap_line(profile))
    ref = profile.speed_reference
    if ref:
        probes = ", ".join(f"{k.removesuffix('_s')} {v * 1e3:.2f} ms" for k, v in ref.items() if k.endswith("_s"))
        lines.append(f"speed reference ({ref.get('probe', 'probe')}; median of {ref.get('samples')}): {probes}")
    else:
        lines.append("speed reference: none (profiled before the speed probe; `servesim validate` cannot "
                     "correct this machine's drift against it)")
    return "\n".join(lines)


def device_report(profile) -> list[str]:
    """The device part: where it was measured, its held-out error, its token-cost table and coefficients, and
    the serving factor it is charged at (docs/cost-model-split.md)."""
    from calibrate.work.features import TERMS

    if profile.linear:
        source = "the imported per-operation timings"
    elif profile.device_part:
        source = profile.device_part["measured_from"]
    else:
        source = "time_s: the forward's wall time (fitted before device and host time were measured apart)"
    method = profile.heldout_method or f"{profile.heldout_rows} shapes held out"
    lines = [f"device part: held-out error: mean {profile.heldout_mape:.1%}, p95 {profile.heldout_p95_ape:.1%} "
             f"({method})", f"  from {source}",
             "  token-cost table (tokens in the iteration: seconds; linear between, the last slope past the end):"]
    pairs = [f"{k}: {c * 1e3:.2f} ms" for k, c in zip(profile.token_knots, profile.token_costs_s)]
    lines += ["    " + ", ".join(pairs[i:i + 6]) for i in range(0, len(pairs), 6)]
    if profile.linear:
        lines += linear_report(profile)
    lines.append("  coefficients:")
    for term, meaning in TERMS.items():
        lines.append(f"    {term:<24} {profile.coefficients[term]:.4g}   ({meaning})")
    if profile.serving:
        v = profile.serving
        lines.append(f"  serving factor {v['factor']:.3f}: {v['iterations']} iterations of a replay took "
                     f"{v['served_s']:.3f} s served and {v['alone_s']:.3f} s re-timed alone (the device part is "
                     f"charged x{v['factor']:.3f})")
    else:
        lines.append("  serving factor: not measured (the device part is charged as the shapes were timed alone)")
    return lines


def host_report(profile) -> list[str]:
    """The host part: where it was measured, its held-out error (relative, where the profile has it, and in
    seconds) and its terms; or that none was measured, and so none is charged."""
    from calibrate.parts.host import HOST_TERMS

    h = profile.host
    if profile.host_model is not None:
        from calibrate.parts.host_model import load_host_model

        named = load_host_model(profile.host_model)
        return [f"host part: the host model {named.name}, the profile's default ({named.what}; "
                f"servesim calibrate show {named.name}); a config's cost_model.host replaces it"]
    if not h:
        why = ("the raw CSV has neither host_s nor a host replay" if profile.device_part
               else "fitted before host work was measured")
        return [f"host part (host work around the forward): not measured ({why}); the simulator charges "
                f"the device part alone"]
    source = h.get("measured_from") or h.get("source") or f"{h.get('rows', '?')} replayed iterations (time_s)"
    seconds = f"mean |error| {h['heldout_mean_abs_error_s'] * 1e3:.3f} ms"
    if "heldout_p95_abs_error_s" in h:
        seconds += f", p95 {h['heldout_p95_abs_error_s'] * 1e3:.3f} ms"
    if "heldout_mape" in h:
        error = f"mean {h['heldout_mape']:.1%}, p95 {h['heldout_p95_ape']:.1%} ({seconds}"
    else:
        error = f"{seconds} (relative error not recorded: fitted before format /5"
    mean = f"; mean host time {h['mean_s'] * 1e3:.3f} ms)" if "mean_s" in h else ")"
    lines = [f"host part (host work around the forward): held-out error: {error}{mean}", f"  from {source}"]
    if h.get("heldout_mape_by_source"):
        lines.append("  held-out error by source: " + ", ".join(
            f"{k} {v:.1%}" for k, v in h["heldout_mape_by_source"].items()))
    lines += [f"    {term:<24} {h[term]:.4g}   ({meaning})" for term, meaning in HOST_TERMS.items()]
    lines.append("  charged on top of the device part (unless a validation's clock is the forward alone)")
    return lines


def linear_report(profile) -> list[str]:
    """An imported profile's linear part, all-reduce table and provenance (calibrate/judging/op_import.py)."""
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
    if profile.attention is not None:
        from calibrate.parts.attention_fit import AttentionFit, report_lines

        lines += report_lines(AttentionFit.from_dict(profile.attention))
        lines.append("use it as cost_model: {kind: transfer, path: ...}: attention as measured, shares of the "
                     "config's GPU's peaks")
    else:
        lines.append("attention is not in these measurements: use it as cost_model: {kind: transfer, path: ...}")
    return lines


def block_sizes_line(profile) -> str:
    sizes = profile.block_sizes or [profile.block_size]
    if len(sizes) > 1:
        return f"decodes timed at block sizes {', '.join(map(str, sizes))}: decode_block_s fitted"
    return (f"decodes timed at block size {sizes[0]} only: decode_block_s not measured (0; profile with "
            f"--block-sizes to fit it)")


def swap_line(profile) -> str:
    if profile.swap_s_per_copy is None or profile.swap_s_per_byte is None:
        return "swap: not measured (the roofline's defaults over the config's PCIe)"
    per_byte = profile.swap_s_per_byte
    rate = f"{1 / per_byte / 1e9:.1f} GB/s" if per_byte > 0 else "no cost per byte"
    return (f"swap: {profile.swap_s_per_copy * 1e6:.2f} us per copy (a block's K or V of one layer) "
            f"+ bytes at {rate}")


def _cmd_show(args) -> int:
    from calibrate.fitting.profile_file import load_profile
    from calibrate.host_cli import show_host_model

    if show_host_model(args.profile):
        return 0
    existing_file(args.profile, args.profile, what="a profile YAML, or a host model's YAML or shipped name")

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
    from calibrate.hardware.hardware import available_hardware
    from calibrate.profiling.grid import GRIDS

    cal = sub.add_parser("calibrate", help="profile the engine, fit a cost model, import per-operation GPU timings, "
                                           "fit a host model, show a profile or a host model")
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
                           "fits the cost per KV block read and per swap copy")
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
    imp = cmds.add_parser("import", help="per-operation GPU timings (Vidur's profiling tables, or LLMServingSim's "
                                         "profile bundles) into a profile of that GPU, with held-out error")
    imp.add_argument("tables", nargs="+", help="per-operation tables, one per model (Vidur's mlp.csv), or "
                                               "LLMServingSim bundle folders (profiler/perf/HW/ORG/MODEL/VARIANT)")
    imp.add_argument("--format", default="auto", choices=("auto", "vidur", "llmservingsim"),
                     help="what the paths are (auto: bundle folders, each with a meta.yaml, else Vidur's tables)")
    imp.add_argument("--all-reduce", help="all-reduce times by message size (Vidur's network/*.all_reduce.csv)")
    imp.add_argument("--model", required=True,
                     help="the servesim model whose measured linear part becomes the profile's token-cost table")
    imp.add_argument("--measured-on", choices=available_hardware(),
                     help="the shipped hardware spec of the GPU the tables were measured on (default: a100-80gb for "
                          "Vidur's tables, the sheet whose device_names has a bundle's meta.yaml gpu)")
    imp.add_argument("--also", nargs="+", default=[], metavar="TABLE",
                     help="a second GPU's per-operation tables: the linear part is fitted on both GPUs' tables, "
                          "each GPU held out from a fit on the other, and the default on other GPUs set by regime")
    imp.add_argument("--also-measured-on", default="h100-sxm", choices=available_hardware(),
                     help="the shipped hardware spec of the GPU the --also tables were measured on")
    imp.add_argument("--host", help="a profile that measured the engine's host work, charged in series")
    imp.add_argument("--attention", help="measured attention kernels (Vidur's attention.csv), fitted into the "
                                         "profile's attention part (calibrate/parts/attention_fit.py)")
    imp.add_argument("--max-tokens", type=int, default=4096, help="fit rows up to this many tokens")
    imp.add_argument("--source", default="", help="where the tables came from, kept in the profile")
    imp.add_argument("--licence", default="", help="the tables' licence, kept in the profile")
    imp.add_argument("--out", required=True)
    imp.set_defaults(func=_cmd_import)
    from calibrate.host_cli import register as register_host

    register_host(cmds)
    show = cmds.add_parser("show", help="print a profile's fit report, or a host model's terms and held-out errors")
    show.add_argument("profile", help="a profile YAML, or a host model (a shipped name or a YAML)")
    show.set_defaults(func=_cmd_show)
