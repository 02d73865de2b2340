"""The real engine's options as a config file gives them (`engine:` in a validation file): parsed here,
without torch, so that a bad value stops before any model is built.

    engine:
      cuda_graphs: null      # true | false | null: decode through CUDA graphs (null: on where the engine runs on CUDA)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engine.errors import SpecError
from engine.specs.checks import known_keys

ENGINE_OPTION_HELP = {
    "cuda_graphs": "true | false | null: decode iterations replay a CUDA graph captured per batch-size bucket "
                   "(null: on where the engine runs on CUDA with the Triton kernels; ignored, and said so, on a CPU)",
}


@dataclass(frozen=True)
class EngineOptions:
    cuda_graphs: bool | None = None  # None: the device decides (on for CUDA)


def engine_options_from_dict(raw: Any, source: str, prefix: str = "engine") -> EngineOptions:
    """An `engine:` mapping; every error names the file and the key."""
    if raw is None:
        return EngineOptions()
    if not isinstance(raw, dict):
        raise SpecError(source, prefix, f"must be a mapping; valid keys are {sorted(ENGINE_OPTION_HELP)}")
    known_keys(raw, sorted(ENGINE_OPTION_HELP), source, prefix)
    graphs = raw.get("cuda_graphs")
    if graphs is not None and not isinstance(graphs, bool):
        raise SpecError(source, f"{prefix}.cuda_graphs", f"must be true, false or null, got {graphs!r}")
    return EngineOptions(cuda_graphs=graphs)


def parse_cuda_graphs(text: str) -> bool | None:
    """A command line's --cuda-graphs on | off | auto."""
    choices = {"on": True, "off": False, "auto": None}
    if text not in choices:
        raise ValueError(f"--cuda-graphs must be one of {sorted(choices)}, got {text!r}")
    return choices[text]
