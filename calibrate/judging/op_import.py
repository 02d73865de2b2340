"""`servesim calibrate import`: per-operation GPU timings (Vidur's profiling tables) into a servesim profile.

The profile times the linear (non-attention) part of an iteration on the measured GPU: its parameters
(calibrate/fitting/op_fit.LinearFit) fitted on every table, the measured all-reduce table, and, as a servesim
token-cost table, the measured linear part of the profile's own model (layers x one layer's operations +
the embedding, at tensor parallelism 1). Its error is reported as `calibrate fit` reports one, on what the
fit never saw: each model predicted by a fit on the others, each tensor-parallel degree by a fit on the
others; today's roofline, which fits nothing, beside it on every row.
"""
from __future__ import annotations

import datetime as dt
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from calibrate.fitting.op_fit import fit_linear, fit_linear_on, today_roofline
from calibrate.fitting.profile_file import Profile, load_profile
from calibrate.hardware.hardware import HardwareSpec, load_hardware
from calibrate.judging.carry_rule import SHIPPED_NOTE
from calibrate.judging.regime_errors import two_gpu_choice
from calibrate.judging.transfer_judge import RegimeError, judge_profile, report_lines
from calibrate.judging.transfer_two_gpus import GpuTables, HoldOut, both_ways, judgement
from calibrate.parts.all_reduce import read_all_reduce
from calibrate.parts.linear_model import LinearFit
from calibrate.parts.transfer import REGIMES, regimes_of
from calibrate.tables.op_table import OpTable, read_op_table
from calibrate.work.features import TERMS, choose_knots
from calibrate.work.layer_ops import ELEMENTWISE, ITERATION_ELEMENTWISE, ITERATION_OPS, MATMULS, LayerShape
from engine.errors import SpecError
from engine.specs.loader import load_model_spec

TOKEN_BANDS = ((1, 64), (65, 512), (513, 4096))  # memory-bound, around the ridge, compute-bound (A100)


@dataclass
class Errors:
    """Relative errors of one way of predicting: per operation and per iteration (a layer's operations)."""
    ops: pd.DataFrame  # op rows with predicted_s and ape
    layers: pd.DataFrame  # (model, tp, tokens) rows with time_s, predicted_s and ape

    def summary(self) -> dict:
        ape = self.layers["ape"]
        by_regime = ({regime: float(ape[self.layers["regime"] == regime].mean()) for regime in REGIMES
                      if (self.layers["regime"] == regime).any()} if "regime" in self.layers else {})
        signed = (self.layers["predicted_s"] - self.layers["time_s"]) / self.layers["time_s"]
        return {"per_iteration": {"mape": float(ape.mean()), "p95_ape": float(np.quantile(ape, 0.95)),
                                  "signed_mean": float(signed.mean())},
                "per_iteration_by_tokens": {f"{lo}-{hi}": float(ape[self.layers["tokens"].between(lo, hi)].mean())
                                            for lo, hi in TOKEN_BANDS if self.layers["tokens"].between(lo, hi).any()},
                **({"per_iteration_by_regime": by_regime} if by_regime else {}),
                "per_op": {op: float(rows["ape"].mean()) for op, rows in self.ops.groupby("op", sort=False)},
                "per_op_all": {"mape": float(self.ops["ape"].mean()),
                               "matmuls_mape": float(self.ops[self.ops["op"].isin(MATMULS)]["ape"].mean())}}


def with_errors(ops: pd.DataFrame, layers: pd.DataFrame, predicted_ops: np.ndarray,
                hw: HardwareSpec | None = None) -> Errors:
    """`hw`: the measured GPU, whose own ridge sets each iteration's regime (calibrate/parts/transfer.py)."""
    ops = ops.assign(predicted_s=predicted_ops, ape=np.abs(predicted_ops - ops["time_s"]) / ops["time_s"])
    layers = layers.assign(ape=np.abs(layers["predicted_s"] - layers["time_s"]) / layers["time_s"])
    if hw is not None:
        layers = layers.assign(regime=regimes_of(layers["tokens"], hw))
    return Errors(ops, layers)


def heldout(ops: pd.DataFrame, hw: HardwareSpec, by: str) -> Errors:
    """Every row predicted by a fit on the other values of `by` (model or tp) alone."""
    predicted, layers = np.zeros(len(ops)), []
    for value in sorted(ops[by].unique()):
        test = (ops[by] == value).to_numpy()
        fit = fit_linear(ops[~test], hw)
        predicted[test] = fit.predict_ops(ops[test], hw)
        layers.append(fit.predict_layers(ops[test], hw))
    return with_errors(ops, pd.concat(layers, ignore_index=True), predicted, hw)


