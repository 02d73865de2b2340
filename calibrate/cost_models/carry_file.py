"""The shipped choice of what prices each regime's linear part on a GPU nobody measured
(calibrate/profiles/carry/held-out-gpus.yaml), and the held-out table it was chosen on.

research/cost_models/hold_one_gpu_out.py writes it from every measured GPU held out in turn
(research/judging/gpu_holdout.py, calibrate/judging/carry_rule.py); the transfer cost model reads it off the GPU a
profile measured (calibrate/cost_models/transfer_cost.py), so a run never needs the measurements. It holds:

  rule      the rule, in words
  gpus      each measured GPU and what measured it
  choice    per regime: the carry that prices it, or `roofline`, and why in one line
  fits      each chosen carry's parameters (LinearFit.to_dict), fitted on all its GPUs' rows
  held_out  per held-out GPU and regime: the rows, and each carry's and the roofline's mean, p95 and worst |error|

A malformed entry is a one-line error naming the file and its key.
"""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import yaml

from calibrate.fitting.profile_file import check_fit
from calibrate.judging.carry_rule import ROOFLINE, HeldOutScore, RegimeVerdict
from calibrate.parts.linear_model import LinearFit
from calibrate.parts.transfer import FINE_REGIMES, CarriedFit, RegimeChoice
from engine.errors import SpecError
from engine.specs.checks import choice, non_negative, positive_int
from engine.specs.loader import read_yaml

FORMAT = "servesim-carry/1"
CARRY_FILE = Path(__file__).resolve().parents[1] / "profiles" / "carry" / "held-out-gpus.yaml"
KEYS = ("format", "command", "created", "rule", "provenance", "gpus", "choice", "fits", "held_out")
ERRORS = ("mean", "p95", "worst")


def carry_dict(verdicts: dict[str, RegimeVerdict], fits: dict[str, LinearFit], scores: list[HeldOutScore],
               gpus: dict[str, str], rule: str, command: str, created: str, provenance: dict) -> dict:
    """The file's data: `fits` holds (at least) every chosen carry's parameters; `scores` every held-out score."""
    chosen = {v.carry for v in verdicts.values()} - {ROOFLINE}
    return {"format": FORMAT, "command": command, "created": created, "rule": rule, "provenance": provenance,
            "gpus": gpus, "choice": {r: {"carry": v.carry, "reason": v.reason} for r, v in verdicts.items()},
            "fits": {name: fits[name].to_dict() for name in sorted(chosen)}, "held_out": _table(scores)}


def _table(scores: list[HeldOutScore]) -> dict:
    table: dict = {}
    for s in scores:
        entry = table.setdefault(s.held_out, {}).setdefault(s.regime, {"rows": s.rows, "errors": {}})
        if entry["rows"] != s.rows:
            raise ValueError(f"{s.held_out} {s.regime}: {s.carry} was judged on {s.rows} rows, another on "
                             f"{entry['rows']}: every carry is judged on the same rows")
        entry["errors"][s.carry] = {"mean": round(s.mean, 6), "p95": round(s.p95, 6), "worst": round(s.worst, 6)}
    return table


def dump_carry(data: dict) -> str:
    header = ("# servesim: what prices each regime's linear part on a GPU nobody measured, chosen with every measured "
              "GPU held out in turn\n"
              f"# made by: {data['command']}\n")
    # the tables' innermost mappings on one line each (a fit's kernel, a carry's errors), the rest one key a line
    return header + "".join(yaml.safe_dump({key: value}, sort_keys=False, width=120,
                                           default_flow_style=None if key in ("fits", "held_out") else False)
                            for key, value in data.items())


def load_carry(path: str | Path | None = None) -> dict:
    """The file's data (default: the shipped file's), every key checked."""
    path = path or CARRY_FILE
    source = str(path)
    data = read_yaml(path, "carry choice file")
    if not isinstance(data, dict):
        raise SpecError(source, "", "must be a YAML mapping (calibrate/cost_models/carry_file.py)")
    for key in KEYS:
        if key not in data:
            raise SpecError(source, key, "missing")
    choice(data["format"], source, "format", [FORMAT])
    for key in ("command", "created", "rule"):
        _text(data[key], source, key)
    _mapping(data["gpus"], source, "gpus")
    _mapping(data["provenance"], source, "provenance")
    _check_fits(data["fits"], source)
    _check_choice(data["choice"], data["fits"], source)
    _check_held_out(data["held_out"], source)
    return data


