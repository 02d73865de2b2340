"""CUDA-graph decode on a CPU: the buckets, the padding, the static buffers, and that padded rows cannot
change the real ones. The capture itself is a GPU's (test_runtime_cuda.py); here an eager stand-in
replays the same forward over the same static buffers."""
import warnings

import pytest

torch = pytest.importorskip("torch")

from runtime_reference import BACKEND, StepRecorder  # noqa: E402

from engine.core.batch import Batch  # noqa: E402
from engine.core.blocks import blocks_for  # noqa: E402
from engine.core.system import SystemSpec  # noqa: E402
from engine.errors import SpecError  # noqa: E402
from engine.runtime.engine import Engine  # noqa: E402
from engine.runtime.graphs import (  # noqa: E402
    PAD_SLOT,
    DecodeGraphs,
    bucket_size,
    decode_buckets,
    eager_capture,
    pad_decode,
    padding_only,
    resolve_cuda_graphs,
)
from engine.runtime.inputs import HostInputs  # noqa: E402
from engine.runtime.options import engine_options_from_dict, parse_cuda_graphs  # noqa: E402
from engine.runtime.runner import ModelRunner  # noqa: E402

BLOCK = 4


def test_buckets_are_vllms():
    assert decode_buckets(1) == (1,)
    assert decode_buckets(5) == (1, 2, 4, 8)
    assert decode_buckets(20) == (1, 2, 4, 8, 16, 24)
    assert decode_buckets(256) == (1, 2, 4, *range(8, 257, 8)) and len(decode_buckets(256)) == 35
    assert [bucket_size(n) for n in (1, 2, 3, 4, 5, 8, 9, 16, 17, 250)] == [1, 2, 4, 4, 8, 8, 16, 16, 24, 256]
    with pytest.raises(ValueError, match="at least one"):
        bucket_size(0)


