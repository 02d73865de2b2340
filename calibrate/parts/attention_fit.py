"""Attention as measured attention kernels describe it (calibrate/tables/attention_table.py): latencies and shares
of peaks.

Per layer, on one GPU (q query heads, k KV heads, head dimension d, dtype bytes e):
  decode   latency + K/V bytes read / (decode share x HBM bandwidth), the bytes 2 k d e per context token of every
           sequence (K and V). A per-sequence term was tried and left out: the fit gives it nothing (with it the
           held-out error moves by under 0.1%). What the rows' spread does follow, the kernel's thread blocks
           filling the GPU's SMs in waves, is `waves` (calibrate/parts/attention_waves.py), fitted where the measured
           GPU's sheet gives its sm_count; the cost model uses it on GPUs whose sheets give theirs.
  prefill  latency + FLOPs / (compute share x peak FLOP/s) + K/V bytes / (its share of HBM) + output bytes / (its
           share of HBM), for n new tokens after c cached ones: FLOPs 4 q d n (n + c) (QK^T and AV, a multiply and
           an add per head dimension each, over every new token against every key), the K/V of the n + c tokens
           read (2 k d e each), and the output's 2 q d e per new token read and written by the output reshape.
           The measured FlashAttention prefill's time tracks n (n + c), the whole rectangle of new tokens by keys,
           not the causal 2 q d n (n + 2c) the roofline counts (its masked half is not skipped at these chunk
           sizes, or costs as much): fitted on the causal count alone the mean error is about twice as large.
The input reshape is part of every row's time too; the published A100 table measures it at 0 ms.

Shares are of the measured GPU's spec sheet (calibrate/hardware/hardware.py), so that the fit carries to other GPUs
by their sheets, and through bytes and FLOPs to other head counts and head dimensions: bytes scale with the KV heads
(GQA), FLOPs with the query heads. Latencies carry as measured.

The paged kernel: the table's kernel reads K/V through a block table at `block_size` (16), so its times include
its own paging. The roofline's per-KV-block term (RooflineParams.block_read_overhead_tokens: the paper's Fig. 18a,
paper-era vLLM's paged kernel 20-26% slower than FasterTransformer's dense one) describes that older kernel's gap
and is not added on top of a fit: a cost model with an AttentionFit prices decode attention as the measured
kernel, paged as it was measured, and the Fig. 18a factor stays the roofline's, for the roofline's own attention.

The fit is non-negative least squares on relative error (calibrate/maths/nnls.py), decode and prefill apart.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import numpy as np

from calibrate.hardware.hardware import HardwareSpec
from calibrate.maths.nnls import relative_nnls
from calibrate.parts.attention_mixed import MixedFit
from calibrate.parts.attention_waves import DecodeGrid, WaveFit, fit_waves_on
from calibrate.parts.mixed_text import mixed_fit_line, mixed_judged_lines

if TYPE_CHECKING:
    import pandas as pd

    from calibrate.tables.attention_table import AttentionShape, AttentionTable
    from engine.core.spec import ModelSpec

HELD_OUT_SHARE = 0.75  # held-out regions: the rows at or above this share of the largest context / chunk
FOLDS = 5


@dataclass(frozen=True)
class AttentionWork:
    """One attention layer's work on one GPU, per unit of its input."""
    kv_bytes_per_token: float  # K and V of one token of context
    output_bytes_per_token: float  # one new token's output, read and written by the reshape
    flops_per_pair: float  # one new token against one key: QK^T and AV over the query heads

    @classmethod
    def of_heads(cls, q_heads: float, kv_heads: float, head_dim: int, dtype_bytes: int = 2) -> AttentionWork:
        return cls(2 * kv_heads * head_dim * dtype_bytes, 2 * q_heads * head_dim * dtype_bytes,
                   4 * q_heads * head_dim)

    @classmethod
    def of_table(cls, shape: AttentionShape, dtype_bytes: int = 2) -> AttentionWork:
        return cls.of_heads(shape.q_heads, shape.kv_heads, shape.head_dim, dtype_bytes)

    @classmethod
    def of_model(cls, model: ModelSpec, tp: int, dtype_bytes: int = 2) -> AttentionWork:
        """Heads split over `tp` GPUs, as the roofline splits the KV bytes."""
        return cls.of_heads(model.num_heads / tp, model.num_kv_heads / tp, model.head_dim, dtype_bytes)


