"""Attention tables in Vidur's format (attention.csv) whose times come from a known AttentionFit.

Tests build them in a temporary folder; none reads the published measurements.
"""
from pathlib import Path

import pandas as pd

from calibrate.hardware.hardware import load_hardware
from calibrate.parts.attention_fit import AttentionFit, AttentionWork
from calibrate.parts.attention_waves import DecodeGrid, WaveFit

HARDWARE = "a100-80gb"
TRUE_FIT = AttentionFit(decode_latency_s=15e-6, decode_bandwidth_efficiency=0.75, prefill_latency_s=12e-6,
                        prefill_compute_efficiency=0.45, prefill_kv_bandwidth_efficiency=0.4,
                        prefill_output_bandwidth_efficiency=0.1, block_size=16, measured_on=HARDWARE)
# decode in waves as the A100 fit found them: two blocks per SM, floors of 95 and 157 blocks of its 108 SMs
TRUE_WAVES = WaveFit(latency_s=5e-6, split_latency_s=2e-6, wave_latency_s=6e-6, bandwidth_efficiency=0.84,
                     blocks_per_sm=2, floor_shares=(95 / 108, 157 / 108), heuristic_sm_multiple=1, launch_tokens=4032)
WAVE_BATCHES = (1, 2, 4, 7, 8, 13, 14, 16, 21, 22, 26, 27, 28, 40, 54, 55, 56, 70, 81, 82, 100, 108, 109, 128)
# the published table's layer: 64 query and 8 KV heads of 128 at tensor parallelism 2
SHAPE = {"n_embd": 8192, "n_q_head": 64, "n_kv_head": 8, "block_size": 16, "num_tensor_parallel_workers": 2}
BATCHES = (1, 2, 4, 8, 16, 32, 64, 128)
CONTEXTS = (32, 64, 128, 256, 512, 1024, 2048, 3072, 4032)
CHUNKS = (64, 128, 256, 512, 1024, 2048, 3072, 4096)
CACHED = (0, 64, 512, 1024, 2048, 3072)
TIMES = ("attn_input_reshape", "attn_decode", "attn_output_reshape", "attn_prefill")


def rows(fit: AttentionFit = TRUE_FIT, batches=BATCHES) -> pd.DataFrame:
    """Decode rows at every batch and context, prefill rows at every chunk and cached length that fit in 4096;
    the kernel's time split 90/10 between the kernel and the output reshape, the input reshape 0 (as published).
    A fit with waves times the decodes by its waves on the A100's SMs."""
    hw, work = load_hardware(HARDWARE), AttentionWork.of_heads(32, 4, 128)
    grid = DecodeGrid.of_heads(32, 4, 128)
    out = []
    for batch in batches:
        for context in CONTEXTS:
            seconds = (fit.decode_time(work, hw, batch * context) if fit.waves is None
                       else fit.waves.decode_time(grid, hw, [batch], [context])[0])
            ms = float(seconds) * 1e3
            out.append({**_times("attn_decode", ms), "batch_size": batch, "prefill_chunk_size": 0,
                        "kv_cache_size": context, "is_prefill": False})
    for chunk in CHUNKS:
        for cached in CACHED:
            if chunk + cached <= 4096:
                ms = float(fit.prefill_time(work, hw, chunk, cached)) * 1e3
                out.append({**_times("attn_prefill", ms), "batch_size": 1, "prefill_chunk_size": chunk,
                            "kv_cache_size": cached, "is_prefill": True})
    frame = pd.DataFrame(out)
    for column, value in SHAPE.items():
        frame[column] = value
    frame["attention_backend"] = "AttentionBackend.FLASH_ATTENTION"
    return frame


def _times(kernel: str, ms: float) -> dict:
    values = {f"time_stats.{op}.median": float("nan") for op in TIMES}
    values.update({"time_stats.attn_input_reshape.median": 0.0, f"time_stats.{kernel}.median": 0.9 * ms,
                   "time_stats.attn_output_reshape.median": 0.1 * ms})
    return values


def write_table(path: Path, frame: pd.DataFrame | None = None) -> Path:
    (rows() if frame is None else frame).to_csv(path, index=False)
    return path
