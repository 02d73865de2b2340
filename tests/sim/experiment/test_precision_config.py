"""An experiment's `precision:`: read beside the legacy dtype_bytes, refused where nothing prices it honestly,
fingerprinted only where written, and run to different records than fp16."""
from pathlib import Path

import pandas as pd
import pytest

from calibrate.cost_models.registry import Clock, CostModelConfig, build_cost_model
from calibrate.hardware.hardware import load_hardware
from calibrate.hardware.precision import Precision
from calibrate.parts.fp8_gemm import H100_FP8_FIT
from engine.errors import SpecError
from engine.specs.loader import load_model_spec
from servesim.cli import main
from sim.experiment.config import load_experiment
from sim.experiment.fingerprint import config_digest, data_files, spec_values
from tests.helpers.configs import tiny

ROOT = Path(__file__).resolve().parents[3]
CAPACITY = ROOT / "configs" / "examples" / "capacity_llama3_8b.yaml"
ON_ROOFLINE = ["cost_model=roofline", "hardware=h100-sxm"]


def test_precision_is_read_and_dtype_bytes_keeps_its_meaning(write_config):
    exp = load_experiment(write_config(tiny(precision="{weights: int4, kv_cache: fp8}")))
    assert exp.precision == Precision("int4", "fp8")
    assert load_experiment(write_config(tiny(dtype_bytes="1"))).precision == Precision.uniform(1)
    assert load_experiment(write_config(tiny())).precision == Precision.uniform(2)


@pytest.mark.parametrize("keys, key, words", [
    ({"precision": "{kv_cache: fp8}", "dtype_bytes": "2"}, "precision", ["dtype_bytes"]),
    ({"precision": "{weights: nf4}"}, "precision.weights", ["fp16", "int4"]),
])
def test_bad_precision_names_the_file_and_key(write_config, keys, key, words):
    path = write_config(tiny(**keys))
    with pytest.raises(SpecError) as err:
        load_experiment(path)
    assert err.value.key == key and str(path) in str(err.value) and "\n" not in str(err.value)
    assert all(word in err.value.message for word in words)


def test_a_measured_profile_refuses_other_formats_naming_the_roofline():
    with pytest.raises(SpecError) as err:  # the shipped example runs a transfer from the A100 profile
        load_experiment(CAPACITY, ["precision.kv_cache=fp8"])
    assert err.value.key == "precision" and "roofline" in err.value.message
    assert str(CAPACITY) in str(err.value)
    profile = CostModelConfig("profile", ROOT / "calibrate" / "profiles" / "cpu-opt-125m.yaml")
    clock = Clock(load_model_spec("opt-125m"), load_hardware("a100-80gb"), precision=Precision(weights="int8"))
    with pytest.raises(SpecError, match="roofline"):
        build_cost_model(profile, clock, "c.yaml")
    sixteen = Clock(load_model_spec("opt-125m"), load_hardware("a100-80gb"), precision=Precision("bf16", "bf16"))
    assert build_cost_model(profile, sixteen, "c.yaml").step_time is not None  # 16-bit formats are measured


def test_an_fp8_kv_cache_about_doubles_a_shipped_configs_blocks():
    fp16 = load_experiment(CAPACITY, ON_ROOFLINE)
    fp8 = load_experiment(CAPACITY, [*ON_ROOFLINE, "precision.kv_cache=fp8"])
    system = fp16.systems[0]
    assert abs(fp8.kv_pool(system).num_gpu_blocks - 2 * fp16.kv_pool(system).num_gpu_blocks) <= 1
    assert fp8.kv_pool(system).block_bytes * 2 == fp16.kv_pool(system).block_bytes


def test_a_config_without_precision_fingerprints_without_the_fp8_rate():
    plain = load_experiment(CAPACITY, ON_ROOFLINE)
    assert "peak_flops_fp8" not in spec_values(plain)["hardware"]
    fp8 = load_experiment(CAPACITY, [*ON_ROOFLINE, "precision.weights=fp8"])
    assert spec_values(fp8)["hardware"]["peak_flops_fp8"] == 1979e12
    system = plain.systems[0]
    digests = {config_digest(exp, system, 2.0, 0, {"specs": spec_values(exp)}) for exp in (plain, fp8)}
    assert len(digests) == 2


def test_only_a_roofline_pricing_w8a8_reads_the_measured_fp8_gemms():
    """Its fit file is in the fingerprint of the runs it prices, so that a refit reruns them, and of no other."""
    fp8 = load_experiment(CAPACITY, [*ON_ROOFLINE, "precision.weights=fp8"])
    assert data_files(fp8)["precision.weights"] == H100_FP8_FIT
    for overrides in (ON_ROOFLINE, ["cost_model=roofline", "hardware=a100-80gb", "precision.weights=fp8"],
                      [*ON_ROOFLINE, "precision.weights=int8"]):
        assert "precision.weights" not in data_files(load_experiment(CAPACITY, overrides))


def test_servesim_run_with_precision_writes_records_unlike_fp16(write_config, tmp_path):
    results = {}
    for name, extra in (("fp16", {}), ("quantized", {"precision": "{weights: int4, kv_cache: fp8}"})):
        path, out = write_config(tiny(rates="[2]", **extra), name=f"{name}.yaml"), tmp_path / name
        assert main(["run", str(path), "--out", str(out), "--set", "systems=[vllm]"]) == 0
        (run,) = (out / "runs").iterdir()
        assert (run / "iterations.parquet").is_file() and (run / "requests.csv.gz").is_file()
        results[name] = (pd.read_csv(out / "summary.csv").iloc[0], (out / "cost_models.txt").read_text())
    (fp16, fp16_source), (quantized, quantized_source) = results["fp16"], results["quantized"]
    assert quantized["normalized_latency"] < fp16["normalized_latency"]  # a quarter of the weights to read
    assert "weights=int4, kv_cache=fp8" in quantized_source and "weights" not in fp16_source
