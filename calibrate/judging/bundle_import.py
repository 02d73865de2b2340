"""`servesim calibrate import --format llmservingsim`: one GPU's LLMServingSim bundles into a servesim profile of
that GPU with the A100 profile's parts (calibrate/profiles/a100-80gb.yaml), fitted by the same machinery.

  linear     every bundle's and tp degree's per-token and per-sequence modules as servesim's operations
             (calibrate/tables/bundle_ops.py), fitted as Vidur's tables are (calibrate/fitting/op_fit.py), but the
             matmuls whose weights fit in the sheet's L2 get a bandwidth share apart (calibrate/judging/
             bundle_linear.py): the one-layer profile may have read them from the L2, a real model never does; held
             out as `calibrate import` holds them out: each model, each tp degree (where there are two), and each
             octave of token counts (where neither can be: one model at one degree), today's roofline beside each,
             on every row and on the rows a real model reads from HBM (linear.heldout.from_hbm)
  attention  the pure decode and prefill rows of every table together, and the mixed rows' term
             (calibrate/judging/bundle_attention_fit.py)
  experts    a mixture's measured block judged, not fitted (calibrate/judging/moe_judge.py): linear.heldout.moe
  host       no measurement: the default host model is vLLM V1's (the bundles' engine), a config's cost_model.host
             replaces it; no all-reduce was measured (tp emulated on one GPU), so tp > 1 takes the ring formula
"""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from calibrate.fitting.op_fit import today_roofline
from calibrate.fitting.profile_file import Profile
from calibrate.hardware.hardware import HardwareSpec, hardware_for_device, load_hardware
from calibrate.judging.bundle_attention_fit import bundle_attention_fit
from calibrate.judging.bundle_linear import bundle_fit, bundle_heldout, from_hbm, l2_rows
from calibrate.judging.moe_judge import moe_errors
from calibrate.judging.op_import import Errors, in_sample, token_table
from calibrate.parts.attention_fit import AttentionFit
from calibrate.parts.linear_model import LinearFit
from calibrate.tables.bundle_attention import bundle_attention
from calibrate.tables.bundle_models import bundle_label, bundle_model
from calibrate.tables.bundle_ops import bundle_op_table
from calibrate.tables.llmservingsim_bundle import META, Bundle, read_bundle
from calibrate.work.features import TERMS
from engine.core.spec import ModelSpec
from engine.errors import SpecError

HOST_MODEL = "vllm-0.19"  # the bundles time vLLM 0.19.0 (docs/host-models.md): its engine model
PERF = "profiler/perf/"  # where a bundle lives in LLMServingSim's tree: provenance names it from there


@dataclass
class BundleImport:
    profile: Profile
    fit: LinearFit
    attention: AttentionFit
    roofline: Errors  # today's roofline: nothing fitted, so every row is held out
    heldout: dict[str, Errors] = field(default_factory=dict)  # by_model, by_tp, by_octave: where they apply
    moe: dict = field(default_factory=dict)  # label -> the mixture block's errors (fit, roofline)


def read_gpu_bundles(paths, measured_on: str | None) -> tuple[list[Bundle], list[ModelSpec], HardwareSpec]:
    """The bundles, their models and the GPU they were all measured on (`measured_on`, else their meta's `gpu`)."""
    bundles = [read_bundle(p) for p in paths]
    first = bundles[0]
    for bundle in bundles[1:]:
        if bundle.gpu != first.gpu:
            raise SpecError(str(bundle.path / META), "gpu", f"{bundle.gpu!r}, where {first.path} was measured on "
                            f"{first.gpu!r}: one profile is one GPU's")
    name = measured_on or hardware_for_device(first.gpu)
    if name is None:
        raise SpecError(str(first.path / META), "gpu", f"{first.gpu!r} is no shipped hardware sheet's device "
                        "(calibrate/hardware_specs/: device_names); add its sheet or give --measured-on")
    hw = load_hardware(name)
    if hw.device_names and first.gpu not in hw.device_names:
        raise SpecError(str(first.path / META), "gpu", f"{first.gpu!r} is not {hw.name}'s device (its device_names: "
                        f"{list(hw.device_names)}): a profile's shares are of the sheet of the GPU it measured")
    specs = [bundle_model(b) for b in bundles]
    seen: dict[str, Path] = {}
    for bundle in bundles:
        if bundle.model in seen:
            raise SpecError(str(bundle.path / META), "model", f"{bundle.model} again ({seen[bundle.model]}): one "
                            "bundle per model")
        seen[bundle.model] = bundle.path
    return bundles, specs, hw


