"""The runtime on a GPU in half precision: skipped where there is no CUDA."""
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("engine.core.factory")
if not torch.cuda.is_available():
    pytest.skip("needs CUDA", allow_module_level=True)

from runtime_reference import StepRecorder  # noqa: E402

from engine.core.system import SystemSpec  # noqa: E402
from engine.runtime.cache import PagedKVCache, kv_pool_blocks_that_fit  # noqa: E402
from engine.runtime.engine import Engine  # noqa: E402
from engine.runtime.runner import ModelRunner  # noqa: E402


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_engine_matches_dense(spec, dtype):
    engine = Engine(spec, SystemSpec("vLLM", "vllm", block_size=8), "cuda", dtype=dtype,
                    num_gpu_blocks=64, num_cpu_blocks=16)
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