def decode_inputs(contexts, tables, tokens=None):
    host = HostInputs()
    for i, (context, table) in enumerate(zip(contexts, tables)):
        host.input_ids.append(tokens[i] if tokens else 7 + i)
        host.positions.append(context - 1)
        host.slot_mapping.append(table[(context - 1) // BLOCK] * BLOCK + (context - 1) % BLOCK)
        host.block_tables.append(table)
        host.context_lens.append(context)
        host.sample_ids.append((i,))
        host.logit_rows.append(i)
    return host


def test_padding_fills_the_bucket_with_rows_that_read_and_write_nothing():
    host = decode_inputs([5, 2, 9], [[3, 1], [4], [0, 2, 6]])
    padded = pad_decode(host, 4, width=5)
    assert padded.input_ids == host.input_ids + [0] and padded.positions == [4, 1, 8, 0]
    assert padded.slot_mapping == host.slot_mapping + [PAD_SLOT] and padded.context_lens == [5, 2, 9, 0]
    assert padded.block_tables == [[3, 1, -1, -1, -1], [4, -1, -1, -1, -1], [0, 2, 6, -1, -1], [-1] * 5]
    assert padding_only(2, 3).slot_mapping == [PAD_SLOT] * 2 and padding_only(2, 3).context_lens == [0, 0]
    with pytest.raises(ValueError, match="do not fit a bucket of 2"):
        pad_decode(host, 2, width=5)
    with pytest.raises(ValueError, match="wider than the graph's 2"):
        pad_decode(host, 4, width=2)
    host.prefill_lens.append(3)
    with pytest.raises(ValueError, match="decodes alone"):
        pad_decode(host, 4, width=5)


def attach_graphs(runner, max_batch: int = 8):
    """Decodes through DecodeGraphs on a CPU, with the eager stand-in for the capture."""
    runner.graphs = DecodeGraphs(runner.model, runner.cache.layers, max_batch,
                                 blocks_for(runner.spec.max_seq_len, BLOCK), BACKEND, capture=eager_capture)
    return runner


def runner_with_graphs(spec, max_batch: int = 8, num_gpu_blocks: int = 32):
    if spec.is_moe:  # row-for-row equality needs each matmul's shape fixed; an expert's batch follows routing
        pytest.skip("a mixture of experts decodes eagerly, never through graphs")
    return attach_graphs(ModelRunner(spec, "cpu", None, 0, num_gpu_blocks=num_gpu_blocks, num_cpu_blocks=4,
                                     block_size=BLOCK, attention_backend=BACKEND), max_batch)


@torch.inference_mode()
def test_padded_rows_cannot_change_the_real_rows(spec):
    runner = runner_with_graphs(spec)
    for layer in runner.cache.layers:  # a cache full of values, as a serving pool is
        layer.key.normal_(generator=torch.Generator().manual_seed(1))
        layer.value.normal_(generator=torch.Generator().manual_seed(2))
    graphs, host = runner.graphs, decode_inputs([5, 2, 9], [[3, 1], [4], [0, 2, 6]])
    width = graphs.buffers.width
    graphs.buffers.stage(pad_decode(host, 8, width))
    before = [layer.key.clone() for layer in runner.cache.layers]
    zeros = graphs.forward(8).clone()
    # the same real rows beside padding rows of other tokens and positions: the real rows' logits do not move
    noisy = pad_decode(host, 8, width)
    noisy = type(noisy)(noisy.input_ids[:3] + [11, 12, 13, 14, 15], noisy.positions[:3] + [3, 1, 4, 1, 5],
                        noisy.slot_mapping, noisy.block_tables, noisy.context_lens)
    graphs.buffers.stage(noisy)
    assert torch.equal(graphs.forward(8)[:3], zeros[:3])
    # and the padding wrote nothing: only the real rows' slots changed
    written = {s // BLOCK for s in host.slot_mapping}
    for old, layer in zip(before, runner.cache.layers):
        changed = (old != layer.key).flatten(1).any(dim=1).nonzero().flatten().tolist()
        assert set(changed) <= written
    # and the padded forward's real rows are the unpadded eager forward's
    input_ids, positions, meta, rows = host.to_device(runner.device, BACKEND)
    eager = runner.model.logits(runner.model(input_ids, positions, meta, runner.cache.layers)[rows])
    torch.testing.assert_close(zeros[:3], eager, atol=1e-5, rtol=0)


def test_graph_decodes_through_the_runner_equal_eager(spec):
    eager = Engine(spec, SystemSpec("vLLM", "vllm", block_size=BLOCK), "cpu", num_gpu_blocks=64,
                   num_cpu_blocks=8, attention_backend=BACKEND)
    graphs = Engine(spec, SystemSpec("vLLM", "vllm", block_size=BLOCK), "cpu", num_gpu_blocks=64,
                    num_cpu_blocks=8, attention_backend=BACKEND)
    attach_graphs(graphs.runner)
    steps = StepRecorder(graphs.runner)
    prompts = [[1, 2, 3], list(range(10, 30)), [5, 9, 4, 4, 8]]
    assert graphs.generate(prompts, 6, n=2) == eager.generate(prompts, 6, n=2)
    assert set(graphs.runner.graphs.graphs) == {8}, "six decodes (three prompts, two samples each) run in bucket 8"
    assert steps.check_against_dense(graphs.runner.model) > 0


def test_capture_all_captures_every_bucket_and_writes_nothing(opt_tiny):
    runner = runner_with_graphs(opt_tiny, max_batch=20)
    before = [layer.key.clone() for layer in runner.cache.layers]
    runner.capture_graphs()
    assert sorted(runner.graphs.graphs) == [1, 2, 4, 8, 16, 24]
    assert all(torch.equal(old, layer.key) for old, layer in zip(before, runner.cache.layers))


def test_only_decode_batches_within_the_largest_bucket_replay(opt_tiny):
    runner = runner_with_graphs(opt_tiny, max_batch=2, num_gpu_blocks=16)
    tokens = {0: [1, 2, 3], 1: [4, 5], 2: [6, 7, 8, 9]}
    tables = {0: [0], 1: [1], 2: [2]}
    runner.execute(Batch(prefill_seq_ids=[0], prefill_lens=[3], prefill_sample_ids=[(0,)]), tokens,
                   tables.__getitem__)
    assert not runner.graphs.graphs, "a prefill runs eagerly"
    runner.execute(Batch(decode_seq_ids=[0, 1, 2], decode_context_lens=[3, 2, 4]), tokens, tables.__getitem__)
    assert not runner.graphs.graphs, "three decodes do not fit the largest bucket (2): eager"
    runner.execute(Batch(decode_seq_ids=[0, 1], decode_context_lens=[3, 2]), tokens, tables.__getitem__)
    assert list(runner.graphs.graphs) == [2]


def test_graphs_are_off_on_a_cpu_and_asking_for_them_says_so(opt_tiny):
    cpu = torch.device("cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert resolve_cuda_graphs(None, cpu, "torch")[0] is False
        assert resolve_cuda_graphs(False, cpu, "torch")[0] is False
    with pytest.warns(RuntimeWarning, match="cuda_graphs: true is ignored .*CUDA device"):
        runner = ModelRunner(opt_tiny, "cpu", num_gpu_blocks=4, block_size=BLOCK, attention_backend=BACKEND,
                             cuda_graphs=True)
    assert runner.cuda_graphs is False and "eager" in runner.cuda_graphs_note
    on, why = resolve_cuda_graphs(None, torch.device("cuda", 0), "torch")
    assert not on and "Triton" in why
    assert resolve_cuda_graphs(None, torch.device("cuda", 0), "triton")[0] is True
    assert resolve_cuda_graphs(False, torch.device("cuda", 0), "triton")[0] is False
    with pytest.raises(ValueError, match="max_graph_batch"):
        ModelRunner(opt_tiny, "cpu", num_gpu_blocks=4, attention_backend=BACKEND, max_graph_batch=0)


def test_a_mixture_of_experts_decodes_eagerly_and_asking_for_graphs_says_why():
    # its layers read each expert's token count on the host, which a capture cannot hold
    cuda = torch.device("cuda", 0)
    on, why = resolve_cuda_graphs(None, cuda, "triton", moe=True)
    assert not on and "mixture of experts" in why
    with pytest.warns(RuntimeWarning, match="cuda_graphs: true is ignored .*mixture of experts"):
        assert resolve_cuda_graphs(True, cuda, "triton", moe=True)[0] is False


def test_engine_options_parse_and_name_the_bad_key():
    assert engine_options_from_dict(None, "v.yaml").cuda_graphs is None
    assert engine_options_from_dict({"cuda_graphs": False}, "v.yaml").cuda_graphs is False
    with pytest.raises(SpecError, match=r"v.yaml: engine.cuda_graphs: must be true, false or null, got 'yes'"):
        engine_options_from_dict({"cuda_graphs": "yes"}, "v.yaml")
    with pytest.raises(SpecError, match=r"engine.graphs: unknown key; valid keys are \['cuda_graphs'\]"):
        engine_options_from_dict({"graphs": True}, "v.yaml")
    with pytest.raises(SpecError, match="engine: must be a mapping"):
        engine_options_from_dict([True], "v.yaml")
    assert [parse_cuda_graphs(t) for t in ("on", "off", "auto")] == [True, False, None]
    with pytest.raises(ValueError, match="--cuda-graphs must be one of"):
        parse_cuda_graphs("yes")


def test_a_validation_file_takes_engine_options(tmp_path):
    from fidelity.config import load_validation

    text = (
        "experiment:\n  model: opt-tiny\n  hardware: a100-40gb\n  dtype_bytes: 4\n  kv_cache_gib: 0.01\n"
        "  cost_model: {kind: roofline}\n  workload: {dataset: sharegpt, arrival: poisson, duration_s: 1}\n"
        "  systems: [vllm]\n  rates: [1]\n  seeds: [0]\nvalidation: {calibrate: true}\nengine:\n  cuda_graphs: false\n")
    path = tmp_path / "v.yaml"
    path.write_text(text)
    assert load_validation(path).engine.cuda_graphs is False
    assert load_validation(path, ["engine.cuda_graphs=true"]).engine.cuda_graphs is True
    with pytest.raises(SpecError, match="engine.cuda_graphs: must be true, false or null"):
        load_validation(path, ["engine.cuda_graphs=2"])