@dataclass(frozen=True)
class AttentionFit:
    """Per-layer latencies (seconds) and shares of the measured GPU's peaks; a prefill share None: the fit found
    no cost in that term (charged nothing)."""
    decode_latency_s: float
    decode_bandwidth_efficiency: float
    prefill_latency_s: float
    prefill_compute_efficiency: float
    prefill_kv_bandwidth_efficiency: float | None
    prefill_output_bandwidth_efficiency: float | None
    block_size: int = 16  # the measured kernel's KV block: its paging is in the times
    measured_on: str = ""  # the shipped hardware spec of the GPU measured
    # held-out errors, where the measurements came from (filled by import_attention)
    heldout: dict = field(default_factory=dict)
    source: str = ""
    waves: WaveFit | None = None  # decode in waves over the SMs; None where the measured GPU's SM count is unknown
    # a mixed step's decodes in its one launch (calibrate/parts/attention_mixed.py); None: measured on no mixed rows
    mixed: MixedFit | None = None

    def decode_time(self, work: AttentionWork, hw: HardwareSpec, context_tokens) -> np.ndarray:
        """One layer's decode attention over `context_tokens` (summed over the batch's sequences)."""
        tokens = np.asarray(context_tokens, dtype=float)
        return self.decode_latency_s + tokens * work.kv_bytes_per_token / (
            hw.hbm_bytes_per_s * self.decode_bandwidth_efficiency)

    def prefill_time(self, work: AttentionWork, hw: HardwareSpec, chunk, cached) -> np.ndarray:
        """One layer's prefill attention of a chunk of `chunk` new tokens after `cached` ones."""
        n, c = np.asarray(chunk, dtype=float), np.asarray(cached, dtype=float)
        t = self.prefill_latency_s + n * (n + c) * work.flops_per_pair / (
            hw.peak_flops * self.prefill_compute_efficiency)
        if self.prefill_kv_bandwidth_efficiency is not None:
            t = t + (n + c) * work.kv_bytes_per_token / (hw.hbm_bytes_per_s * self.prefill_kv_bandwidth_efficiency)
        if self.prefill_output_bandwidth_efficiency is not None:
            t = t + n * work.output_bytes_per_token / (hw.hbm_bytes_per_s * self.prefill_output_bandwidth_efficiency)
        return t

    def heldout_summary(self) -> str:
        """The held-out errors in a line: each region's mean |error|."""
        parts = [f"{kind} {errors['region']} {errors['heldout_region']['mean']:.1%}"
                 for kind, errors in self.heldout.items() if "heldout_region" in errors]
        return ", ".join(parts) or "not measured"

    def to_dict(self) -> dict:
        return {"decode_latency_s": self.decode_latency_s,
                "decode_bandwidth_efficiency": self.decode_bandwidth_efficiency,
                "prefill_latency_s": self.prefill_latency_s,
                "prefill_compute_efficiency": self.prefill_compute_efficiency,
                "prefill_kv_bandwidth_efficiency": self.prefill_kv_bandwidth_efficiency,
                "prefill_output_bandwidth_efficiency": self.prefill_output_bandwidth_efficiency,
                "block_size": self.block_size, "measured_on": self.measured_on, "heldout": self.heldout,
                "source": self.source, **({} if self.waves is None else {"waves": self.waves.to_dict()}),
                **({} if self.mixed is None else {"mixed": self.mixed.to_dict()})}

    @classmethod
    def from_dict(cls, raw: dict) -> AttentionFit:
        return cls(raw["decode_latency_s"], raw["decode_bandwidth_efficiency"], raw["prefill_latency_s"],
                   raw["prefill_compute_efficiency"], raw.get("prefill_kv_bandwidth_efficiency"),
                   raw.get("prefill_output_bandwidth_efficiency"), raw.get("block_size", 16),
                   raw.get("measured_on", ""), raw.get("heldout", {}), raw.get("source", ""),
                   WaveFit.from_dict(raw["waves"]) if raw.get("waves") is not None else None,
                   MixedFit.from_dict(raw["mixed"]) if raw.get("mixed") is not None else None)


def _relative_nnls(columns: list[np.ndarray], time_s: np.ndarray) -> np.ndarray:
    return relative_nnls(np.column_stack(columns), time_s)


def decode_columns(decode: pd.DataFrame, work: AttentionWork, hw: HardwareSpec) -> list[np.ndarray]:
    """Seconds per unit of each decode term: 1 (the latency) and the K/V bytes at the peak bandwidth."""
    tokens = decode["batch"].to_numpy(float) * decode["context"].to_numpy(float)
    return [np.ones(len(decode)), tokens * work.kv_bytes_per_token / hw.hbm_bytes_per_s]


