"""Acceptance read from a table of published measurements (docs/speculative-decoding.md): `acceptance: {table: NAME,
dataset: NAME}` on a system's `speculative:` names a shipped table (sim/experiment/acceptance_tables/) or a table
file's path, and the row of the system's method on that dataset, measured with the experiment's model (or the
`model:` named) and, where the table has several, the `proposer:` named. Every row carries its source and is read as
its source printed it (published.yaml's header says how); a method, model, dataset, proposer or k the table has no
row for is a one-line error naming the key and what the table has. The rates read replace the reference, so a system
reads exactly as one given the same rates inline."""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.core.speculative import METHODS, AcceptanceTable, SpeculativeSpec, rate_for_mean
from engine.core.system import SystemSpec
from engine.errors import SpecError
from engine.specs.checks import known_keys
from engine.specs.loader import read_yaml
from engine.specs.paths import Shipped, resolve_path

SHIPPED_TABLES = Shipped(Path(__file__).resolve().parent / "acceptance_tables", ".yaml",
                         "sim/experiment/acceptance_tables", "acceptance table")
TEXT_KEYS = ("method", "model", "proposer", "dataset", "source", "published")
ROW_KEYS = (*TEXT_KEYS[:4], "num_speculative_tokens", "acceptance_at", "mean_acceptance_length", *TEXT_KEYS[4:])


@dataclass(frozen=True)
class AcceptanceRow:
    """One published measurement: per-position acceptance over all drafts (`acceptance_at`), or a mean acceptance
    length at num_speculative_tokens alone (acceptance_at empty)."""

    method: str
    model: str
    proposer: str
    dataset: str
    num_speculative_tokens: int
    acceptance_at: tuple[float, ...]
    mean_acceptance_length: float | None
    source: str
    published: str

    def rates(self, k: int) -> tuple[float, ...]:
        """The first k positions' conditional rates: a_i / a_(i-1) (a run's proposal i is kept only after every one
        before it); a mean length L as one rate for every position whose k proposals keep L - 1 on average."""
        if self.mean_acceptance_length is not None:
            return (rate_for_mean(self.mean_acceptance_length - 1, k),) * k
        rates, before = [], 1.0
        for at in self.acceptance_at[:k]:
            rates.append(at / before if before else 0.0)
            before = at
        return tuple(rates)

    def describe(self) -> str:
        return f"{self.method} with {self.proposer} on {self.model}, {self.dataset}"


def with_table_rates(systems: tuple[SystemSpec, ...], target: str, source: str, base_dir: Path | None,
                     keys: Sequence[str] | None = None) -> tuple[SystemSpec, ...]:
    """The systems with each table's acceptance read into rates (`target`: the experiment's model's name; `keys`:
    each system's key, default systems[i])."""
    resolved = []
    for i, system in enumerate(systems):
        spec = system.speculative
        if spec is not None and spec.acceptance_table is not None:
            key = keys[i] if keys is not None else f"systems[{i}]"
            rates = table_rates(spec, target, source, f"{key}.speculative", base_dir)
            system = dataclasses.replace(system, speculative=dataclasses.replace(spec, rates=rates,
                                                                                 acceptance_table=None))
        resolved.append(system)
    return tuple(resolved)


def table_rates(spec: SpeculativeSpec, target: str, source: str, key: str, base_dir: Path | None) -> tuple[float, ...]:
    """The rates of spec's table row for its k proposals (`key`: the system's `speculative`)."""
    table = spec.acceptance_table
    assert table is not None
    path = resolve_path(table.table, base_dir, source, f"{key}.acceptance.table", SHIPPED_TABLES,
                        what="an acceptance table YAML")
    row = find_row(load_table(path), table, spec.method, target, source, f"{key}.acceptance", path.stem)
    k, measured = spec.num_speculative_tokens, row.num_speculative_tokens
    where, what = f"{key}.num_speculative_tokens", f"{k}: {path.stem}'s row ({row.describe()})"
    if row.mean_acceptance_length is not None and k != measured:
        raise SpecError(source, where, f"{what} gives a mean at k = {measured} alone; give {measured}, or the "
                                       "acceptance inline")
    if k > measured:
        raise SpecError(source, where, f"{what} measured proposals 1 to {measured}; give at most {measured}, or the "
                                       "acceptance inline (acceptance: {rates: [...]})")
    return row.rates(k)


