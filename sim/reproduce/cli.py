"""`servesim reproduce [FIGURE ...|all] [--quick] [--jobs N] [--out DIR]`."""
from __future__ import annotations

from pathlib import Path


def _cmd_reproduce(args) -> int:
    from sim.reproduce.checked import REPRODUCE_FLAGS, reproduce_arguments
    from sim.reproduce.runner import reproduce
    from sim.reproduce.table import tally

    checked = reproduce_arguments(args.figures, args.out, args.quick, args.jobs, REPRODUCE_FLAGS)
    table = reproduce(checked.figures, checked.out_dir, checked.scale, jobs=checked.jobs)
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
