"""benchmarks/gpu/gpu_targets.py: each GPU target read from a session folder and set beside its floor."""
import pandas as pd
import pytest

from benchmarks.gpu import gpu_targets
from engine.specs.loader import load_model_spec

HBM = 4.8e12


def raw_rows(time_of) -> pd.DataFrame:
    spec = load_model_spec("opt-13b")
    rows = []
    for batch in (1, 8, 32):
        for context in (64, 512):
            floor = (spec.weight_bytes(2) + batch * context * spec.kv_bytes_per_token(2)) / HBM
            rows.append({"kind": "decode", "num_decodes": batch, "max_decode_context": context, "num_prefills": 0,
                         "num_prefill_tokens": 0, "sum_decode_context": batch * context, "dtype": "float16",
                         "time_s": time_of(floor), "device_s": floor})
    for k in (1, 4):
        rows.append({"kind": "prefill", "num_decodes": 0, "max_decode_context": 0, "num_prefills": k,
                     "num_prefill_tokens": 2048, "sum_decode_context": 0, "dtype": "float16",
                     "time_s": 0.1 * (1.1 if k == 4 else 1.0), "device_s": 0.09})
    return pd.DataFrame(rows)


def test_the_decode_target_is_the_worst_ratio_to_the_hbm_floor():
    passing = gpu_targets.decode_target(raw_rows(lambda floor: 1.2 * floor), "opt-13b", "graphs", HBM)
    assert passing.passed is True and "worst 1.20x" in passing.measured
    missing = gpu_targets.decode_target(raw_rows(lambda floor: 1.2 * floor if floor < 0.006 else 3 * floor),
                                        "opt-13b", "graphs", HBM)
    assert missing.passed is False and "worst 3.00x" in missing.measured
    assert gpu_targets.decode_target(None, "opt-13b", "graphs", HBM).passed is None


def test_prefill_of_k_prompts_is_compared_with_one_prompt_of_as_many_tokens():
    target = gpu_targets.prefill_batch_target(raw_rows(lambda floor: floor), "opt-13b", "graphs")
    assert target.passed is True and "+10.0%" in target.measured and "4 x 512" in target.measured


def test_validation_needs_exact_schedules_and_small_errors(tmp_path):
    folder = tmp_path / "validation-graphs"
    folder.mkdir()
    pd.DataFrame({"normalized_latency_error": [0.02, -0.04, 0.03]}).to_csv(folder / "summary.csv", index=False)
    pd.DataFrame({"identical": [True, True]}).to_csv(folder / "exact.csv", index=False)
    assert gpu_targets.validation_target(tmp_path, "graphs").passed is True
    pd.DataFrame({"identical": [True, False]}).to_csv(folder / "exact.csv", index=False)
    assert gpu_targets.validation_target(tmp_path, "graphs").passed is False
    assert gpu_targets.validation_target(tmp_path, "eager").passed is None


def test_the_kernel_target_reads_the_fig18a_log_when_the_csv_lacks_the_shapes(tmp_path):
    (tmp_path / "fig18a.log").write_text("batch context dense_us paged_us ratio   A100 model: dense  paged  ratio\n"
                                         "    8      64    20.0   24.0   1.20      8.9   10.9   1.23\n"
                                         "   32     256    50.0   70.0   1.40     142.0  174.6   1.23\n")
    target = gpu_targets.kernel_target(tmp_path)
    assert target.passed is False and target.measured == "1.20-1.40x"


@pytest.mark.parametrize("mode", ["graphs", "eager"])
def test_missing_results_say_so(tmp_path, mode):
    assert gpu_targets.profile_target(tmp_path, "opt-13b", mode).passed is None
    assert gpu_targets.long_prompt_target(None, "opt-13b", mode, gemm=False).passed is None