def import_bundles(paths, model: str, measured_on: str | None, command: str, provenance: dict | None = None,
                   max_tokens: int = 4096) -> BundleImport:
    bundles, specs, hw = read_gpu_bundles(list(paths), measured_on)
    tables = [bundle_op_table(b, s, max_tokens) for b, s in zip(bundles, specs)]
    ops = pd.concat([t.ops for t in tables], ignore_index=True)
    fit = bundle_fit(ops, hw)
    judged = linear_heldout(ops, hw)
    roofline = in_sample(today_roofline(), ops, hw)
    moe = {bundle_label(b): moe_errors(fit, s, hw, b.tps[1].moe) for b, s in zip(bundles, specs)
           if 1 in b.tps and b.tps[1].moe is not None}
    source = "; ".join(f"{k}: {v}" for k, v in (provenance or {}).items() if v)
    attentions = {f"{bundle_label(b)} tp {a.table.shape.tp}": a for b, s in zip(bundles, specs)
                  for a in bundle_attention(b, s)}
    attention = bundle_attention_fit(attentions, hw, source)
    knots, costs, reference = token_table(tables, model)
    headline = judged.get("by_model") or judged["by_octave"]
    linear = {**fit.to_dict(), "max_tokens": max_tokens, "models": sorted(t.label for t in tables),
              "heldout": {**{way: e.summary() for way, e in judged.items()}, "roofline": roofline.summary(),
                          **_from_hbm(judged, roofline, hw), **({"moe": moe} if moe else {}), "gpu": []},
              **({"l2": l2_rows(ops, hw)} if hw.l2_cache_bytes is not None else {})}
    summary = headline.summary()["per_iteration"]
    profile = Profile(
        model=model, device="cuda", device_name=bundles[0].gpu, dtype="bfloat16", tensor_parallel=1,
        block_size=bundles[0].block_size, token_knots=knots, token_costs_s=costs,
        coefficients={term: 0.0 for term in TERMS},  # attention: its own part, below
        heldout_mape=summary["mape"], heldout_p95_ape=summary["p95_ape"], train_rows=int(len(ops)),
        heldout_rows=int(len(ops)), created=dt.date.today().isoformat(), command=command,
        heldout_method=_method(judged, reference), grid={f"{t.label} tp {tp}": int((t.ops["tp"] == tp).sum())
                                                         for t in tables for tp in sorted(t.ops["tp"].unique())},
        linear=linear, provenance={**(provenance or {}), "bundles": [_bundle_path(b.path) for b in bundles],
                                   **_versions(bundles)},
        attention=attention.to_dict(), host_model=HOST_MODEL)
    return BundleImport(profile, fit, attention, roofline, judged, moe)


def linear_heldout(ops: pd.DataFrame, hw: HardwareSpec, fit_on=bundle_fit) -> dict[str, Errors]:
    """Each model and each tp degree held out where there are two, and each octave of token counts always
    (calibrate/judging/bundle_linear.py: `fit_on` with the L2 rule, or today's fit without it)."""
    judged = {}
    if ops["model"].nunique() > 1:
        judged["by_model"] = bundle_heldout(ops, hw, "model", fit_on)
    if ops["tp"].nunique() > 1:
        judged["by_tp"] = bundle_heldout(ops, hw, "tp", fit_on)
    octaves = ops.assign(octave=np.floor(np.log2(ops["tokens"].to_numpy(float))).astype(int))
    judged["by_octave"] = bundle_heldout(octaves, hw, "octave", fit_on)
    return judged


def _from_hbm(judged: dict[str, Errors], roofline: Errors, hw: HardwareSpec) -> dict:
    """The judges on the rows a real model reads from HBM, where the sheet's L2 set any row apart."""
    hbm = {way: from_hbm(e, hw) for way, e in {**judged, "roofline": roofline}.items()}
    return {"from_hbm": {way: e for way, e in hbm.items() if e is not None}} if any(hbm.values()) else {}


def _method(judged: dict[str, Errors], reference: str) -> str:
    ways = {"by_model": "each model", "by_tp": "each tp degree", "by_octave": "each octave of token counts"}
    headline = "by_model" if "by_model" in judged else "by_octave"
    others = [ways[w] for w in judged if w != headline]
    also = f"; also {', '.join(others)} in linear.heldout" if others else ""
    return (f"{ways[headline]} held out, per iteration (a layer's non-attention operations){also}; the token-cost "
            f"table is {reference}'s measured linear part at tp 1")


def _bundle_path(path: Path) -> str:
    """The bundle's folder as LLMServingSim's tree names it (from profiler/perf/), else as given."""
    text = path.as_posix()
    return text[text.index(PERF):] if PERF in text else text


def _versions(bundles: list[Bundle]) -> dict:
    """Each provenance field the bundles agree on, else each bundle's."""
    out = {}
    for key in ("vllm_version", "cuda_version", "measurement_iterations"):
        values = sorted({b.provenance.get(key, "") for b in bundles})
        out[key] = values[0] if len(values) == 1 else ", ".join(values)
    return out
