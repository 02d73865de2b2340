"""benchmarks/serving/plan_search.py searches the space its record describes, and every price it pays names where it
was read."""
from __future__ import annotations

from pathlib import Path

import yaml

from benchmarks.serving import plan_search as bench
from sim.capacity.candidates import candidates
from sim.capacity.deploy_config import load_plan

ROOT = Path(__file__).resolve().parents[2]


def test_the_benchmark_searches_4_gpus_by_8_parallelisms_by_3_batch_settings_by_2_precisions():
    plan = load_plan(bench.CONFIG, bench.SPACE)
    assert len(candidates(plan)) == 4 * 8 * 3 * 2 and plan.rate == 50


def test_every_shipped_price_names_who_lists_it_where_and_when():
    prices = yaml.safe_load((ROOT / "configs" / "prices" / "example.yaml").read_text())["gpus"]
    for kind, price in prices.items():
        assert price["source"].startswith("https://") and price["date"] and price["provider"], kind
