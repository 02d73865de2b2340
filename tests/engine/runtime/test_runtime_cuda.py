"""The runtime on a GPU in half precision, with and without CUDA graphs: skipped where there is no CUDA."""
import warnings

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("engine.core.factory")
if not torch.cuda.is_available():
    pytest.skip("needs CUDA", allow_module_level=True)

from runtime_reference import StepRecorder  # noqa: E402

from engine.core.batch import Batch  # noqa: E402
from engine.core.system import SystemSpec  # noqa: E402
from engine.runtime.cache import PagedKVCache, kv_pool_blocks_that_fit  # noqa: E402
from engine.runtime.engine import Engine  # noqa: E402
from engine.runtime.runner import ModelRunner  # noqa: E402


@pytest.mark.parametrize("graphs", [True, False])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_engine_matches_dense(spec, dtype, graphs):
    engine = Engine(spec, SystemSpec("vLLM", "vllm", block_size=8), "cuda", dtype=dtype,
                    num_gpu_blocks=64, num_cpu_blocks=16, cuda_graphs=graphs)
    assert engine.runner.cuda_graphs is graphs, engine.runner.cuda_graphs_note
    steps = StepRecorder(engine.runner)
    outputs = engine.generate([[1, 2, 3], list(range(10, 30))], 6, n=2, sampling="random")
    assert [len(o) for o in outputs] == [6] * 4
    steps.check_against_dense(engine.runner.model, atol=5e-2)


def test_pool_sizing_on_the_device(opt_tiny):
    expected = kv_pool_blocks_that_fit(opt_tiny, 16, torch.float16, "cuda", memory_fraction=0.01)
    runner = ModelRunner(opt_tiny, "cuda", num_gpu_blocks=None, num_cpu_blocks=4, block_size=16,
                         memory_fraction=0.01)
    assert runner.num_gpu_blocks == pytest.approx(expected, rel=0.05)
    assert min(runner.time_batch([64], [100, 200], repeats=2)) > 0
    free, _ = torch.cuda.mem_get_info()
    with pytest.raises(ValueError, match="only .* GiB is free"):
        PagedKVCache(opt_tiny, 2 * free // 1024 + 1, 0, 16, "cuda", torch.float16)


def prefill_then_decode(runner, contexts=(5, 9, 3)):
    """Prefill three sequences, then one decode step of all three; returns the decode's logits."""
    tokens = {s: [(7 * s + j) % 100 for j in range(n)] for s, n in enumerate(contexts)}
    tables = {s: [8 * s + b for b in range(4)] for s in range(len(contexts))}
    runner.execute(Batch(prefill_seq_ids=list(range(len(contexts))), prefill_lens=list(contexts),
                         prefill_sample_ids=[(s,) for s in range(len(contexts))]), tokens, tables.__getitem__)
    rows = {}
    runner.logits_hook = lambda ids, logits: rows.update(logits=logits)
    for s in tokens:
        tokens[s].append(11)
    runner.execute(Batch(decode_seq_ids=list(tokens), decode_context_lens=[n + 1 for n in contexts]), tokens,
                   tables.__getitem__)
    return rows["logits"]


def test_graph_decode_equals_eager(opt_tiny):
    graphs = ModelRunner(opt_tiny, "cuda", num_gpu_blocks=32, block_size=16, cuda_graphs=True)
    eager = ModelRunner(opt_tiny, "cuda", num_gpu_blocks=32, block_size=16, cuda_graphs=False)
    assert graphs.cuda_graphs and not eager.cuda_graphs
    torch.testing.assert_close(prefill_then_decode(graphs), prefill_then_decode(eager), atol=2e-3, rtol=0)
    assert list(graphs.graphs.graphs) == [4], "three decodes replay bucket 4's graph"
    # the replay runs the eager forward's kernels over the same padded buffers (cuBLAS may pick another
    # algorithm under capture, so within rounding rather than bit for bit)
    with torch.inference_mode():
        eager_padded = graphs.graphs.forward(4).clone()
        torch.testing.assert_close(graphs.graphs.replay(4).clone(), eager_padded, atol=1e-3, rtol=1e-3)


def test_capture_at_engine_start_covers_the_systems_batches(opt_tiny):
    engine = Engine(opt_tiny, SystemSpec("vLLM", "vllm", block_size=16, max_num_seqs=20), "cuda",
                    num_gpu_blocks=32, num_cpu_blocks=4)
    assert sorted(engine.runner.graphs.graphs) == [1, 2, 4, 8, 16, 24]


@pytest.mark.parametrize("graphs", [True, False])
def test_an_iteration_syncs_once(opt_tiny, graphs):
    runner = ModelRunner(opt_tiny, "cuda", num_gpu_blocks=32, block_size=16, cuda_graphs=graphs, max_graph_batch=8)
    runner.capture_graphs()  # as an engine does at start: no capture inside the iterations counted
    prefill_then_decode(runner)  # warm: Triton compiles
    runner.logits_hook = None
    tokens = {s: [(3 * s + j) % 100 for j in range(n)] for s, n in enumerate((6, 4))}
    tables = {0: [20], 1: [21]}
    batches = [Batch(prefill_seq_ids=[0, 1], prefill_lens=[6, 4], prefill_sample_ids=[(0,), (1,)]),
               Batch(decode_seq_ids=[0, 1], decode_context_lens=[7, 5])]
    for batch in batches:
        torch.cuda.set_sync_debug_mode("warn")
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                sampled, _ = runner.execute(batch, tokens, tables.__getitem__)
        finally:
            torch.cuda.set_sync_debug_mode("default")
        syncs = [w for w in caught if "synchroniz" in str(w.message)]
        assert len(syncs) <= 1, [str(w.message) for w in syncs]
        for s, token in sampled.items():
            tokens[s].append(token)
