"""Bad input stops before anything runs, with a message that names the file, the key or row, and both sides."""
import pytest

pytest.importorskip("torch")  # these run the real engine

from calibrate.hardware.device import device_name as this_device  # noqa: E402
from calibrate.hardware.precision import Precision  # noqa: E402
from engine.errors import SpecError  # noqa: E402
from fidelity.config import check_engine_precision, load_validation  # noqa: E402
from fidelity.validate import RealSide, validate  # noqa: E402
from servesim.cli import main  # noqa: E402
from tests.helpers.validate_tiny import TINY_VALIDATION, profile_text  # noqa: E402


@pytest.fixture
def no_engine(monkeypatch):
    """Fail the test if validation gets as far as building a real engine."""
    def refuse(*args, **kwargs):
        raise AssertionError("an engine was built before the input was checked")
    monkeypatch.setattr(RealSide, "engine", refuse)


def test_a_profile_for_another_model_is_refused_naming_both(tiny_validation, tmp_path, no_engine):
    with pytest.raises(SpecError) as err:  # at load, before anything runs
        load_validation(tiny_validation(profile=profile_text(model="opt-125m")))
    message = str(err.value)
    assert "profile.yaml" in message and "opt-125m" in message and "opt-tiny" in message
    assert not (tmp_path / "out").exists()


def test_a_profile_for_another_device_is_refused_naming_both(tiny_validation, tmp_path, no_engine):
    cfg = load_validation(tiny_validation(profile=profile_text(device="cuda", dtype="float16")))
    with pytest.raises(SpecError) as err:
        validate(cfg, tmp_path / "out", log=lambda line: None)
    message = str(err.value)
    assert "on cuda" in message and "on cpu" in message and err.value.key == "device"


def test_a_profile_from_another_cpu_is_refused_naming_both_and_the_way_out(tiny_validation, tmp_path, no_engine):
    cfg = load_validation(tiny_validation(profile=profile_text(device_name="Some Other CPU @ 2.0GHz")))
    with pytest.raises(SpecError) as err:
        validate(cfg, tmp_path / "out", log=lambda line: None)
    message = str(err.value)
    assert err.value.key == "device_name" and "Some Other CPU" in message and this_device("cpu") in message
    assert "--calibrate" in message
    assert not (tmp_path / "out").exists()


def test_a_profile_in_another_dtype_is_refused(tiny_validation, tmp_path, no_engine):
    cfg = load_validation(tiny_validation(profile=profile_text(dtype="bfloat16")))
    with pytest.raises(SpecError, match="bfloat16.*float32"):
        validate(cfg, tmp_path / "out", log=lambda line: None)


def test_a_profile_measured_with_other_thread_counts_is_refused(tiny_validation, tmp_path, no_engine):
    profile = profile_text() + "torch_threads: 2\n"
    cfg = load_validation(tiny_validation(profile=profile))
    with pytest.raises(SpecError) as err:
        validate(cfg, tmp_path / "out", log=lambda line: None)
    assert err.value.key == "torch_threads" and "2 torch thread" in str(err.value) and "with 1" in str(err.value)


def test_a_request_over_the_max_length_is_reported_by_row(tiny_validation, tmp_path, no_engine, capsys):
    lengths = "prompt_len,output_len\n12,6\n30,10\n100,60\n"  # 160 tokens > max_model_len 128
    path = tiny_validation(lengths=lengths)
    assert main(["validate", str(path), "--out", str(tmp_path / "out")]) == 2
    message = capsys.readouterr().err
    assert "row" in message and "prompt 100 + output 60 = 160 tokens" in message and "128" in message
    assert not (tmp_path / "out").exists()


def test_pool_smaller_than_one_reservation_is_refused(tiny_validation, no_engine, tmp_path):
    cfg = load_validation(tiny_validation(TINY_VALIDATION.replace("num_gpu_blocks: 16", "num_gpu_blocks: 4")))
    with pytest.raises(SpecError, match="validation.num_gpu_blocks.*at least 8 blocks"):
        validate(cfg, tmp_path / "out", log=lambda line: None)


@pytest.mark.parametrize("edit, key", [
    (("device: cpu", "device: tpu"), "validation.device"),
    (("repeats: 2", "repeats: 0"), "validation.repeats"),
    (("torch_threads: 1", "torch_thread: 1"), "validation.torch_thread"),
    (("seeds: [0]", "seeds: [0, 1]"), "experiment.seeds"),
    (("dtype_bytes: 4", "dtype_bytes: 2"), "experiment.dtype_bytes"),
    (("dtype_bytes: 4", "precision: {kv_cache: fp8}"), "experiment.precision"),
    (("dtype_bytes: 4", "precision: {weights: fp16}"), "experiment.precision"),
    (("rates: [4, 12]", "rate: [4, 12]"), "experiment.rate"),
    (("name: tiny", "nam: tiny"), "nam"),
    (("torch_threads: 1", "torch_threads: 1\n  speed_correction: yes please"), "validation.speed_correction"),
    (("torch_threads: 1", "torch_threads: 1\n  speed_correction: 1"), "validation.speed_correction"),
    (("torch_threads: 1", "torch_threads: 1\n  speed_probe_every_s: 0"), "validation.speed_probe_every_s"),
])
def test_bad_keys_name_the_key(tiny_validation, edit, key):
    with pytest.raises(SpecError) as err:
        load_validation(tiny_validation(TINY_VALIDATION.replace(*edit)))
    assert err.value.key == key
    assert "tiny.yaml" in str(err.value)


@pytest.mark.parametrize("precision", [Precision(weights="fp8"), Precision(kv_cache="fp8"), Precision("int4", "fp8")])
def test_the_engine_refuses_formats_it_does_not_run(precision):
    with pytest.raises(SpecError) as err:
        check_engine_precision(precision, "float16", "v.yaml")
    assert err.value.key == "experiment.precision" and "float16" in err.value.message
    assert "\n" not in str(err.value)
    check_engine_precision(Precision("bf16", "bf16"), "bfloat16", "v.yaml")  # its own formats run


def test_a_speculating_system_is_compared_by_its_exact_replay_alone(tiny_validation, tmp_path, no_engine, capsys,
                                                                    monkeypatch):
    """Its cost-model comparison is not built (the served batches keep no proposals to price): refused naming the
    key, before any profiling or engine, where it once stopped as an internal error."""
    import fidelity.validate

    monkeypatch.setattr(fidelity.validate, "calibrate_here", lambda *args: pytest.fail("profiled before the check"))
    config = TINY_VALIDATION.replace("systems: [fastertransformer, orca-max, orca-pow2, orca-oracle, vllm]", (
        "systems: [vllm, {preset: vllm, name: ngram, speculative: {method: ngram, num_speculative_tokens: 2, "
        "acceptance: {mean_accepted: 1.0}}}]")) + "  calibrate: true\n"
    out = tmp_path / "out"
    assert main(["validate", str(tiny_validation(config)), "--out", str(out)]) == 2
    error = capsys.readouterr().err.strip()
    assert error.startswith("servesim: error: ") and "\n" not in error
    assert "experiment.systems[1].speculative: ngram speculates" in error and "--exact" in error
    assert not out.exists()
