"""Speculative decoding as the control plane sees it: how many tokens a sequence proposes, and how many of them
the target is expected to accept (docs/speculative-decoding.md).

A decoding sequence that speculates proposes k tokens (a draft model, an n-gram lookup, an EAGLE or MTP head)
and the target verifies k + 1 positions in one iteration: its last sampled token and the k proposals. It needs
k lookahead slots beyond its next token (vLLM's num_lookahead_slots), and advances by the tokens accepted plus
one (the target's own token at the first rejection, or after the last proposal).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from engine.core.spec import ModelSpec
from engine.errors import SpecError
from engine.specs.checks import known_keys

METHODS = ("draft", "ngram", "eagle", "mtp")
MAX_SPECULATIVE_TOKENS = 16
ACCEPTANCE_KEYS = ("mean_accepted", "rates")
TABLE_KEYS = ("table", "dataset", "model", "proposer")  # acceptance read from a table's row
KEYS = ("method", "num_speculative_tokens", "draft_model", "acceptance")


@dataclass(frozen=True)
class AcceptanceTable:
    """Acceptance to be read from a table of published measurements (sim/experiment/acceptance_table.py): the table
    (a shipped table's name or a file's path) and its row, the one of the system's method on `dataset`, measured
    with the target `model` (None: the experiment's own) and, where the table has several, `proposer`."""

    table: str
    dataset: str
    model: str | None = None
    proposer: str | None = None


@dataclass(frozen=True)
class SpeculativeSpec:
    """A system's speculation: the proposer (`method`, and its `draft_model` for draft), k proposals a step,
    and the acceptance as per-position conditional rates: the target accepts proposal i with probability
    rates[i] when it accepted every one before it (a mean acceptance is turned into one rate for every
    position, the one whose expected accepted count is that mean: mean_accepted). `draft`: the draft model's
    spec, once an experiment has found it by its name (sim.experiment.speculation). `acceptance_table`: where the
    rates are to be read from, until an experiment reads them (rates empty till then; None once read, so the spec
    is the one its rates given inline make)."""

    method: str
    num_speculative_tokens: int
    rates: tuple[float, ...]
    draft_model: str | None = None
    draft: ModelSpec | None = None
    acceptance_table: AcceptanceTable | None = None

    @property
    def expected_accepted(self) -> float:
        """The mean accepted count of k proposals: sum over i of rates[0] x ... x rates[i]."""
        return expected_accepted(self.rates)


def expected_accepted(rates: Sequence[float]) -> float:
    total, survive = 0.0, 1.0
    for rate in rates:
        survive *= rate
        total += survive
    return total


def rate_for_mean(mean: float, k: int) -> float:
    """The one rate p, for every position, with p + p^2 + ... + p^k = mean (bisection: the sum grows with p)."""
    if mean <= 0:
        return 0.0
    if mean >= k:
        return 1.0
    low, high = 0.0, 1.0
    for _ in range(100):
        middle = (low + high) / 2
        if expected_accepted([middle] * k) < mean:
            low = middle
        else:
            high = middle
    return (low + high) / 2


def lookahead_slots(length: int, final_len: int, k: int) -> int:
    """The proposals a sequence of `length` tokens makes this step: k, but no more than it can still use (a step
    adds at least one token, so a sequence one token short of its final length proposes nothing). So a request
    never needs more blocks than it would without speculation, and one that fits the pool alone still does."""
    left = final_len - length - 1
    return k if k < left else max(left, 0)


def speculative_from_dict(raw: Any, source: str, key: str) -> SpeculativeSpec | None:
    """A system's `speculative:` mapping, every key checked where it is read (null: no speculation)."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise SpecError(source, key, "must be a mapping {method, num_speculative_tokens, draft_model, acceptance}")
    known_keys(raw, KEYS, source, key)
    method = raw.get("method")
    if method not in METHODS:
        raise SpecError(source, f"{key}.method", f"{method!r} is not one of {list(METHODS)}")
    k = raw.get("num_speculative_tokens")
    if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= MAX_SPECULATIVE_TOKENS:
        raise SpecError(source, f"{key}.num_speculative_tokens",
                        f"must be a whole number in [1, {MAX_SPECULATIVE_TOKENS}] (tokens proposed a step), got {k!r}")
    draft = raw.get("draft_model")
    if method == "draft" and (not isinstance(draft, str) or not draft.strip()):
        raise SpecError(source, f"{key}.draft_model", f"method 'draft' needs the draft model's name, got {draft!r}")
    if method != "draft" and draft is not None:
        raise SpecError(source, f"{key}.draft_model", f"is read only by method 'draft'; this one is {method!r} "
                                                      "(remove the key)")
    acceptance = raw.get("acceptance")
    if isinstance(acceptance, dict) and "table" in acceptance:
        return SpeculativeSpec(method, k, (), draft, acceptance_table=_table(acceptance, source, f"{key}.acceptance"))
    return SpeculativeSpec(method, k, _rates(acceptance, k, source, f"{key}.acceptance"), draft)


ACCEPTANCE_FORMS = ("must be {mean_accepted: a} (the mean of the k proposals accepted, 0 <= a <= k), "
                    "{rates: [p1, ..., pk]} (each position's acceptance given the ones before, in [0, 1]) or "
                    "{table: NAME-or-PATH, dataset: NAME} (a published measurement's row, with model: and proposer: "
                    "where it must be named)")


def _table(raw: dict, source: str, key: str) -> AcceptanceTable:
    """acceptance: {table, dataset[, model][, proposer]}: names, checked here; the row is read by the experiment."""
    known_keys(raw, TABLE_KEYS, source, key)
    names: dict[str, str | None] = {}
    for name in TABLE_KEYS:
        value = raw.get(name)
        if (value is None and name in ("table", "dataset")) or (value is not None and (
                not isinstance(value, str) or not value.strip())):
            raise SpecError(source, f"{key}.{name}", f"must be a name, got {value!r}")
        names[name] = value
    return AcceptanceTable(str(names["table"]), str(names["dataset"]), names["model"], names["proposer"])


def _rates(raw: Any, k: int, source: str, key: str) -> tuple[float, ...]:
    """acceptance: {mean_accepted: a} with 0 <= a <= k, or {rates: [p1..pk]} each in [0, 1]."""
    if not isinstance(raw, dict) or len(raw) != 1 or next(iter(raw)) not in ACCEPTANCE_KEYS:
        raise SpecError(source, key, f"{ACCEPTANCE_FORMS}, got {raw!r}")
    if "mean_accepted" in raw:
        mean = raw["mean_accepted"]
        if not _real(mean) or not 0 <= mean <= k:
            raise SpecError(source, f"{key}.mean_accepted", f"must be a number in [0, {k}] (num_speculative_tokens), "
                                                            f"got {mean!r}")
        return (rate_for_mean(float(mean), k),) * k
    rates = raw["rates"]
    if not isinstance(rates, list) or len(rates) != k:
        raise SpecError(source, f"{key}.rates", f"must be a list of {k} rates (one per proposed token), got {rates!r}")
    for i, rate in enumerate(rates):
        if not _real(rate) or not 0 <= rate <= 1:
            raise SpecError(source, f"{key}.rates[{i}]", f"must be a number in [0, 1], got {rate!r}")
    return tuple(float(rate) for rate in rates)


def _real(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value \
        and value not in (float("inf"), float("-inf"))