def in_sample(fit: LinearFit, ops: pd.DataFrame, hw: HardwareSpec) -> Errors:
    return with_errors(ops, fit.predict_layers(ops, hw), fit.predict_ops(ops, hw), hw)


@dataclass
class ImportResult:
    profile: Profile
    fit: LinearFit
    by_model: Errors
    by_tp: Errors | None  # None where every table has one tensor-parallel degree
    roofline: Errors  # today's roofline: nothing fitted, so every row is held out
    # on a GPU the fit never saw (calibrate/judging/transfer_judge.py)
    gpu: list[RegimeError] = field(default_factory=list)
    # with a second GPU's tables (--also): the fit on both, each GPU held out from a fit on the other
    joint: LinearFit | None = None
    two_gpus: list[HoldOut] = field(default_factory=list)


def load_tables(paths, max_tokens: int) -> list[OpTable]:
    tables = [read_op_table(p, max_tokens) for p in paths]
    seen: dict[str, str] = {}
    for path, table in zip(paths, tables):
        if table.label in seen:
            raise SpecError(str(path), "", f"measures {table.label}, as {seen[table.label]} does: one table per model")
        seen[table.label] = str(path)
    if len(tables) < 2:
        raise SpecError(str(paths[0]) if paths else "calibrate import", "",
                        "needs tables of at least two models: the error is measured on a model the fit never saw")
    return tables


def token_table(tables: list[OpTable], model_name: str) -> tuple[list[int], list[float], str]:
    """The profile model's measured linear part per iteration at tensor parallelism 1, at the knots
    `calibrate fit` would place: its layers x one layer's operations, plus the embedding lookup."""
    spec = load_model_spec(model_name)
    shape = LayerShape.of(spec)
    match = [t for t in tables if _same_layer(t.shape, shape)]
    if not match:
        raise SpecError(model_name, "model", f"no table measures {model_name}'s layers ({shape}); "
                        f"tables: {[t.label for t in tables]}")
    ops = match[0].ops[match[0].ops["tp"] == 1]
    if ops.empty:
        raise SpecError(match[0].label, "num_tensor_parallel_workers", "no rows at tensor parallelism 1")
    per_layer = ops[~ops["op"].isin(ITERATION_OPS)].groupby("tokens")["time_s"].sum()
    per_iteration = ops[ops["op"].isin(ITERATION_ELEMENTWISE)].groupby("tokens")["time_s"].sum()
    total = per_layer * spec.num_layers + per_iteration.reindex(per_layer.index, fill_value=0.0)
    knots = choose_knots(total.index)
    return knots, [float(total[k]) for k in knots], match[0].label


def _same_layer(measured: LayerShape, spec: LayerShape) -> bool:
    # rotary is not compared: a table says nothing of positions beyond its attn_rope column
    return (measured.hidden, measured.num_heads, measured.num_kv_heads, measured.head_width, measured.ffn,
            measured.gated_mlp) == (spec.hidden, spec.num_heads, spec.num_kv_heads, spec.head_width, spec.ffn,
                                    spec.gated_mlp)


