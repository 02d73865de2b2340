"""The variants research/paper/paper_ablation.py compares: each one change from a paper config's clock or workload.

A variant is a set of config keys and their new values (`sets`, key paths as `--set` writes them, plus
`systems[i].key` for one system of the list), applied to the paper config as shipped. Two need a file that does
not ship: a host model whose one term is 0 s (host off: the same device clock, no host time) and the whole A100
profile without its measured attention (attention at the roofline's defaults); `write_variant_files` writes both
into a folder the caller owns (a temporary one).
"""
from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

from calibrate.fitting.profile_file import dump_profile, load_profile
from calibrate.parts.host_model import HostModel, save_host_model
from engine.atomic import write_text_atomic
from sim.reproduce.figures import paper_config
from sim.workload.standin import SHAREGPT_FIG11_STANDIN

ROOT = Path(__file__).resolve().parents[2]
WHOLE_A100 = ROOT / "calibrate" / "profiles" / "a100-80gb.yaml"
# the old default's profile, named as the paper configs named it (relative to configs/paper/)
OLD_PROFILE = "../../calibrate/profiles/a100-80gb-linear.yaml"
REMOVED = object()  # a `sets` value: the key is dropped from the config
INDEXED = re.compile(r"^(\w+)\[(\d+)\]$")  # systems[4]


@dataclass(frozen=True)
class Variant:
    name: str  # what --variants names it
    what: str  # the change, in words
    sets: dict[str, object] = field(default_factory=dict)  # key path -> value (REMOVED: dropped)
    skip: str = ""  # why it does not apply to this figure: then nothing runs and each cell says so


@dataclass(frozen=True)
class VariantFiles:
    no_host: Path  # a host model with one term of 0 s
    no_attention: Path  # a100-80gb.yaml without its `attention` part


def write_variant_files(folder: Path) -> VariantFiles:
    folder.mkdir(parents=True, exist_ok=True)
    no_host = HostModel("no-host", "no host time: every iteration is the device clock alone",
                        "none: one term of 0 s, written by research/paper/paper_ablation.py", "none",
                        {"none": {"per_iteration_s": 0.0}})
    profile = load_profile(WHOLE_A100)
    dropped = "then its attention part dropped (research/paper/paper_ablation.py)"
    no_attention = replace(profile, attention=None, command=f"{profile.command}, {dropped}")
    return VariantFiles(save_host_model(no_host, folder / "no-host.yaml"),
                        write_text_atomic(folder / "a100-80gb-no-attention.yaml", dump_profile(no_attention)))


def variants(raw: dict, files: VariantFiles) -> list[Variant]:
    """Every variant of one paper config (its YAML as read): the new default, each one change from it, the old
    default."""
    vllm = f"systems[{raw['systems'].index('vllm')}]"
    standin = raw["workload"]["dataset"] == SHAREGPT_FIG11_STANDIN
    real = {"workload.dataset": "sharegpt"}
    no_real = "" if standin else (f"no real lengths behind {raw['workload']['dataset']} (a stand-in drawn to Fig. "
                                  "11's means, sim/workload/standin.py); Fig. 12a only")
    return [
        Variant("default", "new default: whole A100 clock, host vllm-a100-2024-01"
                + (", ShareGPT lengths scaled to Fig. 11" if standin else "")),
        Variant("host-off", "host off: the same device clock, a host model of one 0-s term (temp file)",
                {"cost_model.host": str(files.no_host)}),
        Variant("host-2024-05", "host vllm-a100-2024-05 (the newer engine)", {"cost_model.host": "vllm-a100-2024-05"}),
        Variant("host-v1-2026", "host vllm-v1-2026 (the lean engine)", {"cost_model.host": "vllm-v1-2026"}),
        Variant("sharegpt-real", "real ShareGPT lengths (`sharegpt`), not the Fig. 11 stand-in", real, no_real),
        Variant("attention-roofline", "attention at the roofline's defaults (a100-80gb.yaml less `attention`, temp "
                "file)", {"cost_model.path": str(files.no_attention)}),
        Variant("block-32", "vLLM's block size 32, not 16", {f"{vllm}.block_size": 32}),
        Variant("paged-as-measured", "no paper-era paged-kernel overhead: attention as the measured kernel for every "
                "system (block_read_overhead_tokens dropped)", {"cost_model.block_read_overhead_tokens": REMOVED}),
        Variant("old-default", "old default: a100-80gb-linear.yaml and its CPU engine's host time"
                + (", real ShareGPT" if standin else ""),
                {"cost_model.path": OLD_PROFILE, "cost_model.host": REMOVED,
                 "cost_model.block_read_overhead_tokens": REMOVED, **(real if standin else {})}),
    ]


def paper_raw(config: str) -> dict:
    """A paper config's YAML as shipped."""
    from sim.experiment.config import read_config

    raw = read_config(paper_config(config))
    assert isinstance(raw, dict)  # a paper config is a mapping
    return raw


def apply_sets(raw: dict, sets: dict[str, object]) -> dict:
    """A copy of the config with each key path set (or dropped)."""
    out = copy.deepcopy(raw)
    for path, value in sets.items():
        *parents, last = path.split(".")
        node = out
        for key in parents:
            node = _child(node, key)
        if value is REMOVED:
            node.pop(last, None)
        else:
            node[last] = value
    return out


def _child(node: dict, key: str) -> dict:
    indexed = INDEXED.match(key)
    if indexed is None:
        return node.setdefault(key, {})
    items = node[indexed[1]]
    i = int(indexed[2])
    if isinstance(items[i], str):  # a preset's name: the same system as a mapping, to set one of its keys
        items[i] = {"preset": items[i]}
    return items[i]


def flatten(raw: dict, prefix: str = "") -> dict[str, object]:
    """Each leaf of the config by its key path; a system named by its preset reads as {preset: name}."""
    out: dict[str, object] = {}
    for key, value in raw.items():
        path = f"{prefix}{key}"
        if key == "systems" and isinstance(value, list):
            for i, system in enumerate(value):
                out.update(flatten(system if isinstance(system, dict) else {"preset": system}, f"{path}[{i}]."))
        elif isinstance(value, dict):
            out.update(flatten(value, f"{path}."))
        else:
            out[path] = value
    return out


def changed_keys(before: dict, after: dict) -> set[str]:
    """The key paths whose value differs between two configs (one missing counts)."""
    a, b = flatten(before), flatten(after)
    return {key for key in a.keys() | b.keys() if a.get(key, REMOVED) != b.get(key, REMOVED)}
