"""An iteration's time kept three ways: the timed step, its device span and its wall time."""
import pytest

torch = pytest.importorskip("torch")

from runtime_reference import BACKEND  # noqa: E402

from engine.core.system import SystemSpec  # noqa: E402
from engine.runtime.engine import Engine  # noqa: E402
from engine.runtime.runner import ModelRunner  # noqa: E402
from engine.runtime.timing import IterationTiming  # noqa: E402


def test_the_device_span_sits_inside_the_step_inside_the_wall(opt_tiny):
    runner = ModelRunner(opt_tiny, "cpu", num_gpu_blocks=16, num_cpu_blocks=4, block_size=4, attention_backend=BACKEND)
    timings = runner.time_batch_split([6, 3], [9], repeats=3, num_swap_blocks=2)
    assert len(timings) == 3
    for t in timings:  # nested intervals on one clock: an order, not a speed
        assert 0 < t.device_s <= t.seconds <= t.wall_s
        assert t.host_s == pytest.approx(t.wall_s - t.device_s)
    assert runner.time_batch([4], [], repeats=1) == [runner.last_timing.seconds]


def test_host_time_is_never_negative():
    assert IterationTiming(1.0, 2.0, 1.5).host_s == 0.0


def test_a_replay_keeps_every_iterations_device_span(opt_tiny):
    engine = Engine(opt_tiny, SystemSpec("vLLM", "vllm", block_size=4), "cpu", num_gpu_blocks=32, num_cpu_blocks=4,
                    attention_backend=BACKEND)
    result = engine.replay([(0.0, 5, 4), (0.1, 7, 3, 2)])
    assert len(result.device_s) == len(result.iterations) == len(result.host_s)
    durations = [it.duration_s for it in result.iterations]
    assert all(0 < d <= duration for d, duration in zip(result.device_s, durations))
