"""docs/config.md's table of the experiment's top-level keys, made from their schema (sim/experiment/keys.py).

`python -m sim.experiment.key_table` rewrites the table in the page; tests/sim/experiment/test_key_table.py fails
while the page and the schema disagree.
"""
from __future__ import annotations

import sys
from pathlib import Path

from sim.experiment.keys import EXPERIMENT_KEYS

PAGE = Path(__file__).resolve().parents[2] / "docs" / "config.md"
HEADING = "## Experiment keys"


def key_table() -> list[str]:
    """The table's lines: a row a key, in the schema's order."""
    rows = [f"| `{key.name}` | {key.doc} | {key.default_text} |" for key in EXPERIMENT_KEYS]
    return ["| key | meaning | default |", "|---|---|---|", *rows]


def with_key_table(page: str) -> str:
    """`page` with the table under HEADING replaced by the schema's."""
    lines = page.split("\n")
    start = lines.index("|---|---|---|", lines.index(HEADING)) - 1
    end = start + 2
    while end < len(lines) and lines[end].startswith("| `"):
        end += 1
    return "\n".join([*lines[:start], *key_table(), *lines[end:]])


def main() -> int:
    page = PAGE.read_text(encoding="utf-8")
    PAGE.write_text(with_key_table(page), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
