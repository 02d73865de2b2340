"""Each measured GPU held out in turn: every carry servesim offers, fitted on the other GPUs' rows alone, and the
spec-sheet roofline, per regime of the held-out GPU's own ridge; the choice that follows for a GPU nobody measured,
and whether the shipped choice (calibrate/profiles/carry/held-out-gpus.yaml) is the fresh one.

    python research/cost_models/hold_one_gpu_out.py [--tables TABLES] [--perf PERF] [--write]

TABLES: Vidur's tables as /work/shared/reference/gpu-measurements names them (a100/, h100/; default
../shared/reference/gpu-measurements); PERF: LLMServingSim's profiler/perf folder at commit 5daddb2 (default
$SERVESIM_LLMSERVINGSIM_PERF, else ../research/raw/LLMServingSim/HEAD_5daddb2/profiler/perf). The measured GPUs: the
A100 and the H100 SXM (Vidur's tables), the RTX PRO 6000 Blackwell Server Edition and the RTX 4090 (the bundles the
shipped profiles name). --write writes the shipped file from this run. Target: in no regime is a GPU nobody
measured priced worse than by the roofline on any held-out GPU, mean or worst. Deterministic (least squares and
grids). Prints numbers; fails on none (it says where the shipped file differs).
"""
from __future__ import annotations

import argparse
import datetime as dt
import os
from pathlib import Path

from calibrate.cost_models.carry_file import CARRY_FILE, carry_dict, dump_carry, load_carry
from calibrate.fitting.op_fit import today_roofline
from calibrate.fitting.profile_file import load_profile
from calibrate.judging.bundle_import import PERF
from calibrate.judging.carry_rule import ROOFLINE, HeldOutScore, beats, choose
from calibrate.judging.transfer_two_gpus import iterations
from calibrate.parts.transfer import FINE_REGIMES, LATENCY_BAND, RIDGE_BAND, ridge_tokens
from research.judging.gpu_holdout import EVERY_OTHER, carries, hold_each_out, regime_scores, shipped_fit
from research.judging.gpu_rows import bundle_gpu, table_gpu

ROOT = Path(__file__).resolve().parents[2]
PROFILES = ROOT / "calibrate" / "profiles"
DEFAULT_TABLES = ROOT.parent / "shared" / "reference" / "gpu-measurements"
DEFAULT_PERF = ROOT.parent / "research" / "raw" / "LLMServingSim" / "HEAD_5daddb2" / "profiler" / "perf"
TABLE_GPUS = (("a100", "a100-80gb", "Vidur's A100 per-operation tables"),
              ("h100", "h100-sxm", "Vidur's H100 SXM per-operation tables"))
BUNDLE_GPUS = ("rtx-pro-6000-server", "rtx-4090")  # the shipped profiles whose bundles measured them
JOINTS = (("a100-80gb", "h100-sxm"),)  # calibrate/profiles/a100-h100-linear.yaml, the carry a100-80gb.yaml ships
COMMAND = "python research/cost_models/hold_one_gpu_out.py --write"
RULE = ("Per regime of the target's own ridge: a carry is eligible only where, on every measured GPU held out from "
        "it that measured the regime (at least two), its mean |error| per iteration is below the spec-sheet "
        "roofline's and its worst is no higher, on the same rows; of the eligible, the lowest mean over those GPUs "
        "(each alike) prices the regime; none eligible, the roofline (calibrate/judging/carry_rule.py).")
PROVENANCE = {"tables": "microsoft/vidur data/profiling/compute/{a100,h100} at commit "
                        "7d47513363ec447a741ac5e47241580b47724fbf, MIT (calibrate/profiles/LICENSE.vidur)",
              "bundles": "casys-kaist/LLMServingSim profiler/perf at commit 5daddb21a545658d5150b535712d0494584b5278, "
                         "MIT (calibrate/profiles/LICENSE.llmservingsim)"}


