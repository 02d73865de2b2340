"""The tiny validation config on opt-tiny, its lengths, and a profile to go with it (tests only).

The profile's coefficients are written here, not measured: the tests check that `servesim validate`
runs, refuses bad input and proves the two control planes agree, not how good a fit is.
"""
import textwrap

from calibrate.hardware.device import device_name as this_device

TINY_LENGTHS = """\
prompt_len,output_len
12,6
30,10
20,16
48,8
8,24
40,12
16,20
60,6
"""

TINY_VALIDATION = """\
name: tiny
experiment:
  model: opt-tiny
  hardware: a100-40gb
  dtype_bytes: 4
  cost_model: profile.yaml
  workload: {dataset: lengths.csv, arrival: poisson, duration_s: 1.0}
  systems: [fastertransformer, orca-max, orca-pow2, orca-oracle, vllm]
  rates: [4, 12]
  seeds: [0]
validation:
  device: cpu
  repeats: 2
  num_gpu_blocks: 16
  max_model_len: 128
  latency_threshold: 0.004
  attention_backend: torch
  torch_threads: 1
"""


def profile_text(model: str = "opt-tiny", device: str = "cpu", dtype: str = "float32",
                 speed_reference: bool = True, device_name: str | None = None) -> str:
    device_name = device_name or (this_device("cpu") if device == "cpu" else "NVIDIA H200")
    # the probe's times at "calibration": with them validation probes the machine and corrects for its speed
    reference = ("speed_reference: {decode_s: 0.002, prefill_s: 0.004, samples: 9, probe: test}"
                 if speed_reference else "")
    return textwrap.dedent(f"""\
        model: {model}
        device: {device}
        device_name: {device_name}
        dtype: {dtype}
        tensor_parallel: 1
        block_size: 16
        token_knots: [1, 256]
        token_costs_s: [0.00151, 0.00406]
        coefficients:
          prefill_attention_s: 1.0e-8
          decode_context_s: 1.0e-7
          decode_padded_context_s: 0.0
          per_sequence_s: 5.0e-5
          per_prefill_s: 0.0
          mixed_s: 0.0
          decode_block_s: 0.0
        heldout_mape: 0.05
        heldout_p95_ape: 0.1
        train_rows: 10
        heldout_rows: 2
        created: '2026-01-01'
        command: written by tests/fidelity/conftest.py
        swap_s_per_copy: 0.0
        swap_s_per_byte: 1.0e-11
        {reference}
        """)


def write_tiny_validation(folder, config: str = TINY_VALIDATION, profile: str | None = None,
                          lengths: str = TINY_LENGTHS):
    """The tiny config, its lengths and its profile written into `folder`; returns the config's path."""
    (folder / "lengths.csv").write_text(lengths)
    (folder / "profile.yaml").write_text(profile or profile_text())
    path = folder / "tiny.yaml"
    path.write_text(config)
    return path
