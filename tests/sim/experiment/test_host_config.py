"""cost_model.host: a config that names a host model is charged exactly that host time per iteration."""
from __future__ import annotations

import shutil
from dataclasses import replace

import numpy as np
import pytest

import sim.core.fleet
from calibrate.parts.host import host_time
from calibrate.parts.host_model import available_host_models, host_model_path, load_host_model
from engine.core.batch import Batch
from engine.errors import SpecError
from sim.core.fast_forward import FastForward
from sim.core.simulate import simulate
from sim.experiment.config import load_experiment
from sim.experiment.run import make_cost_model
from tests.helpers.simulation import random_trace

ROOT = host_model_path("vllm-a100-2024-05").parents[2]
BASE = ("model: {model}\nhardware: a100-40gb\ntensor_parallel: {tp}\nkv_cache_gib: 12\n"
        "workload: {{dataset: sharegpt-standin, arrival: poisson, duration_s: 120}}\n"
        "systems: [vllm]\nrates: [1.0]\n")
PROFILE = ROOT / "calibrate" / "profiles"
KINDS = {  # each kind's mapping, its host key (if any) in place of {host}
    # no cost per KV block read: a decode's price is then its contexts' sum's, which an iteration's record keeps
    "roofline": "{{kind: roofline, block_read_overhead_tokens: 0{host}}}",
    "transfer": f"{{{{kind: transfer, path: {PROFILE}/a100-80gb-linear.yaml{{host}}}}}}",
    "profile": f"{{{{kind: profile, path: {PROFILE}/cpu-opt-125m.yaml{{host}}}}}}",
    # fitted on two GPUs, with measured attention: on the A100-40GB, by regime
    "transfer-two-gpus": f"{{{{kind: transfer, path: {PROFILE}/a100-80gb.yaml{{host}}}}}}",
}
BATCHES = [Batch(decode_seq_ids=list(range(8)), decode_context_lens=[300 + 7 * i for i in range(8)]),
           Batch(prefill_seq_ids=[0, 1], prefill_lens=[120, 33]),
           Batch(prefill_seq_ids=[9], prefill_lens=[64], decode_seq_ids=[1, 2, 3], decode_context_lens=[10, 90, 400])]


def experiment(tmp_path, kind: str, host: str | None, tp: int = 1):
    model = "opt-125m" if kind == "profile" else "opt-13b"
    path = tmp_path / f"{kind}-{host}-{tp}.yaml".replace("/", "_")
    extra = f", host: {host}" if host is not None else ""
    path.write_text(BASE.format(model=model, tp=tp) + f"cost_model: {KINDS[kind].format(host=extra)}\n")
    return load_experiment(path)


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("name", ["vllm-a100-2024-05", "vllm-v1-2026"])
def test_a_named_host_model_is_charged_exactly_in_series_with_the_device(tmp_path, kind, name):
    exp = experiment(tmp_path, kind, name)
    system = exp.systems[0]
    cost = make_cost_model(exp, system)
    device = make_cost_model(experiment(tmp_path, kind, None), system)
    device.charge_host = False  # the same cost model without any host work: its device part alone
    terms = load_host_model(name).resolve(exp.model, exp.tensor_parallel)
    for batch in BATCHES:
        charged = host_time(terms, batch.num_seqs, batch.num_prefill_tokens)
        assert cost.host_time(batch) == charged
        assert cost.iteration_time(batch) == device.iteration_time(batch) + charged  # to the bit
    assert cost.source.endswith(f"; host: {name} ({load_host_model(name).what})")
    # without cost_model.host, the kind's own host work: none, the profile's measured one, or its default host model
    assert "host: " not in device.source or device.source.endswith("the profile's default host model")


def test_the_host_time_follows_the_model_and_the_workers(tmp_path):
    batch = BATCHES[0]
    one = make_cost_model(exp := experiment(tmp_path, "roofline", "vllm-a100-2024-05"), exp.systems[0])
    four = experiment(tmp_path, "roofline", "vllm-a100-2024-05", tp=4)
    assert make_cost_model(four, four.systems[0]).host_time(batch) > one.host_time(batch) + 5e-3


