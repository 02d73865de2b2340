"""docs/deployment-search.md lists every key of a plan and of a price table, and no other."""
from __future__ import annotations

import re
from pathlib import Path

from sim.capacity.deploy_config import PLAN_KEYS
from sim.capacity.prices import PRICE_KEYS

PAGE = Path(__file__).resolve().parents[3] / "docs" / "deployment-search.md"


def test_every_plan_and_price_key_is_documented_and_every_documented_one_accepted():
    text = PAGE.read_text()
    assert set(re.findall(r"^\| `plan\.([a-z_]+)` \|", text, flags=re.M)) == set(PLAN_KEYS)
    assert set(re.findall(r"^\| `([a-z_]+)` \| price", text, flags=re.M)) == set(PRICE_KEYS)
