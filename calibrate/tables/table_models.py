"""How many layers the models of Vidur's per-operation tables have: a table times one layer, and an
iteration is its layers x one layer's operations + the embedding lookup.

The counts are the models' own published configurations (num_hidden_layers), as Vidur's
vidur/config/model_config.py lists them.
"""
from __future__ import annotations

from engine.errors import SpecError

LAYERS = {
    "Qwen_Qwen-72B": 80,
    "codellama_CodeLlama-34b-Instruct-hf": 48,
    "internlm_internlm-20b": 60,
    "meta-llama_Llama-2-7b-hf": 32,
    "meta-llama_Llama-2-70b-hf": 80,
    "meta-llama_Meta-Llama-3-8B": 32,
    "meta-llama_Meta-Llama-3-70B": 80,
    "microsoft_phi-2": 32,
}


def layers_of(label: str, source: str, layers: dict[str, int] | None = None) -> int:
    """The layer count of the model a table measures (its label, calibrate/tables/op_table.table_label)."""
    known = LAYERS if layers is None else layers
    if label not in known:
        raise SpecError(source, "model", f"no layer count for {label!r}: an iteration is layers x one layer's "
                        f"operations; known models: {sorted(known)}")
    return known[label]
