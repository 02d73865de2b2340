"""`servesim reproduce [FIGURE ...|all] [--quick] [--jobs N] [--out DIR]`."""
from __future__ import annotations

import os
from pathlib import Path

from engine.specs.errors import SpecError


def _cmd_reproduce(args) -> int:
    from sim.reproduce import scale
    from sim.reproduce.figures import select
    from sim.reproduce.runner import reproduce
    from sim.reproduce.table import tally

    select(args.figures)  # an unknown name stops here, before anything loads
    if args.jobs < 0:
        raise SpecError("--jobs", str(args.jobs), "must be at least 1, or 0 for one per core")
    if Path(args.out).exists() and not Path(args.out).is_dir():  # found now, not after the first figure's runs
        raise SpecError("--out", "", f"{args.out!r} is a file; give the folder to write the figures in")
    table = reproduce(args.figures, Path(args.out), scale.QUICK if args.quick else scale.PAPER,
                      jobs=args.jobs or os.cpu_count() or 1)
    print(tally(table))
    return 0


def register(sub) -> None:
    from sim.reproduce.figures import FIGURES

    parser = sub.add_parser("reproduce", help="run the paper's figures and compare the simulation with its claims",
                            description="Run the configs behind the paper's figures, draw them in the paper's layout "
                            "and write paper_vs_sim.md/.csv, one row per claim of the paper. Resumable: a rerun "
                            "simulates only the runs not done yet.")
    parser.add_argument("figures", nargs="*", metavar="FIGURE",
                        help=f"{', '.join(FIGURES)}, or all (the default)")
    parser.add_argument("--quick", action="store_true",
                        help="5-minute traces and at most 4 rates per curve instead of the paper's hour (minutes, "
                        "not hours); every output says so")
    parser.add_argument("--jobs", type=int, default=0, help="runs in parallel (processes); default: one per core")
    parser.add_argument("--out", default=str(Path("results") / "reproduce"),
                        help="output folder (default results/reproduce)")
    parser.set_defaults(func=_cmd_reproduce)
