import textwrap
from pathlib import Path

import pytest

SMALL_EXPERIMENT = """
name: small
model: opt-13b
hardware: a100-40gb
kv_cache_gib: 12
workload:
  dataset: sharegpt-standin
  arrival: poisson
  duration_s: 240
systems: [fastertransformer, orca-max, orca-pow2, orca-oracle, vllm]
rates: [0.5]
seeds: [0]
warmup_s: 20
cost_model: roofline
"""


@pytest.fixture
def small():
    return SMALL_EXPERIMENT


@pytest.fixture
def write_config(tmp_path):
    def write(text: str = SMALL_EXPERIMENT, name: str = "exp.yaml") -> Path:
        path = tmp_path / name
        path.write_text(textwrap.dedent(text))
        return path

    return write