def import_profile(table_paths, all_reduce_path, model: str, measured_on: str, command: str,
                   host_profile: str | None = None, max_tokens: int = 4096, provenance: dict | None = None,
                   also_tables=(), also_measured_on: str = "h100-sxm", layers: dict[str, int] | None = None,
                   attention_path: str | None = None) -> ImportResult:
    """`also_tables`: a second GPU's tables (`also_measured_on`): the profile's linear part is then fitted on
    both GPUs' tables together, and each GPU is held out from a fit on the other
    (calibrate/judging/transfer_two_gpus.py); `layers`: the tables' models' layer counts (default
    calibrate/tables/table_models.LAYERS); `attention_path`: a measured attention table (Vidur's attention.csv),
    fitted into the profile's `attention`."""
    if also_tables:
        return _import_two_gpus(table_paths, all_reduce_path, model, measured_on, command, host_profile,
                                max_tokens, provenance, also_tables, also_measured_on, layers, attention_path)
    hw = load_hardware(measured_on)
    tables = load_tables(list(table_paths), max_tokens)
    ops = pd.concat([t.ops for t in tables], ignore_index=True)
    knots, costs, reference = token_table(tables, model)
    fit = fit_linear(ops, hw)
    by_model = heldout(ops, hw, "model")
    by_tp = heldout(ops, hw, "tp") if ops["tp"].nunique() > 1 else None
    roofline = in_sample(today_roofline(), ops, hw)
    linear = {**fit.to_dict(), "max_tokens": max_tokens, "models": sorted(t.label for t in tables),
              "heldout": {"by_model": by_model.summary(), **({"by_tp": by_tp.summary()} if by_tp else {}),
                          "roofline": roofline.summary()}}
    all_reduce = read_all_reduce(all_reduce_path).to_dict() if all_reduce_path else None
    summary = by_model.summary()["per_iteration"]
    profile = Profile(
        model=model, device="cuda", device_name=hw.device_names[0] if hw.device_names else hw.name, dtype="float16",
        tensor_parallel=1, block_size=16, token_knots=knots, token_costs_s=costs,
        coefficients={term: 0.0 for term in TERMS},  # attention: not in these measurements
        heldout_mape=summary["mape"], heldout_p95_ape=summary["p95_ape"],
        train_rows=int(len(ops)), heldout_rows=int(len(ops)), created=dt.date.today().isoformat(),
        command=command,
        heldout_method=(f"leave one model out over {len(tables)} models, per iteration (a layer's non-attention "
                        f"operations); the token-cost table is {reference}'s measured linear part at tp 1"),
        grid={t.label: int(len(t.ops)) for t in tables},
        host=_host_terms(host_profile), linear=linear, all_reduce=all_reduce,
        provenance={**(provenance or {}), "tables": [Path(p).name for p in table_paths],
                    **({"all_reduce_table": Path(all_reduce_path).name} if all_reduce_path else {}),
                    **({"attention_table": Path(attention_path).name} if attention_path else {})},
        attention=_attention(attention_path, hw, provenance),
    )
    # the shipped held-out GPU (the engine's H200 prefills) judges fits made on A100s
    gpu = judge_profile(profile) if measured_on.startswith("a100") else []
    profile.linear["heldout"]["gpu"] = [asdict(e) for e in gpu]
    return ImportResult(profile, fit, by_model, by_tp, roofline, gpu)


def _import_two_gpus(table_paths, all_reduce_path, model: str, measured_on: str, command: str,
                     host_profile: str | None, max_tokens: int, provenance: dict | None, also_tables,
                     also_measured_on: str, layers: dict[str, int] | None,
                     attention_path: str | None = None) -> ImportResult:
    """The first GPU's import as without --also (its token table, all-reduce, held-out models), then the linear
    part refitted on both GPUs' tables and judged with each GPU held out."""
    if load_hardware(also_measured_on).name == load_hardware(measured_on).name:
        raise SpecError("--also-measured-on", "", f"{also_measured_on} is the GPU the first tables were measured "
                        "on; a second GPU is held out from a fit on the first, so it must be another")
    first = import_profile(table_paths, all_reduce_path, model, measured_on, command, host_profile, max_tokens,
                           provenance, attention_path=attention_path)
    hw, other = load_hardware(measured_on), load_hardware(also_measured_on)
    ops = pd.concat([t.ops for t in load_tables(list(table_paths), max_tokens)], ignore_index=True)
    also = load_tables(list(also_tables), max_tokens)
    also_ops = pd.concat([t.ops for t in also], ignore_index=True)
    holdouts = both_ways(GpuTables(hw, ops, layers), GpuTables(other, also_ops, layers))
    errors = judgement(holdouts)
    joint = fit_linear_on([(ops, hw), (also_ops, other)])
    profile = first.profile
    linear = profile.linear or {}
    profile.linear = {**joint.to_dict(), "max_tokens": max_tokens,
                      "models": sorted({*linear["models"], *(t.label for t in also)}),
                      "gpus": {hw.name: {**first.fit.to_dict(), "models": linear["models"]},
                               other.name: {**holdouts[1].fit.to_dict(), "models": sorted(t.label for t in also)}},
                      "heldout": {**linear["heldout"], "gpu": [],
                                  "two_gpus": [asdict(e) for e in errors],
                                  "two_gpus_by_model": {h.direction: _by_model_dict(h) for h in holdouts}}}
    profile.device_name = f"{profile.device_name} and {other.device_names[0] if other.device_names else other.name}"
    profile.heldout_method += (f"; the linear part fitted on {measured_on}'s and {also_measured_on}'s tables "
                               "together, each GPU held out from a fit on the other in linear.heldout.two_gpus")
    profile.grid = {**{f"{measured_on}/{k}": v for k, v in profile.grid.items()},
                    **{f"{also_measured_on}/{t.label}": int(len(t.ops)) for t in also}}
    profile.train_rows = profile.heldout_rows = int(len(ops) + len(also_ops))
    profile.provenance = {**profile.provenance, "also_tables": [Path(p).name for p in also_tables]}
    return ImportResult(profile, first.fit, first.by_model, first.by_tp, first.roofline, [], joint, holdouts)


