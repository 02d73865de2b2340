"""How a mixed step's term reads in words: the cost model's source, and what `calibrate import` and `calibrate show`
print of the fit and its judges (calibrate/parts/attention_mixed.py, calibrate/judging/mixed_attention.py)."""
from __future__ import annotations

from calibrate.hardware.hardware import HardwareSpec
from calibrate.parts.attention_mixed import MixedFit


def describe(fit: MixedFit, hw: HardwareSpec) -> str:
    """How a mixed step's decodes are priced on `hw`, for a cost model's source."""
    if hw.sm_count is None:
        return f", mixed steps as decode + prefill ({hw.name}'s sheet gives no sm_count)"
    if fit.miss_bandwidth_efficiency is None:
        return f", mixed steps as one launch over {hw.sm_count} SMs"
    if hw.l2_cache_bytes is None:
        return f", mixed steps as one launch over {hw.sm_count} SMs (no L2 rereads: {hw.name}'s sheet gives no L2)"
    return f", mixed steps as one launch over {hw.sm_count} SMs and {hw.l2_cache_bytes / 2**20:g} MB of L2"


def mixed_fit_line(fit: MixedFit) -> str:
    """The mixed term's parameters, as `calibrate import` and `calibrate show` print them."""
    floors = ", ".join(f"{f:.3f}" for f in fit.floor_shares)
    miss = "not charged" if fit.miss_bandwidth_efficiency is None else f"{fit.miss_bandwidth_efficiency:.3f}"
    return (f"  mixed step's decodes in its one launch (where the GPU's sheet gives its sm_count): latency "
            f"{fit.latency_s * 1e6:.1f} us, per wave {fit.wave_latency_s * 1e6:.1f} us, per empty query block "
            f"{fit.empty_block_s * 1e9:.2f} ns, query heads' K/V stream {fit.bandwidth_efficiency:.3f} of HBM, "
            f"rereads past the L2 {miss}; {fit.blocks_per_sm} blocks per SM, floors {floors} x SMs")


def mixed_judged_lines(judged: dict) -> list[str]:
    """The mixed rows' judges (calibrate/judging/mixed_attention.py): the mixed term's where fitted, the decode and
    prefill parts added, the roofline."""
    def text(e: dict) -> str:
        return f"{e['mean']:.1%} (p95 {e['p95']:.1%}, signed {e['signed_mean']:+.1%})"

    region = judged["region"]
    lines = []
    if "heldout_region" in judged:
        lines.append(f"  mixed rows by the mixed term: held out ({region}) {text(judged['heldout_region'])}; in "
                     f"sample {text(judged['in_sample'])}")
    for way, label in (("sum", "as decode + prefill parts"), ("roofline", "by the roofline's defaults")):
        if way in judged:
            lines.append(f"  mixed rows {label} (never fitted): the same region {text(judged[way]['heldout_region'])};"
                         f" every row {text(judged[way]['in_sample'])}")
    return lines
