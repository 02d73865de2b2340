"""`validate`'s arguments, checked on one path for the command line and the Python API.

Each is checked before torch loads or anything is written, with a SpecError naming the argument as the
caller wrote it (`--out` on the command line, `out_dir` in Python); the config's device is checked
against this machine's too, for both.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.specs.arguments import API, Spelling, path_argument, strings, switch
from sim.experiment.output import check_out_dir

if TYPE_CHECKING:
    from fidelity.config import ValidationConfig

# `servesim validate`'s spelling of servesim.validate's arguments
VALIDATE_FLAGS = Spelling(overrides="--set", out_dir="--out", exact="--exact")


def validate_arguments(config: Any, out_dir: Any, overrides: Any, exact: Any, names: Spelling = API,
                       command: str = "servesim.validate") -> tuple[ValidationConfig, Path, bool]:
    """The validation config, loaded with its overrides, its output folder (None: the default one) and
    `exact`; needs torch (the config's device is checked against it), which `command` names if missing."""
    path = path_argument(config, names["config"], "a validation config's path")
    extra = strings(overrides, names["overrides"], "['validation.repeats=1']")
    # the command line's --out "" is no folder given, as it always was
    folder = None if out_dir is None or out_dir == "" else path_argument(out_dir, names["out_dir"], "a folder's path")
    exact = switch(exact, names["exact"])
    from engine.runtime import require_torch

    require_torch(command)
    from fidelity.config import load_validation
    from fidelity.validate import default_out_dir

    cfg = load_validation(path, extra)
    check_device(cfg.options.device, str(path))
    # a file in the folder's place is found now, not when the first result is written after the replays
    return cfg, check_out_dir(folder or default_out_dir(cfg), names["out_dir"]), exact


def check_device(device: str, source: str) -> None:
    """The real engine runs where the config says: a GPU that is not there is the config's to change."""
    if device == "cuda":
        import torch

        if not torch.cuda.is_available():
            from engine.errors import SpecError

            raise SpecError(source, "validation.device", "cuda, but torch finds no CUDA device on this machine; "
                            "run it on a GPU machine, or set validation.device: cpu (with a CPU profile)")