def prefill_columns(prefill: pd.DataFrame, work: AttentionWork, hw: HardwareSpec) -> list[np.ndarray]:
    """1, the FLOPs at peak, the K/V bytes and the output bytes at the peak bandwidth."""
    n, c = prefill["chunk"].to_numpy(float), prefill["cached"].to_numpy(float)
    return [np.ones(len(prefill)), n * (n + c) * work.flops_per_pair / hw.peak_flops,
            (n + c) * work.kv_bytes_per_token / hw.hbm_bytes_per_s,
            n * work.output_bytes_per_token / hw.hbm_bytes_per_s]


def _share(per_peak_second: float) -> float | None:
    return 1.0 / per_peak_second if per_peak_second > 0 else None


def as_tables(tables: AttentionTable | Sequence[AttentionTable]) -> list[AttentionTable]:
    """One table, or one GPU's tables of several layer shapes (fitted together, each row priced by its own
    table's work)."""
    return list(tables) if isinstance(tables, (list, tuple)) else [tables]


def _joined(parts: list[list[np.ndarray]]) -> list[np.ndarray]:
    """Each term's column over every table's rows, in the tables' order."""
    return [np.concatenate(column) for column in zip(*parts)]


def fit_attention(tables: AttentionTable | Sequence[AttentionTable], hw: HardwareSpec,
                  dtype_bytes: int = 2) -> AttentionFit:
    """The decode and prefill terms fitted to every row of `tables`."""
    tables = as_tables(tables)
    if all(t.decode.empty for t in tables) or all(t.prefill.empty for t in tables):
        raise ValueError("an attention fit needs both decode and prefill rows")
    works = [AttentionWork.of_table(t.shape, dtype_bytes) for t in tables]
    d_latency, d_bytes = _relative_nnls(_joined([decode_columns(t.decode, w, hw) for t, w in zip(tables, works)]),
                                        _times(tables, "decode"))
    p_latency, p_flops, p_kv, p_out = _relative_nnls(
        _joined([prefill_columns(t.prefill, w, hw) for t, w in zip(tables, works)]), _times(tables, "prefill"))
    if d_bytes <= 0 or p_flops <= 0:
        raise ValueError("the rows show no cost growing with the K/V read (decode) or the FLOPs (prefill)")
    waves = None
    if hw.sm_count is not None:
        decoding = [t for t in tables if not t.decode.empty]
        launch_tokens = max(t.launch_tokens or int(t.decode["context"].max()) for t in decoding)
        waves = fit_waves_on([(t.decode, decode_grid(t.shape, dtype_bytes)) for t in decoding], hw, launch_tokens)
    return AttentionFit(float(d_latency), 1.0 / float(d_bytes), float(p_latency), 1.0 / float(p_flops),
                        _share(float(p_kv)), _share(float(p_out)), tables[0].shape.block_size, hw.name, waves=waves)


def _times(tables: list[AttentionTable], kind: str) -> np.ndarray:
    return np.concatenate([getattr(t, kind)["time_s"].to_numpy() for t in tables])


def decode_grid(shape: AttentionShape, dtype_bytes: int = 2) -> DecodeGrid:
    return DecodeGrid.of_heads(shape.q_heads, shape.kv_heads, shape.head_dim, dtype_bytes)


def predict_waves(fit: AttentionFit, tables: AttentionTable | Sequence[AttentionTable], hw: HardwareSpec,
                  dtype_bytes: int = 2) -> np.ndarray:
    """The decode rows' seconds as `fit`'s waves price them."""
    if fit.waves is None:
        raise ValueError("the fit has no waves: its GPU's sheet gives no sm_count")
    waves = fit.waves
    return np.concatenate([waves.decode_time(decode_grid(t.shape, dtype_bytes), hw, t.decode["batch"],
                                             t.decode["context"]) for t in as_tables(tables)])


def predict(fit: AttentionFit, tables: AttentionTable | Sequence[AttentionTable], hw: HardwareSpec,
            dtype_bytes: int = 2) -> tuple[np.ndarray, np.ndarray]:
    """(decode, prefill) seconds of each of the tables' rows, as `fit` prices them."""
    decode, prefill = [], []
    for table in as_tables(tables):
        work = AttentionWork.of_table(table.shape, dtype_bytes)
        rows = table.decode
        decode.append(fit.decode_time(work, hw, rows["batch"].to_numpy(float) * rows["context"].to_numpy(float)))
        prefill.append(fit.prefill_time(work, hw, table.prefill["chunk"], table.prefill["cached"]))
    return np.concatenate(decode), np.concatenate(prefill)


