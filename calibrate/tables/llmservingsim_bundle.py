"""LLMServingSim's profile bundles (casys-kaist/LLMServingSim, `profiler/perf/<HW>/<org>/<model>/<variant>/`), read
and checked.

A bundle is one model's vLLM kernels timed module by module on one GPU: vLLM's layerwise profile, each module's CUDA
kernel time per call, averaged over `measurement_iterations` forwards (after a warm-up) of the model cut to one
decoder layer, dummy weights, eager. Where a module runs twice in a forward (a layer's two RMSNorms, the QK-norm's
q and k) its row is the mean of the two calls. The folder holds `meta.yaml` (the GPU as the driver names it, the
model's Hugging Face id, the engine's settings) and a `tp<N>/` folder per tensor-parallel degree, emulated on one
GPU by dividing the heads, the MLP's width and the vocabulary by N (meta.yaml's `hf_overrides`: the last degree
profiled), each with
  dense.csv         layer, tokens, time_us: the per-token modules, over one request of `tokens` new tokens
  per_sequence.csv  layer, sequences, time_us: the LM head (vLLM's LogitsProcessor) and the sampler over
                    `sequences` one-token requests
  attention.csv     prefill_chunk, kv_prefill, n_decode, kv_decode, time_us: vLLM's Attention module (the KV-cache
                    write and the attention kernel) for a chunk of new tokens after kv_prefill cached ones beside
                    n_decode decodes of kv_decode tokens of context each, in one call
  moe.csv           tokens, activated_experts, time_us: a mixture's block (router and experts), at tp 1 only
Times are microseconds (the project's docs/docs/profiler/output-bundle.md); they are read here in seconds. A module
the profiler marks tp-stable (the norms, the sampler) is timed at tp 1 and its rows copied into the other tp folders.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from calibrate.tables.columns import checked_column, row_where
from calibrate.tables.op_table import check_columns, read_csv
from engine.errors import SpecError
from engine.specs.checks import positive_int
from engine.specs.loader import read_yaml

if TYPE_CHECKING:
    import pandas as pd

US = 1e-6
META = "meta.yaml"
# the per-token modules of the profiler's architecture catalogs (profiler/models/{llama,qwen3,qwen3_moe}.yaml)
DENSE_LAYERS = ("embedding", "layernorm", "qkv_proj", "qk_norm", "rotary_emb", "o_proj", "gate_up_proj", "act_fn",
                "down_proj", "final_layernorm")
SEQUENCE_LAYERS = ("lm_head", "sampler")
SIXTEEN_BIT = ("bf16", "fp16")  # a servesim profile is measured at 16 bits (calibrate/cost_models/registry.py)
TABLES = {"dense.csv": ("layer", "tokens"), "per_sequence.csv": ("layer", "sequences"),
          "attention.csv": ("prefill_chunk", "kv_prefill", "n_decode", "kv_decode"),
          "moe.csv": ("tokens", "activated_experts")}
LAYERS = {"dense.csv": DENSE_LAYERS, "per_sequence.csv": SEQUENCE_LAYERS}  # the layers a table's rows may name


@dataclass(frozen=True)
class TpTables:
    """One tensor-parallel degree's tables, times in seconds (`time_s`); attention or moe None where absent."""
    tp: int
    dense: pd.DataFrame  # layer, tokens, time_s
    per_sequence: pd.DataFrame  # layer, sequences, time_s
    attention: pd.DataFrame | None = None  # prefill_chunk, kv_prefill, n_decode, kv_decode, time_s
    moe: pd.DataFrame | None = None  # tokens, activated_experts, time_s


@dataclass(frozen=True)
class Bundle:
    path: Path
    gpu: str  # the driver's name for the GPU measured
    model: str  # the Hugging Face id
    architecture: str  # the profiler's catalog: llama, qwen3, qwen3_moe, ...
    variant: str
    block_size: int
    heads: int  # meta.yaml's hf_overrides: query and KV heads of the last degree profiled
    kv_heads: int
    last_tp: int
    tps: dict[int, TpTables] = field(default_factory=dict)
    provenance: dict = field(default_factory=dict)  # versions, date and iterations, as meta.yaml gives them


def is_bundle(path: str | Path) -> bool:
    """A folder with a meta.yaml: what --format auto reads as an LLMServingSim bundle."""
    return Path(path).is_dir() and (Path(path) / META).is_file()