def find_row(rows: tuple[AcceptanceRow, ...], table: AcceptanceTable, method: str, target: str, source: str,
             key: str, name: str) -> AcceptanceRow:
    """The one row of `method` on table.dataset measured with table.model (else `target`) and table.proposer."""
    found = [row for row in rows if row.method == method]
    if not found:
        raise SpecError(source, f"{key}.table", f"{name} has no row of method {method!r}; its methods: "
                                                f"{sorted({row.method for row in rows})}")
    model = table.model or target
    of_model = [row for row in found if row.model == model]
    if not of_model:
        hint = "" if table.model else " (the experiment's model; model: names another, to borrow its acceptance)"
        raise SpecError(source, f"{key}.model", f"{name} has no {method} row measured on {model!r}{hint}; measured "
                                                f"on: {sorted({row.model for row in found})}")
    found = [row for row in of_model if row.dataset == table.dataset]
    if not found:
        raise SpecError(source, f"{key}.dataset", f"{table.dataset!r} is not among {name}'s {method} rows on {model}; "
                                                  f"valid: {sorted({row.dataset for row in of_model})}")
    proposers = sorted(row.proposer for row in found)
    if table.proposer is not None:
        found = [row for row in found if row.proposer == table.proposer]
        if not found:
            raise SpecError(source, f"{key}.proposer", f"{table.proposer!r} is not among {name}'s {method} rows on "
                                                       f"{model}, {table.dataset}; valid: {proposers}")
    if len(found) > 1:
        raise SpecError(source, f"{key}.proposer", f"{name} has {len(found)} {method} rows on {model}, "
                                                   f"{table.dataset}; name one: {proposers}")
    return found[0]


def load_table(path: Path) -> tuple[AcceptanceRow, ...]:
    """A table's rows, each checked (a bad one is a one-line error naming the file and the row's key)."""
    source, raw = str(path), read_yaml(path, "speculative acceptance table")
    if not isinstance(raw, dict) or list(raw) != ["rows"] or not isinstance(raw["rows"], list) or not raw["rows"]:
        raise SpecError(source, "rows", "an acceptance table is a mapping {rows: [...]} of one row or more")
    rows = tuple(_row(item, source, f"rows[{i}]") for i, item in enumerate(raw["rows"]))
    seen: dict[tuple[str, ...], int] = {}
    for i, row in enumerate(rows):
        identity = (row.method, row.model, row.proposer, row.dataset)
        if identity in seen:
            raise SpecError(source, f"rows[{i}]", f"the same method, model, proposer and dataset as "
                                                  f"rows[{seen[identity]}] ({row.describe()}); keep one")
        seen[identity] = i
    return rows


def _row(raw: Any, source: str, key: str) -> AcceptanceRow:
    if not isinstance(raw, dict):
        raise SpecError(source, key, f"a row is a mapping of {list(ROW_KEYS)}, got {raw!r}")
    known_keys(raw, ROW_KEYS, source, key)
    text = {name: _text(raw.get(name), source, f"{key}.{name}") for name in TEXT_KEYS}
    if text["method"] not in METHODS:
        raise SpecError(source, f"{key}.method", f"{text['method']!r} is not one of {list(METHODS)}")
    k = raw.get("num_speculative_tokens")
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise SpecError(source, f"{key}.num_speculative_tokens", f"must be a whole number >= 1, got {k!r}")
    if ("acceptance_at" in raw) == ("mean_acceptance_length" in raw):
        raise SpecError(source, key, "give acceptance_at (per position, over all drafts) or mean_acceptance_length "
                                     "(1 + proposals accepted a draft), one of them")
    mean = raw.get("mean_acceptance_length")
    if mean is not None and not (_number(mean) and 1 <= mean <= 1 + k):
        raise SpecError(source, f"{key}.mean_acceptance_length", f"must be a number in [1, {1 + k}], got {mean!r}")
    at = _acceptance_at(raw["acceptance_at"], k, source, f"{key}.acceptance_at") if "acceptance_at" in raw else ()
    return AcceptanceRow(text["method"], text["model"], text["proposer"], text["dataset"], k, at,
                         float(mean) if mean is not None else None, text["source"], text["published"])


def _acceptance_at(raw: Any, k: int, source: str, key: str) -> tuple[float, ...]:
    """k shares in [0, 1], none above the one before (a proposal is accepted only after every one before it)."""
    if not isinstance(raw, list) or len(raw) != k:
        raise SpecError(source, key, f"must be a list of {k} shares (num_speculative_tokens), got {raw!r}")
    before = 1.0
    for i, at in enumerate(raw):
        if not _number(at) or not 0 <= at <= before:
            raise SpecError(source, f"{key}[{i}]", f"must be a number in [0, {before:g}] (the position before it), "
                                                   f"got {at!r}")
        before = at
    return tuple(float(at) for at in raw)


def _text(value: Any, source: str, key: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise SpecError(source, key, f"must be text (every row names its method, model, proposer, dataset, source "
                                     f"and date), got {value!r}")
    return value


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value \
        and value not in (float("inf"), float("-inf"))