def region_masks(tables: AttentionTable | Sequence[AttentionTable]) -> tuple[np.ndarray, np.ndarray]:
    """The held-out regions: the longest decode contexts and the largest prefill chunks (HELD_OUT_SHARE of each
    table's largest and above)."""
    masks = []
    for table in as_tables(tables):
        context, chunk = table.decode["context"].to_numpy(), table.prefill["chunk"].to_numpy()
        masks.append((context >= HELD_OUT_SHARE * context.max(), chunk >= HELD_OUT_SHARE * chunk.max()))
    return np.concatenate([d for d, _ in masks]), np.concatenate([p for _, p in masks])


def _subset(tables: AttentionTable | Sequence[AttentionTable], decode: np.ndarray,
            prefill: np.ndarray) -> list[AttentionTable]:
    """Each table's rows where the masks (over every table's rows, in order) are set."""
    out, d_at, p_at = [], 0, 0
    for table in as_tables(tables):
        d_end, p_end = d_at + len(table.decode), p_at + len(table.prefill)
        out.append(replace(table, decode=table.decode[decode[d_at:d_end]], prefill=table.prefill[prefill[p_at:p_end]]))
        d_at, p_at = d_end, p_end
    return out


def _errors(predicted: np.ndarray, time_s: np.ndarray) -> dict:
    ape = np.abs(predicted - time_s) / time_s
    return {"mean": float(ape.mean()), "p95": float(np.quantile(ape, 0.95)),
            "signed_mean": float(((predicted - time_s) / time_s).mean()), "rows": int(len(ape))}


def region_fit(tables: AttentionTable | Sequence[AttentionTable], hw: HardwareSpec,
               dtype_bytes: int = 2) -> AttentionFit:
    """The fit on every row outside the held-out regions (region_masks)."""
    long_context, big_chunk = region_masks(tables)
    return fit_attention(_subset(tables, ~long_context, ~big_chunk), hw, dtype_bytes)


def heldout_errors(tables: AttentionTable | Sequence[AttentionTable], hw: HardwareSpec, dtype_bytes: int = 2,
                   seed: int = 0) -> dict:
    """Per kind: the error on its held-out region fitted on the rest, on a FOLDS-fold random split, and in sample;
    where `hw` gives its sm_count, `decode_waves` too: the decode rows as the waves price them, judged alike."""
    tables = as_tables(tables)
    long_context, big_chunk = region_masks(tables)
    waves = hw.sm_count is not None
    in_region = region_fit(tables, hw, dtype_bytes)
    region_decode, region_prefill = predict(in_region, tables, hw, dtype_bytes)
    d_time, p_time = _times(tables, "decode"), _times(tables, "prefill")
    rng = np.random.default_rng(seed)
    fold_d = rng.integers(0, FOLDS, len(d_time))
    fold_p = rng.integers(0, FOLDS, len(p_time))
    kfold_d, kfold_p, kfold_w = np.zeros(len(d_time)), np.zeros(len(p_time)), np.zeros(len(d_time))
    for k in range(FOLDS):
        fold_fit = fit_attention(_subset(tables, fold_d != k, fold_p != k), hw, dtype_bytes)
        d, p = predict(fold_fit, tables, hw, dtype_bytes)
        kfold_d[fold_d == k], kfold_p[fold_p == k] = d[fold_d == k], p[fold_p == k]
        if waves:
            kfold_w[fold_d == k] = predict_waves(fold_fit, tables, hw, dtype_bytes)[fold_d == k]
    every_row = fit_attention(tables, hw, dtype_bytes)
    all_decode, all_prefill = predict(every_row, tables, hw, dtype_bytes)
    errors = _kinds(tables, long_context, big_chunk, region_decode, region_prefill, kfold_d, kfold_p, all_decode,
                    all_prefill)
    if waves:
        region_waves = predict_waves(in_region, tables, hw, dtype_bytes)
        errors["decode_waves"] = {
            "region": errors["decode"]["region"],
            "heldout_region": _errors(region_waves[long_context], d_time[long_context]),
            "trained_region": _errors(region_waves[~long_context], d_time[~long_context]),
            "kfold": _errors(kfold_w, d_time),
            "in_sample": _errors(predict_waves(every_row, tables, hw, dtype_bytes), d_time)}
    return errors


def _region(tables: list[AttentionTable], kind: str, column: str) -> str:
    """A region's bound in words: one table's, or each table's where their largest differ."""
    bounds = sorted({int(HELD_OUT_SHARE * getattr(t, kind)[column].max()) for t in tables})
    return f">= {bounds[0]}" if len(bounds) == 1 else f">= {bounds[0]}-{bounds[-1]} (each table's own)"


