"""Each family the engine builds against an independent float64 forward written from Hugging Face's layouts
(hf_reference.py): the dense forward's logits, and the paged engine's greedy tokens; and every family's
weights counted against the spec's own count."""
import dataclasses

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("engine.core.factory")

from hf_reference import reference_logits  # noqa: E402
from runtime_reference import BACKEND, StepRecorder, dense_logits  # noqa: E402

from engine.core.system import SystemSpec  # noqa: E402
from engine.errors import SpecError  # noqa: E402
from engine.runtime.engine import Engine  # noqa: E402
from engine.runtime.model import ENGINE_FAMILIES, Decoder, build_decoder  # noqa: E402
from engine.specs.loader import FAMILIES, load_model_spec  # noqa: E402

PROMPTS = [[5, 9, 2, 7, 1], list(range(40, 53)), [3]]


def test_the_dense_forward_is_the_reference_forward(spec):
    model = build_decoder(spec, "cpu", torch.float32, 0)
    tokens = list(range(7, 7 + 3 * 11, 3))
    torch.testing.assert_close(dense_logits(model, tokens), reference_logits(model, tokens), atol=1e-4, rtol=0)


def test_paged_engine_logits_are_the_reference_forwards(spec):
    engine = Engine(spec, SystemSpec("vLLM", "vllm", block_size=4), "cpu", seed=0, num_gpu_blocks=64,
                    num_cpu_blocks=0, attention_backend=BACKEND)
    steps = StepRecorder(engine.runner)
    engine.generate(PROMPTS, max_new_tokens=6)
    for seq_id, recorded in steps.steps.items():
        reference = reference_logits(engine.runner.model, steps.full_tokens(seq_id))
        for prefix, logits, token in recorded:
            torch.testing.assert_close(logits, reference[len(prefix) - 1], atol=1e-4, rtol=0)
            assert token == int(reference[len(prefix) - 1].argmax())


@pytest.mark.parametrize("name", ["opt-tiny", "llama-tiny", "qwen2-tiny", "phi-tiny", "mixtral-tiny", "qwen3-tiny",
                                  "qwen3-moe-tiny", "phi-2", "qwen2.5-7b", "mixtral-8x7b", "llama-3-8b", "opt-1.3b",
                                  "qwen3-32b", pytest.param("qwen3-30b-a3b", marks=pytest.mark.slow)])
def test_the_decoders_weights_are_the_specs_count(name):
    # built on the meta device: shapes only, no memory, so the full-size models are counted too
    spec = load_model_spec(name)
    with torch.device("meta"):
        model = Decoder(spec)
    assert sum(p.numel() for p in model.parameters()) == spec.num_params()


def test_every_family_the_loader_knows_is_built():
    assert sorted(ENGINE_FAMILIES) == sorted(FAMILIES)


# what each family adds, taken away: the reference must then disagree with the engine (it is not blind to it)
WITHOUT = {"opt-tiny": dict(position="rotary"), "llama-tiny": dict(rope_theta=500.0),
           "qwen2-tiny": dict(rope_theta=10000.0), "phi-tiny": dict(partial_rotary_factor=1.0),
           "mixtral-tiny": dict(experts_per_token=1), "qwen3-tiny": dict(family="llama"),
           "qwen3-moe-tiny": dict(experts_per_token=1)}


def test_the_reference_sees_what_each_family_adds(spec):
    model = build_decoder(spec, "cpu", torch.float32, 0)
    tokens = [4, 8, 15, 16, 23, 42]
    other = dataclasses.replace(spec, **WITHOUT[spec.name])
    difference = (reference_logits(model, tokens, other) - dense_logits(model, tokens)).abs().max()
    assert difference > 1e-3


def test_an_unknown_family_is_refused_naming_the_ones_built():
    spec = dataclasses.replace(load_model_spec("llama-tiny"), family="gpt2")
    with pytest.raises(SpecError, match=r"family: the engine builds \['opt', 'llama', 'qwen2', 'phi', 'mixtral', "
                                        r"'qwen3'\]"):
        build_decoder(spec, "cpu", torch.float32, 0)
