"""`servesim calibrate host` (fit a host model to a measured table) and `calibrate show` of a host model."""
from __future__ import annotations

import shlex
import sys

from engine.specs.checks import existing_file, output_file


def cmd_host(args) -> int:
    from calibrate.fitting.host_model_fit import fit_host_model
    from calibrate.parts.host_model import save_host_model
    from calibrate.tables.host_table import WHAT, read_host_table

    existing_file(args.table, args.table, what=f"a {WHAT}")
    output_file(args.out, "--out")
    table = read_host_table(args.table)
    measured = args.measured or f"the serving engine's host work per iteration measured in {args.table}"
    model = fit_host_model(table, args.name, measured, args.source, args.licence)
    command = "servesim calibrate host " + " ".join(shlex.quote(a) for a in sys.argv[3:]) if len(sys.argv) > 3 \
        else f"servesim calibrate host {args.table} --name {args.name} --out {args.out}"
    save_host_model(model, args.out, command)
    print(host_model_report(model))
    print(f"wrote {args.out}: use it as cost_model: {{..., host: {args.out}}}")
    return 0


def host_model_report(model) -> str:
    """Its name, what it measured, its held-out errors beside their target, its terms and where it is from."""
    lines = [f"host model {model.name}: {model.measured}", f"  source: {model.source}", f"  licence: {model.licence}"]
    lines += heldout_lines(model.heldout)
    lines.append("  terms (seconds; each coefficient times its feature):")
    from calibrate.work.host_features import FEATURES

    for term, coefficients in model.terms.items():
        lines.append(f"    {term}:")
        lines += [f"      {feature:<42} {value:.4g}   ({FEATURES[feature].meaning})"
                  for feature, value in coefficients.items()]
    return "\n".join(lines)


def heldout_lines(heldout: dict) -> list[str]:
    if "leave_one_model_out" not in heldout:
        return [f"  {key}: {value}" for key, value in heldout.items()]
    target = heldout.get("target_mean_abs_error")
    mark = f" (target <= {target:.0%})" if target is not None else ""
    lomo, largest = heldout["leave_one_model_out"], heldout["largest_batches"]
    lines = [f"  fitted on {heldout.get('fitted_on', '?')}",
             "  held-out error of the per-iteration total (mean |error|):",
             f"    leave one model out: {_pct(lomo['mean_abs_error'])}{mark}, p95 {_pct(lomo['p95_abs_error'])} "
             f"over {lomo['rows']} rows"]
    lines += [f"      {m}: {_pct(e)}" for m, e in lomo.get("by_model", {}).items()]
    lines.append(f"    largest batches (batch >= {largest['batch_size_at_least']}, {largest['rows']} rows): "
                 f"{_pct(largest['mean_abs_error'])}{mark}")
    lines.append(f"    in sample: {_pct(heldout['in_sample_mean_abs_error'])}; mean host time "
                 f"{heldout['mean_host_s'] * 1e3:.2f} ms over {heldout['rows']} rows")
    return lines


def _pct(value: float | None) -> str:
    return "n/a (one model only)" if value is None else f"{value:.1%}"


def show_host_model(name_or_path: str) -> bool:
    """Print a host model named or at a path, if that is what it is; False for anything else (a profile)."""
    from pathlib import Path

    from calibrate.parts.host_model import available_host_models, is_host_model_file, load_host_model

    if name_or_path in available_host_models() or (Path(name_or_path).is_file() and
                                                    is_host_model_file(name_or_path)):
        print(host_model_report(load_host_model(name_or_path)))
        return True
    return False


def register(cmds) -> None:
    host = cmds.add_parser("host", help="fit a host model (the serving engine's host work per iteration) to a "
                                        "measured table (Vidur's cpu_overheads.csv), with held-out error")
    host.add_argument("table", help="the measured table (Vidur's cpu_overheads.csv, either vintage)")
    host.add_argument("--name", required=True, help="the host model's name, after what it measured")
    host.add_argument("--measured", default="", help="what engine and machine the table measured, in words")
    host.add_argument("--source", required=True, help="where the table came from (repository, file, commit)")
    host.add_argument("--licence", required=True, help="the table's licence")
    host.add_argument("--out", required=True)
    host.set_defaults(func=cmd_host)
