"""Every system key a user writes is read by that system: one its kind or prefill policy would ignore is refused,
naming the key and why, never accepted and silently dropped. A preset's own values and a key left out are never
held against a system."""
from __future__ import annotations

from dataclasses import fields

import pytest

from engine.core.system import PAPER_SYSTEMS, SystemSpec
from engine.errors import SpecError
from engine.specs.loader import system_from_dict

CHUNKED = {"preset": "vllm", "prefill_policy": "chunked"}
SEPARATE = {"preset": "vllm", "prefill_policy": "separate"}


@pytest.mark.parametrize("system, key, words", [
    # the prompt-only iterations' keys, on vLLM's other policies and on the reservation systems
    ({**CHUNKED, "max_paddings": 64}, "max_paddings", "this system's prefill_policy is 'chunked'"),
    ({"preset": "vllm", "max_paddings": 256}, "max_paddings", "with prefill_policy 'separate'"),
    ({"preset": "orca-max", "max_paddings": 64}, "max_paddings", "this system is orca"),
    ({"preset": "fastertransformer", "max_paddings": 64}, "max_paddings", "with prefill_policy 'separate'"),
    ({**CHUNKED, "delay_factor": 0.5}, "delay_factor", "is vLLM v0.3's, with prefill_policy 'separate'"),
    ({"preset": "vllm", "delay_factor": 0}, "delay_factor", "remove the key"),  # written, even at its default
    # vLLM's allocator and scheduler keys, on systems that hold one reservation per sequence to completion
    ({"preset": "orca-max", "preemption": "swap"}, "preemption", "how vLLM gives a group's blocks back"),
    ({"preset": "fastertransformer", "preemption": "recompute"}, "preemption", "fastertransformer holds one"),
    ({"preset": "orca-pow2", "watermark": 0.1}, "watermark", "blocks kept free"),
    ({"preset": "fastertransformer", "max_num_batched_tokens": 4096}, "max_num_batched_tokens",
     "cap on the tokens of one iteration"),
    ({"preset": "orca-oracle", "max_num_batched_tokens": None}, "max_num_batched_tokens", "remove the key"),
    ({"preset": "orca-max", "prefix_caching": False}, "prefix_caching", "applies only to a vllm system"),
    ({"preset": "fastertransformer", "prefix_caching": True}, "prefix_caching", "applies only to a vllm system"),
    ({"preset": "orca-max", "prefill_policy": "mixed"}, "prefill_policy", "orca has its own scheduler only"),
    # the reservation systems' keys, on vLLM; FasterTransformer's B elsewhere
    ({"preset": "vllm", "reservation": "max"}, "reservation", "vllm allocates blocks as its sequences grow"),
    ({"preset": "vllm", "max_batch_size": 8}, "max_batch_size", "vllm batches up to max_num_seqs"),
    ({"preset": "orca-max", "max_batch_size": 8}, "max_batch_size", "FasterTransformer's batch size B"),
    ({"preset": "fastertransformer", "max_batch_size": 8, "max_num_seqs": 16}, "max_num_seqs",
     "max_batch_size is 8 (give one of the two)"),
])
def test_a_key_the_system_would_ignore_is_refused_with_the_reason(system, key, words):
    with pytest.raises(SpecError) as caught:
        system_from_dict(system, "exp.yaml", "systems[1]")
    text = str(caught.value)
    assert text.startswith(f"exp.yaml: systems[1].{key}: ") and words in text and "\n" not in text, text


@pytest.mark.parametrize("system", [
    {**SEPARATE, "max_paddings": 64, "delay_factor": 0.5, "preemption": "swap", "watermark": 0.05,
     "max_num_batched_tokens": 4096, "prefix_caching": True, "block_size": 32, "max_num_seqs": 64},
    {**CHUNKED, "max_num_batched_tokens": 1024, "prefix_caching": True},
    {"preset": "vllm", "prefill_policy": "mixed", "max_num_batched_tokens": None, "preemption": "recompute"},
    {"preset": "orca-max", "reservation": "pow2", "block_size": 32, "max_num_seqs": 64},
    {"preset": "fastertransformer", "reservation": "max", "max_batch_size": 8, "block_size": 8},
    {"preset": "fastertransformer", "max_batch_size": None, "max_num_seqs": 16},  # no B: max_num_seqs caps it
    {"name": "mine", "kind": "orca", "reservation": "oracle"},
])
def test_every_key_the_system_reads_is_taken(system):
    spec = system_from_dict(system, "exp.yaml", "systems[0]")
    assert all(getattr(spec, k) == v for k, v in system.items() if k != "preset")


@pytest.mark.parametrize("preset", sorted(PAPER_SYSTEMS))
def test_a_preset_is_never_held_to_the_keys_it_was_not_given(preset):
    # every preset carries every field (vLLM's preemption on Orca's too): only what a user wrote is checked
    assert system_from_dict({"preset": preset, "name": "renamed"}, "exp.yaml", "systems[0]").name == "renamed"
    PAPER_SYSTEMS[preset].validate("presets", preset)


def test_a_system_built_in_code_is_held_to_the_fields_it_changed():
    SystemSpec("FT", "fastertransformer", max_batch_size=8).validate("Engine", "system")
    with pytest.raises(SpecError, match=r"system\.preemption: is how vLLM gives"):
        SystemSpec("Orca", "orca", preemption="swap").validate("Engine", "system")
    with pytest.raises(SpecError, match=r"system\.max_paddings: is vLLM v0.2-v0.3's"):
        SystemSpec("v", "vllm", prefill_policy="chunked", max_num_batched_tokens=512,
                   max_paddings=8).validate("Engine", "system")


def test_every_key_is_read_by_some_system():
    """A field no system reads would be refused everywhere: each is taken by at least one kind and policy."""
    systems = [SystemSpec("v", "vllm", prefill_policy=p) for p in ("mixed", "separate", "chunked", "v1")]
    systems += [SystemSpec("o", "orca"), SystemSpec("f", "fastertransformer")]
    for field in fields(SystemSpec):
        assert any(s.unused_reason(field.name) is None for s in systems), field.name