def read_gpus(tables: Path, perf: Path):
    """The measured GPUs' rows, and what measured each (the shipped file's `gpus`)."""
    gpus, described = [], {}
    for sub, hardware, what in TABLE_GPUS:
        paths = sorted((tables / sub).glob("*.mlp.csv"))
        if not paths:
            raise SystemExit(f"no {sub}/*.mlp.csv under {tables}: give --tables, the folder of Vidur's tables")
        gpus.append(table_gpu(paths, hardware))
        described[hardware] = f"{what}, {len(paths)} models"
    for name in BUNDLE_GPUS:
        bundles = load_profile(PROFILES / f"{name}.yaml").provenance["bundles"]
        paths = [perf / bundle.removeprefix(PERF) for bundle in bundles]
        if not all(path.is_dir() for path in paths):
            raise SystemExit(f"{name}'s bundles are not under {perf}: give --perf, LLMServingSim's profiler/perf")
        gpus.append(bundle_gpu(paths, name))
        described[name] = f"LLMServingSim's vLLM 0.19.0 bundles of {', '.join(bundles)}"
    return gpus, described


def ridge_lines(gpus) -> None:
    print(f"Regimes by each held-out GPU's ridge: fixed latency below ridge/{LATENCY_BAND:g}, memory-bound below "
          f"ridge/{RIDGE_BAND:g}, compute-bound above ridge x {RIDGE_BAND:g}; "
          + ", ".join(f"{gpu.hw.name} {ridge_tokens(gpu.hw):.0f} tokens" for gpu in gpus))


