"""An engine model's mechanisms on the clock: asynchronous scheduling overlaps the host's work with the GPU's, CUDA
graphs pad an iteration's linear layers to a captured size; each moves the time as its source says, and switched off
gives the cost model's own time back, to the bit (calibrate/clock/engine_clock.py)."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import yaml

from calibrate.clock.costmodel import decode_shapes
from calibrate.clock.engine_clock import EngineCostModel
from calibrate.clock.roofline import RooflineCostModel
from calibrate.cost_models.registry import Clock, CostModelConfig, build_cost_model
from calibrate.hardware.hardware import load_hardware
from calibrate.parts.cuda_graphs import padded_tokens, vllm_capture_sizes
from engine.core.batch import BatchShape
from engine.errors import SpecError
from engine.specs.loader import load_model_spec

# the sizes vLLM 0.19 resolved for a max_num_seqs 256, max_num_batched_tokens 2048 server (an RTX 4090 run's
# resolved compilation_config.cudagraph_capture_sizes, LLMServingSim's bench/examples/RTX4090/Llama-3.1-8B meta.json)
RESOLVED_0_19 = [1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64, 72, 80, 88, 96, 104, 112, 120, 128, 136, 144, 152, 160, 168,
                 176, 184, 192, 200, 208, 216, 224, 232, 240, 248, 256, 272, 288, 304, 320, 336, 352, 368, 384, 400,
                 416, 432, 448, 464, 480, 496, 512]
HOST = {"per_iteration_s": 2e-3, "per_sequence_s": 1e-5, "per_prefill_token_s": 0.0}
MODEL = load_model_spec("llama-3-8b")
H100 = load_hardware("h100-sxm")


def roofline(host=HOST, tp: int = 1) -> RooflineCostModel:
    return RooflineCostModel(MODEL, H100, tp, host=dict(host) if host is not None else None)


def decodes(n: int, context: int = 900) -> BatchShape:
    return BatchShape((), tuple(context + i for i in range(n)))


def test_capture_sizes_are_vllms():
    assert list(vllm_capture_sizes(256, 2048)) == RESOLVED_0_19
    assert vllm_capture_sizes(128, 2048)[-1] == 256 and vllm_capture_sizes(1024, 8192)[-1] == 512
    assert vllm_capture_sizes(256, 128)[-1] == 128, "never past the token budget"
    sizes = vllm_capture_sizes(256, 2048)
    assert [padded_tokens(n, sizes) for n in (1, 3, 5, 9, 255, 257, 512, 513, 2048)] == [
        1, 4, 8, 16, 256, 272, 512, 513, 2048]


def test_overlap_takes_the_longer_of_device_and_host_and_off_is_the_sum_to_the_bit():
    base = roofline()
    for batch in (decodes(1), decodes(64), BatchShape((700,), tuple(range(500, 532)))):
        device, host = base.device_time(batch), base.host_time(batch)
        overlapped = EngineCostModel(base, overlap=True)
        assert overlapped.iteration_time(batch) == pytest.approx(max(device, host), rel=1e-12)
        assert EngineCostModel(base, overlap=False).iteration_time(batch) == base.iteration_time(batch)
    small = decodes(1)  # a batch of one on an H100: 8B's weights read in ~5 ms, the host's 2 ms hidden behind them
    assert EngineCostModel(base, overlap=True).iteration_time(small) < base.iteration_time(small)


def test_graph_padding_runs_the_linear_layers_at_the_captured_size_and_off_gives_the_eager_time_back():
    base = roofline(host=None)
    sizes = vllm_capture_sizes(256, 2048)
    padded = EngineCostModel(base, overlap=False, graph_sizes=sizes)
    at_size = decodes(64)
    assert padded.iteration_time(at_size) == base.iteration_time(at_size), "a captured size pads nothing"
    # a prompt of 290 tokens runs as 304: 14 rows more through every linear layer (compute-bound there, so they
    # cost time; in the memory-bound decode regime padding rows are nearly free), but not through attention
    between = BatchShape((290,), ())
    extra = base.token_time(304, 1) - base.token_time(290, 1)
    assert extra > 0 and padded.iteration_time(between) == base.iteration_time(between) + extra
    eager = EngineCostModel(base, overlap=False, graph_sizes=())
    assert eager.iteration_time(between) == base.iteration_time(between)
    long = BatchShape((600,), ())  # past the largest capture: eager, no padding
    assert padded.iteration_time(long) == base.iteration_time(long)
    assert padded.breakdown(between).device["graph_padding"] == extra


@pytest.mark.parametrize("overlap", [False, True])
@pytest.mark.parametrize("steps", [5, 600])  # a stretch on Python floats, and one on numpy arrays
def test_a_decode_stretch_is_priced_as_its_steps_one_by_one(overlap, steps):
    cost = EngineCostModel(roofline(), overlap=overlap, graph_sizes=vllm_capture_sizes(256, 2048))
    batch = decodes(37)
    one_by_one = [cost.iteration_time(shape) for shape in decode_shapes(batch, steps)]
    assert cost.decode_iteration_times(batch, steps).tolist() == one_by_one
    assert cost.decode_step_time_list(batch, steps) == one_by_one


def engine_model(tmp_path: Path, **engine) -> Path:
    path = tmp_path / "engine.yaml"
    path.write_text(yaml.safe_dump({
        "format": "servesim-host-model/1", "name": "test-engine", "measured": "a test engine: nothing measured",
        "source": "this test", "licence": "none", "terms": {"step": {"per_iteration_s": 1e-3}},
        **({"engine": engine} if engine else {})}))
    return path


def test_the_registry_applies_an_engine_models_mechanisms_where_the_system_asks(tmp_path):
    clock = Clock(MODEL, H100, max_num_seqs=256, max_num_batched_tokens=2048)
    plain = build_cost_model(CostModelConfig("roofline", host=engine_model(tmp_path)), clock)
    assert not isinstance(plain, EngineCostModel), "an engine model without mechanisms prices in series"
    path = engine_model(tmp_path, overlap=True, cuda_graphs=True)
    synchronous = build_cost_model(CostModelConfig("roofline", host=path), clock)
    assert isinstance(synchronous, EngineCostModel) and not synchronous.overlap and synchronous.graph_sizes
    overlapped = build_cost_model(CostModelConfig("roofline", host=path), replace(clock, async_scheduling=True))
    assert isinstance(overlapped, EngineCostModel) and overlapped.overlap
    eager = build_cost_model(CostModelConfig("roofline", host=path, cuda_graphs=False), clock)
    assert not isinstance(eager, EngineCostModel)
    batch = decodes(65)
    assert eager.iteration_time(batch) == plain.iteration_time(batch), "both off: the kind's own time, to the bit"
    assert "asynchronous scheduling" in overlapped.source and "CUDA graphs" in overlapped.source


def test_a_bad_engine_section_is_one_line_naming_the_key(tmp_path):
    from calibrate.parts.host_model import load_host_model

    with pytest.raises(SpecError, match="engine.overlap"):
        load_host_model(engine_model(tmp_path, overlap="yes"))
    with pytest.raises(SpecError, match="engine.speculation"):
        load_host_model(engine_model(tmp_path, speculation=True))


def test_breakdown_under_overlap_adds_up_to_the_iteration():
    cost = EngineCostModel(roofline({"per_iteration_s": 0.05, "per_sequence_s": 0.0, "per_prefill_token_s": 0.0}),
                           overlap=True, graph_sizes=vllm_capture_sizes(256, 2048))
    for batch in (decodes(3), decodes(200)):
        parts = cost.breakdown(batch)
        assert parts.total_s == pytest.approx(cost.iteration_time(batch), rel=1e-12)
        assert np.isclose(sum(parts.host.values()), parts.host_s)


def test_serial_host_terms_stay_in_series_under_overlap(tmp_path):
    path = tmp_path / "serial.yaml"
    path.write_text(yaml.safe_dump({
        "format": "servesim-host-model/1", "name": "serial-engine", "measured": "a test engine: nothing measured",
        "source": "this test", "licence": "none",
        "terms": {"schedule": {"per_iteration_s": 1e-3}, "sync": {"per_iteration_s": 4e-4, "per_sequence_s": 1e-6}},
        "engine": {"overlap": True, "serial": ["sync"]}}))
    clock = Clock(MODEL, H100, async_scheduling=True)
    cost = build_cost_model(CostModelConfig("roofline", host=path), clock)
    base = build_cost_model(CostModelConfig("roofline", host=path), replace(clock, async_scheduling=False))
    batch = decodes(10)
    device, serial = base.device_time(batch), 4e-4 + 10 * 1e-6
    assert cost.iteration_time(batch) == pytest.approx(max(device, 1e-3) + serial, rel=1e-12)
    assert cost.host_time(batch) == pytest.approx(serial, rel=1e-9), "the overlapped terms hide behind the device"
    with pytest.raises(SpecError, match="engine.serial"):
        from calibrate.parts.host_model import load_host_model

        path.write_text(path.read_text().replace("- sync", "- launch"))
        load_host_model(path)


def test_vllms_custom_all_reduce_prices_small_messages_as_measured_and_ncclss_above(tmp_path):
    from calibrate.parts.custom_all_reduce import load_custom_all_reduce

    custom = load_custom_all_reduce()
    assert custom.applies(H100, 4) and custom.applies(load_hardware("rtx-pro-6000"), 2)
    assert not custom.applies(load_hardware("l40s"), 4), "more than two GPUs without NVLink: NCCL"
    assert not custom.applies(H100, 3) and not custom.applies(H100, 1)
    model = load_model_spec("llama-3-70b")
    clock = Clock(model, H100, tensor_parallel=4)
    nccl = build_cost_model(CostModelConfig("roofline", host=engine_model(tmp_path)), clock)
    path = engine_model(tmp_path, custom_all_reduce=True)
    vllm = build_cost_model(CostModelConfig("roofline", host=path), clock)
    batch = decodes(64)  # 64 tokens x 8192 x 2 bytes: 1 MiB a message, on the custom kernel's table
    message = 64 * model.hidden_size * 2
    per_message = custom.table.time(4, message)  # measured on H100s: no carry
    layers = model.num_layers
    assert vllm.breakdown(batch).device["all_reduce"] == pytest.approx(2 * layers * per_message, rel=1e-12)
    assert nccl.breakdown(batch).device["all_reduce"] != vllm.breakdown(batch).device["all_reduce"]
    big = BatchShape((1000,), ())  # 16 MB a message: past the 8 MiB buffer, NCCL's (here the ring formula)
    ring = nccl.breakdown(big).device["all_reduce"]
    assert vllm.breakdown(big).device["all_reduce"] == pytest.approx(ring, rel=1e-12)
    off = build_cost_model(CostModelConfig("roofline", host=engine_model(tmp_path, custom_all_reduce=False)), clock)
    assert off.iteration_time(batch) == nccl.iteration_time(batch), "switched off: NCCL's time to the bit"


def test_the_padding_priced_before_an_all_reduce_changes_is_priced_again_after():
    # a roofline keeps each token count's time (token_time) until one of its terms changes, as use_all_reduce does
    class Table:
        def covers(self, tp: int) -> bool:
            return True

        def time(self, tp: int, size_bytes: float) -> float:
            return 1e-3 + size_bytes * 1e-12

    before, fresh = roofline(tp=2), roofline(tp=2)
    padded = EngineCostModel(before, overlap=False, graph_sizes=(8, 16))
    batch = decodes(5)  # padded to 8
    first = padded.padding_time(batch)
    assert first > 0 and first == EngineCostModel(fresh, overlap=False, graph_sizes=(8, 16)).padding_time(batch)
    before.use_all_reduce(Table())
    fresh.use_all_reduce(Table())
    again = padded.padding_time(batch)
    assert again != first and again == EngineCostModel(fresh, overlap=False, graph_sizes=(8, 16)).padding_time(batch)