def _by_model_dict(holdout: HoldOut) -> dict:
    return {str(m): {k: float(v) for k, v in row.items()} for m, row in holdout.by_model().iterrows()}


def _attention(path: str | None, hw: HardwareSpec, provenance: dict | None) -> dict | None:
    """The measured attention kernels' fit (calibrate/parts/attention_fit.py), with its held-out errors."""
    if path is None:
        return None
    from calibrate.parts.attention_fit import import_attention

    source = "; ".join(f"{k}: {v}" for k, v in (provenance or {}).items() if v)
    return import_attention(path, hw, source).to_dict()


def add_attention(profile_path: str | Path, attention_path: str | Path, command: str,
                  source: str = "", measured_on: str | None = None) -> Profile:
    """An imported profile with measured attention kernels fitted into it, on the GPU they were measured on
    (`measured_on`; default the profile's own device); everything else as it was (how
    calibrate/profiles/a100-80gb.yaml is made from a100-h100-linear.yaml)."""
    from dataclasses import replace

    from calibrate.hardware.hardware import hardware_for_device

    profile = load_profile(profile_path)
    if profile.linear is None:
        raise SpecError(str(profile_path), "linear", "not an imported per-operation profile (calibrate import)")
    measured_on = measured_on or hardware_for_device(profile.device_name)
    if measured_on is None:
        raise SpecError(str(profile_path), "device_name", f"cannot tell which shipped hardware spec "
                        f"{profile.device_name!r} is")
    provenance = {**profile.provenance, "attention_table": Path(attention_path).name}
    return replace(profile, command=command, provenance=provenance,
                   attention=_attention(str(attention_path), load_hardware(measured_on), {"source": source}))


def with_host_model(profile: Profile, name: str) -> Profile:
    """The profile with a host model (calibrate/host_models/) as the default its configs are charged, in place of
    its own measured host work."""
    from dataclasses import replace

    from calibrate.parts.host_model import available_host_models

    if name not in available_host_models():
        raise SpecError("host_model", name, f"not a shipped host model; valid: {available_host_models()}")
    return replace(profile, host=None, host_model=name)


def _host_terms(path: str | None) -> dict | None:
    """The engine's host work as another profile measured it (calibrate/parts/host.py), to charge in series."""
    if path is None:
        return None
    source = load_profile(path)
    if source.host is None:
        raise SpecError(path, "host", "this profile did not measure the engine's host work; re-profile with "
                        "servesim calibrate profile (it replays a calibration trace with clock='step')")
    return {**source.host, "source": f"{Path(path).name} ({source.device_name}, {source.created})"}


def linear_fit_lines(fit: LinearFit, device_name: str, note: str = "") -> list[str]:
    """The linear part's fit, as `calibrate import` prints it: the matmuls' roofline, then each elementwise op's."""
    lines = [f"linear part on {device_name}: compute {fit.compute_efficiency:.3f} of peak, "
             f"bandwidth {fit.bandwidth_efficiency:.3f}, ridge efficiency {fit.ridge_efficiency:.3f}, "
             f"matmul latency {fit.gemm_latency_s * 1e6:.1f} us{note}"]
    for op in ELEMENTWISE:
        if op in fit.elementwise:
            latency, efficiency = fit.elementwise[op]
            lines.append(f"  {op:<26} latency {latency * 1e6:5.1f} us, bandwidth {efficiency:.3f}")
    return lines


