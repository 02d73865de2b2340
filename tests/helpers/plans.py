"""A tiny plan for the `servesim plan` tests: OPT-13B on 30-s traces over three GPU kinds and three parallelisms, a
few seconds a search; a price table beside it."""
from __future__ import annotations

from pathlib import Path

PRICES = """\
gpus:
  a100-40gb: {usd_per_gpu_hour: 1.48, provider: test, source: https://example.com/prices, date: 2026-05-07}
  a10: {usd_per_gpu_hour: 0.86}
  l4: {usd_per_gpu_hour: 0.80}
"""

PLAN = """\
name: tinyplan
model: opt-13b
hardware: a100-40gb
workload: {dataset: sharegpt-standin, duration_s: 30}
systems: [vllm]
rates: [1]
warmup_s: 5
plan:
  rate: 6
  targets: {ttft_p90_s: 2, tpot_p90_s: 0.2}
  prices: prices.yaml
  hardware: [a100-40gb, a10, l4]
  tensor_parallel: [1, 2, 3]
  keep_within: 10
"""


def write_plan(folder: Path, plan: str = PLAN, prices: str = PRICES) -> Path:
    """The plan and its price table in `folder`; the plan's path."""
    (folder / "prices.yaml").write_text(prices)
    path = folder / "plan.yaml"
    path.write_text(plan)
    return path


def shipped_experiment(path: Path, overrides: list[str] | None = None):
    """A shipped config's experiment, as `servesim run` reads one; a plan config's (an experiment with a plan:
    section, sim/capacity/deploy_config.py) read as `servesim plan` reads it, its plan and prices checked too."""
    import yaml

    from sim.capacity.deploy_config import load_plan
    from sim.experiment.config import load_experiment

    if "plan" in yaml.safe_load(Path(path).read_text()):
        return load_plan(path, overrides).base
    return load_experiment(path, overrides)