def read_bundle(path: str | Path) -> Bundle:
    """The bundle in the variant folder `path` (profiler/perf/<HW>/<org>/<model>/<variant>/)."""
    folder = Path(path)
    if not is_bundle(folder):
        raise SpecError(str(folder), "", f"not an LLMServingSim bundle: no {META} in it (give the variant folder, "
                        "profiler/perf/<HW>/<org>/<model>/<variant>/)")
    source = str(folder / META)
    meta = read_yaml(folder / META, "bundle meta.yaml")
    if not isinstance(meta, dict):
        raise SpecError(source, "", "must be a mapping (the profiler's meta.yaml)")
    tps = _degrees(meta, source)
    engine = _mapping(meta, "engine_effective", source)
    overrides = _mapping(engine, "hf_overrides", source, "engine_effective.")
    variant = _text(meta, "variant", source)
    if variant not in SIXTEEN_BIT:
        raise SpecError(source, "variant", f"{variant!r}: a servesim profile is measured at 16 bits; valid: "
                        f"{list(SIXTEEN_BIT)}")
    return Bundle(folder, _text(meta, "gpu", source), _text(meta, "model", source), _text(meta, "architecture", source),
                  variant, positive_int(engine.get("block_size"), source, "engine_effective.block_size"),
                  positive_int(overrides.get("num_attention_heads"), source,
                               "engine_effective.hf_overrides.num_attention_heads"),
                  positive_int(overrides.get("num_key_value_heads"), source,
                               "engine_effective.hf_overrides.num_key_value_heads"),
                  tps[-1], {tp: read_tp(folder / f"tp{tp}", tp) for tp in tps},
                  {key: str(meta[key]) for key in ("vllm_version", "cuda_version", "profiled_at",
                                                   "measurement_iterations") if key in meta})


def read_tp(folder: Path, tp: int) -> TpTables:
    """One tp<N> folder: dense.csv and per_sequence.csv required, attention.csv and moe.csv where present."""
    if not folder.is_dir():
        raise SpecError(str(folder), "", f"not found: meta.yaml's tp_degrees lists {tp}")
    dense = read_table(folder / "dense.csv")
    per_sequence = read_table(folder / "per_sequence.csv")
    attention = read_table(folder / "attention.csv") if (folder / "attention.csv").exists() else None
    moe = read_table(folder / "moe.csv") if (folder / "moe.csv").exists() else None
    return TpTables(tp, dense, per_sequence, attention, moe)


def read_table(path: Path) -> pd.DataFrame:
    """One of the bundle's CSVs (TABLES, by its file name): its keys as whole numbers (its layer one of LAYERS'), its
    time in seconds, positive; rows measured twice averaged."""
    import pandas as pd

    source, keys, layers = str(path), TABLES[path.name], LAYERS.get(path.name, ())
    table = read_csv(path, f"LLMServingSim {path.name}")
    check_columns(table, (*keys, "time_us"), source, f"LLMServingSim {path.name}")
    if table.empty:
        raise SpecError(source, "", "no rows")
    out = pd.DataFrame({key: _key(table, key, source, layers) for key in keys})
    out["time_s"] = checked_column(table, "time_us", source, low=0, low_open=True) * US
    if path.name == "attention.csv":
        _some_work(out, source)
    return out.groupby(list(keys), as_index=False, sort=False)["time_s"].mean()


def _key(table: pd.DataFrame, key: str, source: str, layers: tuple[str, ...]) -> np.ndarray:
    if key != "layer":
        # an axis of attention.csv may be 0 (no prefill, no decodes); a count of tokens or sequences may not
        low = 0 if key in TABLES["attention.csv"] else 1
        return checked_column(table, key, source, low=low, whole=True)
    names = table[key].astype(str).str.strip()
    bad = ~names.isin(layers).to_numpy()
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise SpecError(source, row_where(row, key), f"{table[key].iloc[row]!r} is not a layer this reader knows; "
                        f"valid: {list(layers)}")
    return names.to_numpy()


def _some_work(rows: pd.DataFrame, source: str) -> None:
    """An attention row runs a prefill chunk, decodes, or both; a decode reads some context."""
    empty = (rows["prefill_chunk"] == 0) & (rows["n_decode"] == 0)
    blind = (rows["n_decode"] > 0) & (rows["kv_decode"] == 0)
    for bad, column, why in ((empty, "n_decode", "neither a prefill chunk nor a decode: not a measurement"),
                             (blind, "kv_decode", "a decode reads at least one token of context")):
        if bad.any():
            row = int(np.flatnonzero(bad.to_numpy())[0])
            raise SpecError(source, row_where(row, column), f"{rows[column].iloc[row]}: {why}")


def _degrees(meta: dict, source: str) -> list[int]:
    degrees = meta.get("tp_degrees")
    if not isinstance(degrees, list) or not degrees:
        raise SpecError(source, "tp_degrees", f"must list the tensor-parallel degrees profiled, got {degrees!r}")
    return [positive_int(tp, source, "tp_degrees") for tp in degrees]


def _mapping(raw: dict, key: str, source: str, prefix: str = "") -> dict:
    value = raw.get(key)
    if not isinstance(value, dict):
        raise SpecError(source, prefix + key, f"must be a mapping, got {value!r}")
    return value


def _text(raw: dict, key: str, source: str) -> str:
    value = raw.get(key)
    if not isinstance(value, str) or not value.strip():
        raise SpecError(source, key, f"must be non-empty text, got {value!r}")
    return value.strip()
