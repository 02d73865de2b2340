"""What `calibrate import --format llmservingsim` prints: the fit, each held-out error beside today's roofline's,
the mixture's block judged, the attention part, and what the profile does not price."""
from __future__ import annotations

from calibrate.judging.bundle_import import HOST_MODEL, BundleImport
from calibrate.judging.op_import import heldout_lines, linear_fit_lines
from calibrate.parts.attention_fit import report_lines as attention_lines
from calibrate.tables.bundle_ops import NOT_PRICED

WAYS = {"by_model": "held out by model", "by_tp": "held out by tp", "by_octave": "held out by octave",
        "roofline": "today's roofline"}


def bundle_report(result: BundleImport) -> str:
    fit = result.fit
    lines = linear_fit_lines(fit, result.profile.device_name, " (the LM head's rows among the matmuls)")
    l2 = result.profile.linear.get("l2") if result.profile.linear else None
    if l2 is not None and fit.resident_bandwidth_efficiency is not None:
        lines.append(f"  the bandwidth is HBM's: {l2['matmul_rows_in_l2']} of {l2['matmul_rows']} matmul rows fit in "
                     f"the {l2['l2_cache_bytes'] / 2**20:g} MB L2 and read their weights at "
                     f"{fit.resident_bandwidth_efficiency:.3f} apart (a real model's never stay there: not priced)")
    columns = [(WAYS[way], errors) for way, errors in result.heldout.items()]
    lines += heldout_lines([*columns, ("today's roofline", result.roofline)])
    for way, hbm in (result.profile.linear or {}).get("heldout", {}).get("from_hbm", {}).items():
        matmuls = hbm["matmuls"]
        lines.append(f"matmuls read from HBM, {WAYS.get(way, way)}: mean |error| {matmuls['mape']:.1%} (signed "
                     f"{matmuls['signed_mean']:+.1%}, {matmuls['rows']} rows)")
    for way, key in (("by_model", "model"), ("by_tp", "tp")):
        if way in result.heldout:
            means = result.heldout[way].layers.groupby(key)["ape"].mean()
            lines.append(f"per iteration, each {key} held out: " + ", ".join(f"{k} {v:.1%}" for k, v in means.items()))
    for label, errors in result.moe.items():
        own, roof = errors["fit"], errors["roofline"]
        lines.append(f"{label}'s mixture block (moe.csv, {own['rows']} rows, not fitted), priced as servesim's "
                     f"experts from the fitted dense operations: mean |error| {own['mean']:.1%} (p95 {own['p95']:.1%}, "
                     f"signed {own['signed_mean']:+.1%}); today's roofline {roof['mean']:.1%} (p95 {roof['p95']:.1%}, "
                     f"signed {roof['signed_mean']:+.1%})")
    lines += attention_lines(result.attention)
    lines.append(f"not priced: {', '.join(NOT_PRICED)} (no term in servesim's device clock); the residual add "
                 "(fused into vLLM's norm); all-reduce (tp emulated on one GPU: the ring formula at tp > 1)")
    lines.append(f"host work: none measured; the default host model is {HOST_MODEL} (cost_model.host replaces it)")
    return "\n".join(lines)
