"""The profiler's raw CSV splits every shape's time: device_s (the span of its device work) and host_s (the
rest of its wall time), beside the time_s it always had."""
import pytest

from calibrate.fitting.fit import NOT_SHAPES


@pytest.fixture(scope="module")
def raw():
    torch = pytest.importorskip("torch")
    import os

    from calibrate.profiling.profile import profile
    from engine.specs.loader import load_model_spec

    interpreting = os.environ.pop("TRITON_INTERPRET", None)  # the torch kernels, as a CPU engine runs them
    # a tiny model on one thread, as tests/conftest.py's one_cpu_thread runs them: more only spin against each
    # other, four times the time on a busy machine (unless a calibrate CLI test left torch on one thread before)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return profile(load_model_spec("opt-tiny"), grid="tiny", repeats=2, swap_blocks=8, block_sizes=(4,),
                       on_progress=lambda done: None)
    finally:
        torch.set_num_threads(threads)
        if interpreting is not None:
            os.environ["TRITON_INTERPRET"] = interpreting


@pytest.mark.slow
def test_every_timed_shape_has_its_device_and_host_time(raw):
    shapes = raw[~raw["kind"].isin(NOT_SHAPES) | raw["kind"].isin(["swap", "block_sweep"])]
    assert len(shapes) > 10 and {"block_sweep", "swap", "decode", "prefill", "mixed"} <= set(shapes["kind"])
    assert (shapes["device_s"] > 0).all() and (shapes["host_s"] > 0).all()
    # the device span sits inside the timed step, run by run, so their medians keep the order
    assert (shapes["device_s"] <= shapes["time_s"]).all()


def test_the_served_iterations_carry_the_split_of_their_whole_step(raw):
    host = raw[raw["kind"] == "host"]
    assert len(host) > 10 and (host["device_s"] > 0).all() and (host["host_s"] >= host["time_s"]).all()


def test_the_raw_csv_says_which_engine_was_profiled(raw):
    assert not raw["cuda_graphs"].any(), "a CPU engine runs eagerly"