def test_a_host_model_by_path_is_resolved_beside_the_config(tmp_path):
    shutil.copy(host_model_path("vllm-v1-2026"), tmp_path / "mine.yaml")
    exp = experiment(tmp_path, "roofline", "mine.yaml")
    assert exp.cost_model.host == tmp_path / "mine.yaml"
    assert "host: vllm-v1-2026" in make_cost_model(exp, exp.systems[0]).source


def test_an_unknown_host_name_is_a_one_line_error_naming_the_key(tmp_path):
    with pytest.raises(SpecError) as err:
        experiment(tmp_path, "roofline", "vllm-a100-2099")
    message = str(err.value)
    assert err.value.key == "cost_model.host" and "\n" not in message
    assert "unknown host model 'vllm-a100-2099'" in message
    assert all(name in message for name in available_host_models())


@pytest.mark.parametrize("value, message", [("3", "must be a shipped host model's name"),
                                            ("missing.yaml", "missing.yaml")])
def test_a_bad_host_value_is_refused_naming_the_key(tmp_path, value, message):
    with pytest.raises(SpecError, match=message) as err:
        experiment(tmp_path, "transfer", value)
    assert err.value.key == "cost_model.host"


def test_a_malformed_host_model_file_is_refused_when_the_config_is_read(tmp_path):
    (tmp_path / "bad.yaml").write_text("format: servesim-host-model/1\nname: x\n")
    with pytest.raises(SpecError, match="measured: missing") as err:
        experiment(tmp_path, "roofline", "bad.yaml")
    assert err.value.source == str(tmp_path / "bad.yaml")


def test_no_host_key_leaves_the_cost_model_as_it_was(tmp_path):
    exp = experiment(tmp_path, "roofline", None)
    assert exp.cost_model.host is None
    cost = make_cost_model(exp, exp.systems[0])
    assert cost.host is None and cost.host_time(BATCHES[0]) == 0.0


# --- a simulation, step by step and fast-forwarded ----------------------------------------------------------
class Forwarded(FastForward):
    """FastForward that keeps its last instance, so the test can see the fast path was taken."""

    last: Forwarded | None = None

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        Forwarded.last = self


def test_every_iteration_pays_the_named_host_time_in_both_paths(tmp_path, monkeypatch):
    """Each decode-only iteration's recorded duration is the device's price of its shape plus the host model's
    terms (to the clock's rounding: a duration is recorded as its end less its start), and both paths record
    the same bytes."""
    exp = experiment(tmp_path, "roofline", "vllm-a100-2024-05")
    model = replace(exp.model, max_seq_len=512)
    system = exp.systems[0]
    cost = make_cost_model(exp, system)
    device = make_cost_model(experiment(tmp_path, "roofline", None), system)
    trace = random_trace(3, count=60, rate=4.0)
    monkeypatch.setattr(sim.core.fleet, "FastForward", Forwarded)
    runs = {fast: simulate(trace, model, system, cost, 400, 256, rng=np.random.default_rng(0), fast_forward=fast)
            for fast in (False, True)}
    step, fast = (runs[f].iterations_frame() for f in (False, True))
    assert Forwarded.last is not None and Forwarded.last.num_forwarded > len(step) / 4
    assert fast.to_csv(index=False) == step.to_csv(index=False)
    assert runs[True].requests_frame().to_csv(index=False) == runs[False].requests_frame().to_csv(index=False)
    terms = load_host_model("vllm-a100-2024-05").resolve(exp.model, exp.tensor_parallel)
    decodes = step[(step.num_prefills == 0) & (step.num_swap_blocks == 0) & (step.num_copy_blocks == 0)]
    assert len(decodes) > 100
    for row in decodes.itertuples():
        n, total = int(row.num_decodes), int(row.sum_decode_context)
        batch = Batch(decode_seq_ids=list(range(n)), decode_context_lens=_lengths(n, total))
        priced = cost.iteration_time(batch)
        assert priced == device.iteration_time(batch) + host_time(terms, n, 0)
        assert row.duration_s == pytest.approx(priced, rel=1e-12, abs=0)


def _lengths(n: int, total: int) -> list[int]:
    """n decode contexts summing to `total` (without a cost per block read, the roofline prices their sum)."""
    return [total // n + (1 if i < total % n else 0) for i in range(n)]
