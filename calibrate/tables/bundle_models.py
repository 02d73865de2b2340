"""The servesim model an LLMServingSim bundle measured (calibrate/tables/llmservingsim_bundle.py), checked against the
shapes the bundle's meta.yaml says it ran.

A bundle names its model by Hugging Face id and gives its per-GPU shapes only as the overrides of the last
tensor-parallel degree it emulated (heads, KV heads, the MLP's width and the vocabulary, each divided by it); its
hidden width, head width and layer count are the model's own config's, which the servesim spec cites. So the id
picks a spec, and the overrides' query and KV heads must be the spec's over that degree: a bundle of other heads
under a known id is refused.
"""
from __future__ import annotations

from calibrate.tables.llmservingsim_bundle import META, Bundle
from engine.core.spec import ModelSpec
from engine.errors import SpecError
from engine.specs.loader import load_model_spec

# Hugging Face id -> servesim model (engine/specs/models/): the ids of the shipped bundles
MODELS = {"meta-llama/Llama-3.1-8B": "llama-3.1-8b", "Qwen/Qwen3-32B": "qwen3-32b",
          "Qwen/Qwen3-30B-A3B-Instruct-2507": "qwen3-30b-a3b"}


def bundle_label(bundle: Bundle) -> str:
    """The model as a per-operation table's label names it (org_model, as calibrate/tables/op_table.py does)."""
    return bundle.model.replace("/", "_")


def bundle_model(bundle: Bundle) -> ModelSpec:
    """The servesim spec of the bundle's model, its overrides checked against the spec's shapes."""
    source = str(bundle.path / META)
    if bundle.model not in MODELS:
        raise SpecError(source, "model", f"{bundle.model!r} has no servesim model spec here; known: {sorted(MODELS)}")
    spec = load_model_spec(MODELS[bundle.model])
    tp = bundle.last_tp
    expected = {"num_attention_heads": (bundle.heads, spec.num_heads),
                "num_key_value_heads": (bundle.kv_heads, spec.num_kv_heads)}
    for key, (given, whole) in expected.items():
        if given * tp != whole:
            raise SpecError(source, f"engine_effective.hf_overrides.{key}", f"{given} at tp {tp}: {spec.name} has "
                            f"{whole}, so {whole // tp} per GPU were expected")
    return spec