def report(result: ImportResult) -> str:
    """What `calibrate import` prints: the fit, then held-out errors beside today's roofline's."""
    lines = linear_fit_lines(result.fit, result.profile.device_name)
    columns = [("held out by model", result.by_model)]
    if result.by_tp is not None:
        columns.append(("held out by tp", result.by_tp))
    columns.append(("today's roofline", result.roofline))
    lines += heldout_lines(columns)
    per_model = result.by_model.layers.groupby("model")["ape"].mean()
    lines.append("per iteration, each model held out: "
                 + ", ".join(f"{m} {v:.1%}" for m, v in per_model.items()))
    if result.by_tp is not None:
        per_tp = result.by_tp.layers.groupby("tp")["ape"].mean()
        lines.append("per iteration, each tp held out: " + ", ".join(f"tp {t} {v:.1%}" for t, v in per_tp.items()))
    if result.profile.attention is not None:
        from calibrate.parts.attention_fit import AttentionFit
        from calibrate.parts.attention_fit import report_lines as attention_lines

        lines += attention_lines(AttentionFit.from_dict(result.profile.attention))
    if result.two_gpus:
        lines += two_gpu_lines(result)
    elif result.gpu:
        lines += report_lines(result.gpu)
    else:
        lines.append("on a GPU the fit never saw: not judged (the engine's H200 data judges A100 fits); "
                     + SHIPPED_NOTE)
    return "\n".join(lines)


def heldout_lines(columns: list[tuple[str, Errors]]) -> list[str]:
    """Mean |error| (p95) per iteration, per regime, per token band and per operation, a column per way of
    predicting (the first column's rows set which rows are printed)."""
    summaries = [errors.summary() for _, errors in columns]

    def row(label: str, values) -> str:
        return f"{label:<28}" + "".join(f"  {v:>18}" for v in values)

    lines = [f"{'mean |error| (p95)':<28}" + "".join(f"  {name:>18}" for name, _ in columns)]
    lines.append(row("per iteration", [f"{s['per_iteration']['mape']:.1%} ({s['per_iteration']['p95_ape']:.1%})"
                                        for s in summaries]))
    for regime in summaries[0].get("per_iteration_by_regime", {}):
        lines.append(row(f"  {regime}", [f"{s.get('per_iteration_by_regime', {}).get(regime, float('nan')):.1%}"
                                         for s in summaries]))
    for band in summaries[0]["per_iteration_by_tokens"]:
        lines.append(row(f"  {band} tokens", [f"{s['per_iteration_by_tokens'].get(band, float('nan')):.1%}"
                                              for s in summaries]))
    lines.append(row("per operation, all", [f"{s['per_op_all']['mape']:.1%}" for s in summaries]))
    lines.append(row("  the matmuls", [f"{s['per_op_all']['matmuls_mape']:.1%}" for s in summaries]))
    for op in summaries[0]["per_op"]:
        lines.append(row(f"  {op}", [f"{s['per_op'].get(op, float('nan')):.1%}" for s in summaries]))
    return lines


def two_gpu_lines(result: ImportResult) -> list[str]:
    """The fit on both GPUs, and each GPU held out from a fit on the other, per regime beside the roofline."""
    joint = result.joint
    assert joint is not None
    lines = [f"linear part on both GPUs (shares of each GPU's own spec sheet, latencies common): compute "
             f"{joint.compute_efficiency:.3f}, bandwidth {joint.bandwidth_efficiency:.3f}, ridge efficiency "
             f"{joint.ridge_efficiency:.3f}, matmul latency {joint.gemm_latency_s * 1e6:.1f} us"]
    for h in result.two_gpus:
        f = h.fit
        lines.append(f"  fitted on {h.direction.split(' -> ')[0]} alone: compute {f.compute_efficiency:.3f}, "
                     f"bandwidth {f.bandwidth_efficiency:.3f}, ridge efficiency {f.ridge_efficiency:.3f}, "
                     f"matmul latency {f.gemm_latency_s * 1e6:.1f} us")
    errors = judgement(result.two_gpus)
    lines += report_lines(errors)[:1 + len(errors)]
    for h in result.two_gpus:
        mean, worst, roof_mean, roof_worst = h.reference()
        lines.append(f"  {h.direction}: LLaMA-2-7B at tp 1, 1-1,024 tokens: {mean:.1%} ({worst:.1%}); roofline "
                     f"{roof_mean:.1%} ({roof_worst:.1%})")
    lines.append("on these two GPUs alone: " + two_gpu_choice(errors).describe())
    lines.append(SHIPPED_NOTE)
    return lines
