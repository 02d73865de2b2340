"""`reproduce`'s arguments, checked on one path for the command line and the Python API.

Each is checked before any figure loads or any folder is made, with a SpecError naming the argument
as the caller wrote it (`--out` on the command line, `out_dir` in Python).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.errors import SpecError
from engine.specs.arguments import API, Spelling, path_argument, per_core, strings, switch
from engine.specs.arguments import jobs as jobs_argument
from sim.experiment.output import check_out_dir
from sim.reproduce import scale as scales
from sim.reproduce.figures import select
from sim.reproduce.scale import Scale

# `servesim reproduce`'s spelling of servesim.reproduce's arguments
REPRODUCE_FLAGS = Spelling(figures="reproduce", out_dir="--out", quick="--quick", jobs="--jobs")


@dataclass(frozen=True)
class ReproduceArguments:
    figures: list[str]
    out_dir: Path
    scale: Scale
    jobs: int  # processes: 0 (one per core) already resolved


def reproduce_arguments(figures: Any, out_dir: Any, quick: Any, jobs: Any,
                        names: Spelling = API) -> ReproduceArguments:
    """`figures`: names such as fig12 (a lone str is one name), or all; `jobs` 0 is one process per core."""
    chosen = strings(figures, names["figures"], "['fig12', 'fig19'] or ['all']")
    select(chosen, names["figures"])  # an unknown name stops here, before anything loads
    scale = scales.QUICK if switch(quick, names["quick"]) else scales.PAPER
    width = per_core(jobs_argument(jobs, names["jobs"]))
    folder = path_argument(out_dir, names["out_dir"], "a folder's path")
    if folder.exists() and not folder.is_dir():  # found now, not after the first figure's runs
        raise SpecError(names["out_dir"], "", f"{str(out_dir)!r} is a file; give the folder to write the figures in")
    return ReproduceArguments(chosen, check_out_dir(folder, names["out_dir"]), scale, width)