def held_out_table(scores: list[HeldOutScore]) -> None:
    """Per held-out GPU and regime, every carry beside the roofline on the same rows, and whether it beat it (a lower
    mean, a worst no higher)."""
    roof = {(s.held_out, s.regime): s for s in scores if s.carry == ROOFLINE}
    print("| held out | regime | rows | carry | mean | p95 | worst | roofline mean | p95 | worst | beats it |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for s in scores:
        if s.carry == ROOFLINE:
            continue
        r = roof[(s.held_out, s.regime)]
        print(f"| {s.held_out} | {s.regime} | {s.rows} | {s.carry} | {s.mean:.1%} | {s.p95:.1%} | {s.worst:.1%} | "
              f"{r.mean:.1%} | {r.p95:.1%} | {r.worst:.1%} | {'yes' if beats(s, r) else 'no'} |")


def carry_table(scores: list[HeldOutScore], names: list[str]) -> None:
    """Per carry and regime: on how many of the GPUs held out from it it beat the roofline, and where it lost."""
    roof = {(s.held_out, s.regime): s for s in scores if s.carry == ROOFLINE}
    print("| carry | regime | held out from it | beat the roofline on | lost on |")
    print("|---|---|---|---|---|")
    for name in names:
        for regime in FINE_REGIMES:
            judged = [s for s in scores if s.carry == name and s.regime == regime]
            won = [s.held_out for s in judged if beats(s, roof[(s.held_out, s.regime)])]
            lost = [s.held_out for s in judged if s.held_out not in won]
            print(f"| {name} | {regime} | {len(judged)} | {len(won)} | {', '.join(lost) or '-'} |")


def worse_than_roofline(scores: list[HeldOutScore], pick) -> list[str]:
    """Each (held-out GPU, regime) where the carry `pick(regime)` names prices worse than the roofline."""
    roof = {(s.held_out, s.regime): s for s in scores if s.carry == ROOFLINE}
    out = []
    for s in scores:
        r = roof[(s.held_out, s.regime)]
        if s.carry == pick(s.regime) != ROOFLINE and not beats(s, r):
            out.append(f"{s.held_out} {s.regime} (mean {s.mean:.1%} against {r.mean:.1%}, worst {s.worst:.1%} "
                       f"against {r.worst:.1%})")
    return out


def target_lines(scores: list[HeldOutScore], verdicts) -> None:
    """The target, for the choice and for the default it replaces (the A100 and H100 fit in every regime)."""
    old = " + ".join(JOINTS[0])
    for label, pick in (("the choice", lambda regime: verdicts[regime].carry),
                        (f"{old} in every regime (the default before)", lambda regime: old)):
        worse = worse_than_roofline(scores, pick)
        print(f"- {label}: " + ("met: no regime worse than the roofline on any held-out GPU" if not worse else
                                f"missed, worse than the roofline on {'; '.join(worse)}"))


def in_sample_lines(gpus, fits, verdicts, offered) -> None:
    """A chosen carry on the GPUs it was fitted on, which judge nothing (in sample): its error beside the roofline's."""
    for regime, v in verdicts.items():
        carry = next((c for c in offered if c.name == v.carry), None)
        for gpu in [g for g in gpus if carry is not None and g.hw.name in carry.gpus]:
            ours = regime_scores(iterations(shipped_fit(carry, fits), gpu), gpu.hw.name, carry.name)
            roof = regime_scores(iterations(today_roofline(), gpu), gpu.hw.name, ROOFLINE)
            for s, r in zip(ours, roof):
                if s.regime == regime:
                    print(f"- {regime}: {carry.name}'s fit on {gpu.hw.name} itself, in sample (not a judgement): "
                          f"mean {s.mean:.1%}, worst {s.worst:.1%}; the roofline {r.mean:.1%}, {r.worst:.1%}")


def compare_shipped(fresh: dict) -> None:
    """Whether the shipped file is this run's (its date aside): the choice, the chosen fits, the table."""
    if not CARRY_FILE.is_file():
        print(f"shipped file: none at {CARRY_FILE} (--write makes it)")
        return
    shipped = load_carry(CARRY_FILE)
    differ = [key for key in ("choice", "fits", "held_out", "gpus", "rule") if shipped[key] != fresh[key]]
    print(f"shipped {CARRY_FILE.relative_to(ROOT)} = fresh: "
          + ("yes" if not differ else f"NO, {', '.join(differ)} differ: rerun with --write"))


def report(gpus, offered, scores, verdicts, fits) -> None:
    ridge_lines(gpus)
    print("\nEach GPU held out, per regime, per iteration (the carries: each GPU's own fit, "
          f"{' + '.join(JOINTS[0])} together, and {EVERY_OTHER} together):")
    held_out_table(scores)
    print("\nEach carry on the GPUs held out from it:")
    carry_table(scores, [carry.name for carry in offered])
    print(f"\nThe choice for a GPU nobody measured. {RULE}")
    for regime, v in verdicts.items():
        print(f"- {regime}: {v.carry} ({v.reason})")
    print("\nTarget: no regime priced worse than by the roofline on any held-out GPU, mean or worst:")
    target_lines(scores, verdicts)
    in_sample_lines(gpus, fits, verdicts, offered)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", default=str(DEFAULT_TABLES), help="the folder of Vidur's tables")
    parser.add_argument("--perf", default=os.environ.get("SERVESIM_LLMSERVINGSIM_PERF", str(DEFAULT_PERF)),
                        help="LLMServingSim's profiler/perf folder")
    parser.add_argument("--write", action="store_true", help=f"write {CARRY_FILE.name} from this run")
    args = parser.parse_args()
    gpus, described = read_gpus(Path(args.tables), Path(args.perf))
    offered = carries([gpu.hw.name for gpu in gpus], JOINTS)
    scores, fits = hold_each_out(gpus, offered)
    verdicts = choose(scores)
    report(gpus, offered, scores, verdicts, fits)
    chosen = {v.carry: shipped_fit(c, fits) for v in verdicts.values() for c in offered if c.name == v.carry}
    fresh = carry_dict(verdicts, chosen, scores, described, RULE, COMMAND, dt.date.today().isoformat(), PROVENANCE)
    compare_shipped(fresh)
    if args.write:
        CARRY_FILE.parent.mkdir(parents=True, exist_ok=True)
        CARRY_FILE.write_text(dump_carry(fresh))
        print(f"wrote {CARRY_FILE.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
