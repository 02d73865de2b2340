"""The shipped profiles made from LLMServingSim's bundles (calibrate/profiles/rtx-pro-6000-server.yaml, rtx-4090.yaml):
they load as transfer cost models on their GPU and price a Llama-3.1-8B decode within their own held-out error of
what the bundle measured for that shape (its rows thinned into tests/calibrate/fixtures/llmservingsim/)."""
from pathlib import Path

import pytest

from calibrate.cost_models.profile_model import transferred_roofline
from calibrate.fitting.profile_file import load_profile
from calibrate.hardware.hardware import hardware_for_device, load_hardware
from calibrate.tables.llmservingsim_bundle import read_table
from engine.core.batch import Batch
from engine.specs.loader import load_model_spec

ROOT = Path(__file__).resolve().parents[2]
PROFILES = ROOT / "calibrate" / "profiles"
ROWS = Path(__file__).resolve().parent / "fixtures" / "llmservingsim"
SHIPPED = {"rtx-pro-6000-server": "RTXPRO6000", "rtx-4090": "RTX4090"}
LAYER_MODULES = ("qkv_proj", "o_proj", "gate_up_proj", "down_proj", "act_fn", "rotary_emb")


def measured_decode(folder: Path, batch: int, history: int) -> float:
    """Seconds of the bundle's rows for a Llama-3.1-8B decode (32 layers, device only): per layer its modules, its
    two norms (the row is their mean) and its attention; once the embedding, the final norm and the LM head."""
    dense = read_table(folder / "dense.csv").set_index(["layer", "tokens"])["time_s"]
    head = read_table(folder / "per_sequence.csv").set_index(["layer", "sequences"])["time_s"]
    attention = read_table(folder / "attention.csv").set_index(["n_decode", "kv_decode"])["time_s"]
    norms = 2 * dense[("layernorm", batch)]
    layer = sum(dense[(m, batch)] for m in LAYER_MODULES) + norms + attention[(batch, history)]
    return 32 * layer + dense[("embedding", batch)] + dense[("final_layernorm", batch)] + head[("lm_head", batch)]


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_the_profile_is_its_gpus_with_its_provenance(name):
    profile = load_profile(PROFILES / f"{name}.yaml")
    assert hardware_for_device(profile.device_name) == name and profile.host_model == "vllm-0.19"
    assert profile.provenance["source"] == ("casys-kaist/LLMServingSim profiler/perf at commit "
                                            "5daddb21a545658d5150b535712d0494584b5278")
    assert profile.provenance["licence"] == "MIT (calibrate/profiles/LICENSE.llmservingsim)"
    assert all(path.startswith(f"profiler/perf/{SHIPPED[name]}/") for path in profile.provenance["bundles"])
    assert profile.command.startswith("servesim calibrate import ") and profile.attention["measured_on"] == name
    assert "CASYS Lab at KAIST" in (PROFILES / "LICENSE.llmservingsim").read_text()


@pytest.mark.parametrize("name", sorted(SHIPPED))
@pytest.mark.parametrize("batch", [1, 16, 64])
@pytest.mark.parametrize("history", [512, 4096])
def test_a_llama_decode_is_priced_within_the_held_out_error_of_its_measured_rows(name, batch, history):
    path = PROFILES / f"{name}.yaml"
    profile = load_profile(path)
    cost = transferred_roofline(path, None, load_model_spec("llama-3.1-8b"), load_hardware(name), 1, 2, 16)
    cost.charge_host = False  # the bundles time the device alone
    assert "measured in" in cost.source and "decode in waves" in cost.source
    # a decode of `history` tokens of history reads history + 1 keys: servesim's context is the sequence's length
    priced = cost.iteration_time(Batch(decode_seq_ids=list(range(batch)), decode_context_lens=[history + 1] * batch))
    measured = measured_decode(ROWS / SHIPPED[name] / "meta-llama" / "Llama-3.1-8B" / "bf16" / "tp1", batch, history)
    # the sampler is left out of both: servesim prices none. The tolerance is the profile's own claim: the linear
    # part's held-out error per iteration, p95 (RTX PRO 6000 Server 20%, RTX 4090 10%)
    assert priced == pytest.approx(measured, rel=profile.heldout_p95_ape)