def _kinds(tables: list[AttentionTable], long_context: np.ndarray, big_chunk: np.ndarray,
           region_decode: np.ndarray, region_prefill: np.ndarray, kfold_d: np.ndarray, kfold_p: np.ndarray,
           all_decode: np.ndarray, all_prefill: np.ndarray) -> dict:
    d_time, p_time = _times(tables, "decode"), _times(tables, "prefill")
    return {
        "decode": {"region": f"contexts {_region(tables, 'decode', 'context')}",
                   "heldout_region": _errors(region_decode[long_context], d_time[long_context]),
                   "trained_region": _errors(region_decode[~long_context], d_time[~long_context]),
                   "kfold": _errors(kfold_d, d_time), "in_sample": _errors(all_decode, d_time)},
        "prefill": {"region": f"chunks {_region(tables, 'prefill', 'chunk')}",
                    "heldout_region": _errors(region_prefill[big_chunk], p_time[big_chunk]),
                    "trained_region": _errors(region_prefill[~big_chunk], p_time[~big_chunk]),
                    "kfold": _errors(kfold_p, p_time), "in_sample": _errors(all_prefill, p_time)}}


def import_attention(path, hw: HardwareSpec, source: str = "", dtype_bytes: int = 2) -> AttentionFit:
    """The fit on every row of the table at `path`, with its held-out errors and where it came from."""
    from pathlib import Path

    from calibrate.tables.attention_table import read_attention_table

    table = read_attention_table(path)
    fit = fit_attention(table, hw, dtype_bytes)
    shape = table.shape
    measured = (f"{Path(path).name}: {shape.q_heads} query and {shape.kv_heads} KV heads per GPU (tp {shape.tp}), "
                f"head dim {shape.head_dim}, block size {shape.block_size}")
    return replace(fit, heldout=heldout_errors(table, hw, dtype_bytes),
                   source=f"{measured}; {source}" if source else measured)


def report_lines(fit: AttentionFit) -> list[str]:
    """What `calibrate import --attention` and `calibrate show` print of it."""
    def share(value: float | None) -> str:
        return "not charged" if value is None else f"{value:.3f}"

    lines = [f"attention (measured{' on ' + fit.measured_on if fit.measured_on else ''}, per layer; paged at block "
             f"size {fit.block_size}, its paging in the times):",
             f"  decode   latency {fit.decode_latency_s * 1e6:.1f} us, K/V bandwidth "
             f"{fit.decode_bandwidth_efficiency:.3f} of peak",
             f"  prefill  latency {fit.prefill_latency_s * 1e6:.1f} us, compute "
             f"{fit.prefill_compute_efficiency:.3f} of peak, K/V bandwidth "
             f"{share(fit.prefill_kv_bandwidth_efficiency)}, output bandwidth "
             f"{share(fit.prefill_output_bandwidth_efficiency)}"]
    if fit.waves is not None:
        w = fit.waves
        floors = ", ".join(f"{f:.3f}" for f in w.floor_shares)
        lines.append(f"  decode in waves (where the GPU's sheet gives its sm_count): latency "
                     f"{w.latency_s * 1e6:.1f} us, split {w.split_latency_s * 1e6:.1f} us, per wave "
                     f"{w.wave_latency_s * 1e6:.1f} us, K/V bandwidth {w.bandwidth_efficiency:.3f} of peak; "
                     f"{w.blocks_per_sm} blocks per SM, floors {floors} x SMs, splits as for "
                     f"{w.heuristic_sm_multiple} x SMs, launched {w.launch_tokens} tokens wide")
    if fit.mixed is not None:
        lines.append(mixed_fit_line(fit.mixed))
    for kind, errors in fit.heldout.items():
        if "kfold" not in errors:  # the judges of several tables (by_table) and of the mixed rows: below
            continue
        region, kfold = errors["heldout_region"], errors["kfold"]
        lines.append(f"  {kind:<8} held out ({errors['region']}): mean |error| {region['mean']:.1%} "
                     f"(p95 {region['p95']:.1%}); {FOLDS}-fold {kfold['mean']:.1%}; in sample "
                     f"{errors['in_sample']['mean']:.1%}")
    for label, errors in fit.heldout.get("by_table", {}).items():
        lines.append(f"  {label} held out (fitted on the other tables): "
                     + ", ".join(f"{kind} {mean:.1%}" for kind, mean in errors.items()))
    if "mixed" in fit.heldout:
        lines += mixed_judged_lines(fit.heldout["mixed"])
    if fit.source:
        lines.append(f"  from {fit.source}")
    return lines
