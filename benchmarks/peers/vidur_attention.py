"""A stand-in for Vidur's A100 attention table, priced by servesim's own cost model.

Vidur predicts attention from a table its profiler measured on the GPU (`attention.csv`, one row per
input: a prefill chunk over a cached prefix at batch 1, or a batch of decodes at one KV length). The
published A100 table is a large Git LFS file that the `vidur` wheel does not ship. This module writes a
table in the same format, on the same grid of inputs Vidur's profiler visits
(vidur/profiling/utils get_attention_input_combinations, reproduced here so that no torch is needed),
with each row's time taken from the cost model servesim's run uses: its decode attention (the A100
clock's, fitted on Vidur's own measured kernels, in waves, plus the paged kernel's cost per block) and
its prefill attention, per layer, in milliseconds.
Both simulators then price attention alike, and differ only in everything else.
"""
from __future__ import annotations

import pandas as pd

from engine.core.batch import BatchShape

# the columns Vidur's predictor reads (SklearnExecutionTimePredictor._load_attention_df and the
# models trained on it); the identity columns are filtered on, the time_stats ones are the targets
IDENTITY_COLUMNS = ("n_embd", "n_q_head", "n_kv_head", "block_size", "num_tensor_parallel_workers", "max_model_len")
INPUT_COLUMNS = ("batch_size", "prefill_chunk_size", "kv_cache_size", "is_prefill")
TIME_COLUMNS = ("time_stats.attn_prefill.median", "time_stats.attn_decode.median",
                "time_stats.attn_kv_cache_save.median")
COLUMNS = IDENTITY_COLUMNS + INPUT_COLUMNS + TIME_COLUMNS


def seq_lengths(max_seq_len: int) -> list[int]:
    """The KV lengths Vidur's profiler visits below max_seq_len (its SEQ_LENGTH_SIZE_SPACE, up to 64k)."""
    space = [*range(0, 1025, 32), *range(1024, 4 * 1024 + 1, 64), *range(4 * 1024, 64 * 1024 + 1, 256)]
    return sorted({n for n in space if n < max_seq_len})


def prefill_chunk_sizes(max_seq_len: int, max_chunk_size: int) -> list[int]:
    """Its PREFILL_CHUNK_SIZE_SPACE, 32 to 8k tokens."""
    space = [*range(32, 129, 32), *range(256, 1025, 128), *range(1024, 8 * 1024 + 1, 512)]
    return sorted({n for n in space if n <= min(max_seq_len, max_chunk_size)})


def attention_inputs(max_seq_len: int, max_batch_size: int, max_chunk_size: int) -> list[tuple[int, int, int, bool]]:
    """(prefill_chunk_size, kv_cache_size, batch_size, is_prefill) for every valid input, as Vidur profiles:
    chunked prefills over whole chunks already cached, full prefills, and decode batches."""
    inputs = []
    for chunk in prefill_chunk_sizes(max_seq_len, max_chunk_size):
        inputs += [(chunk, i * chunk, 1, True) for i in range(max_seq_len // chunk)]
    if max_seq_len <= max_chunk_size:
        inputs += [(n, 0, 1, True) for n in seq_lengths(max_seq_len) if n > 0]
    inputs += [(0, kv, b, False) for kv in seq_lengths(max_seq_len) if kv > 0 for b in range(1, max_batch_size + 1)]
    return sorted(set(inputs))


def attention_table(cost_model, num_layers: int, identity: dict, max_seq_len: int, max_batch_size: int = 128,
                    max_chunk_size: int = 4096) -> pd.DataFrame:
    """Vidur's attention-file rows for one model and deployment (`identity`: IDENTITY_COLUMNS' values), each
    priced per layer in ms by `cost_model`'s decode_attention_time / prefill_attention_time.
    servesim charges no separate KV-cache write, so attn_kv_cache_save is 0."""
    missing = [c for c in IDENTITY_COLUMNS if c not in identity]
    if missing:
        raise ValueError(f"attention table identity lacks {missing}")
    ms_per_layer = 1e3 / num_layers
    rows = []
    for chunk, kv, batch, is_prefill in attention_inputs(max_seq_len, max_batch_size, max_chunk_size):
        if is_prefill:
            shape = BatchShape(prefill_lens=(chunk,), prefill_cached_lens=(kv,) if kv else ())
            prefill_ms, decode_ms = cost_model.prefill_attention_time(shape) * ms_per_layer, float("nan")
        else:
            shape = BatchShape(decode_context_lens=(kv,) * batch)
            prefill_ms, decode_ms = float("nan"), cost_model.decode_attention_time(shape) * ms_per_layer
        rows.append((batch, chunk, kv, is_prefill, prefill_ms, decode_ms, 0.0))
    table = pd.DataFrame(rows, columns=list(INPUT_COLUMNS + TIME_COLUMNS))
    for column in reversed(IDENTITY_COLUMNS):
        table.insert(0, column, identity[column])
    return table