def _text(value, source: str, key: str) -> str:
    if not isinstance(value, str) or not value:
        raise SpecError(source, key, f"must be text, got {value!r}")
    return value


def _mapping(value, source: str, key: str) -> dict:
    if not isinstance(value, dict) or not value:
        raise SpecError(source, key, f"must be a mapping, got {value!r}")
    return value


def _check_fits(fits, source: str) -> None:
    if not isinstance(fits, dict):  # empty where the roofline prices every regime
        raise SpecError(source, "fits", f"must map each chosen carry to its parameters, got {fits!r}")
    for name, fit in fits.items():
        check_fit(_mapping(fit, source, f"fits.{name}"), source, f"fits.{name}")


def _check_choice(chosen, fits, source: str) -> None:
    _mapping(chosen, source, "choice")
    for regime in chosen:
        choice(regime, source, f"choice.{regime}", list(FINE_REGIMES))
    for regime in FINE_REGIMES:
        entry = _mapping(chosen.get(regime), source, f"choice.{regime}")
        choice(entry.get("carry"), source, f"choice.{regime}.carry", [ROOFLINE, *fits])
        _text(entry.get("reason"), source, f"choice.{regime}.reason")


def _check_held_out(table, source: str) -> None:
    for gpu, regimes in _mapping(table, source, "held_out").items():
        for regime, entry in _mapping(regimes, source, f"held_out.{gpu}").items():
            key = f"held_out.{gpu}.{regime}"
            choice(regime, source, key, list(FINE_REGIMES))
            positive_int(_mapping(entry, source, key).get("rows"), source, f"{key}.rows")
            errors = _mapping(entry.get("errors"), source, f"{key}.errors")
            if ROOFLINE not in errors:
                raise SpecError(source, f"{key}.errors.{ROOFLINE}", "missing: each carry is judged beside it")
            for carry, values in errors.items():
                for name in ERRORS:
                    non_negative(_mapping(values, source, f"{key}.errors.{carry}").get(name), source,
                                 f"{key}.errors.{carry}.{name}")


def held_out_scores(data: dict) -> list[HeldOutScore]:
    """The held-out table as scores (carry_rule.HeldOutScore), as the rule reads them."""
    return [HeldOutScore(gpu, carry, regime, int(entry["rows"]), float(e["mean"]), float(e["p95"]), float(e["worst"]))
            for gpu, regimes in data["held_out"].items() for regime, entry in regimes.items()
            for carry, e in entry["errors"].items()]


def regime_choice(data: dict, source: str = "") -> RegimeChoice:
    """The choice as the cost model prices by it: each regime a carry won, priced by that carry's fit."""
    fits = {name: LinearFit.from_dict(raw) for name, raw in data["fits"].items()}
    where = f"; {Path(source).name}" if source else ""
    carried, reasons = {}, {}
    for regime in FINE_REGIMES:
        entry = data["choice"][regime]
        reasons[regime] = entry["reason"] + where
        if entry["carry"] != ROOFLINE:
            carried[regime] = CarriedFit(entry["carry"], fits[entry["carry"]])
    return RegimeChoice(frozenset(carried), reasons, FINE_REGIMES, carried)


@lru_cache(maxsize=4)
def _cached_choice(path: str, mtime: float) -> RegimeChoice:
    return regime_choice(load_carry(path), path)


def shipped_choice(path: str | Path | None = None) -> RegimeChoice:
    """The choice in `path` (default: the shipped file), read and checked once per file version."""
    resolved = Path(path or CARRY_FILE).resolve()
    if not resolved.is_file():
        raise SpecError(str(resolved), "", "no carry choice file: servesim ships it "
                        "(python research/cost_models/hold_one_gpu_out.py --write makes it)")
    return _cached_choice(str(resolved), resolved.stat().st_mtime)
