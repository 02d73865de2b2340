"""`servesim validate --repeat N`: the whole validation N times (calibration included), and the spread of
its headline figures across them.

Repeat k is written into <out>/.repeat-k.partial and renamed to <out>/repeat-k only once it has finished
(its headline.json written last), so a folder named repeat-k is always a whole validation. Run again
after an interruption, the command keeps the finished repeats, discards a partial one and runs the rest.
<out>/repeats.csv has one row per repeat and figure; <out>/repeats.txt the spread (min, max, max - min).
"""
from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from fidelity.verdict import FIGURES, HEADLINE_KEYS
from sim.experiment.output import write_csv, write_text

SPREAD_FIGURES = ("mean_abs_error", "signed_mean_error", "worst_error", "within_noise")
REPEAT_COLUMNS = ("repeat", "figure", *HEADLINE_KEYS)


def repeat_dir(out_dir: Path, k: int) -> Path:
    return Path(out_dir) / f"repeat-{k}"


def finished(folder: Path) -> dict | None:
    """A finished repeat's headline figures; None if it has not finished."""
    path = folder / "headline.json"
    return json.loads(path.read_text()) if path.is_file() else None


def run_repeats(n: int, out_dir: str | Path, validate_once: Callable[[Path], dict],
                log: Callable[[str], None] = print) -> pd.DataFrame:
    """Run `validate_once(folder)` (it writes a whole validation there, headline.json last, and returns its
    headline figures) for every repeat not yet finished; returns repeats.csv's frame."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    figures = {}
    for k in range(1, n + 1):
        folder = repeat_dir(out_dir, k)
        done = finished(folder)
        if done is not None:
            log(f"repeat {k}/{n}: already finished in {folder}; kept")
            figures[k] = done
            continue
        partial = out_dir / f".repeat-{k}.partial"
        if partial.exists():  # an interrupted run's: its replays are not resumable mid-way
            shutil.rmtree(partial)
        log(f"repeat {k}/{n} -> {folder}")
        validate_once(partial)
        if finished(partial) is None:
            raise RuntimeError(f"repeat {k} wrote no headline.json in {partial}")
        os.replace(partial, folder)
        figures[k] = finished(folder)
    frame = repeats_frame(figures)
    write_csv(frame, out_dir / "repeats.csv")
    write_text(spread_text(frame) + "\n", out_dir / "repeats.txt")
    return frame


def repeats_frame(figures: dict[int, dict]) -> pd.DataFrame:
    rows = [{"repeat": k, "figure": name, **{key: h.get(key) for key in HEADLINE_KEYS}}
            for k, per_repeat in sorted(figures.items()) for name, h in per_repeat.items()]
    return pd.DataFrame(rows, columns=list(REPEAT_COLUMNS))


def spread(frame: pd.DataFrame) -> pd.DataFrame:
    """Per figure and headline key: min, max and max - min over the repeats."""
    rows = []
    for name, rows_ in frame.groupby("figure", sort=False):
        for key in SPREAD_FIGURES:
            values = rows_[key].astype(float)
            rows.append({"figure": name, "key": key, "min": values.min(), "max": values.max(),
                         "spread": values.max() - values.min(), "repeats": len(values)})
    return pd.DataFrame(rows, columns=["figure", "key", "min", "max", "spread", "repeats"])


def spread_text(frame: pd.DataFrame) -> str:
    if not len(frame):
        return "no repeat finished"
    n = frame["repeat"].nunique()
    lines = [f"{n} repeat(s) of the whole validation; per figure, each repeat's value, then max - min:"]
    order = {name: i for i, name in enumerate(FIGURES)}  # the verdict first, as headline_text lists them
    for name, rows_ in sorted(frame.groupby("figure", sort=False), key=lambda g: order.get(g[0], len(order))):
        what = FIGURES.get(name, ("", ""))[1]
        points = int(rows_["points"].max())
        lines.append(f"{'VERDICT ' if name == 'verdict' else ''}{name} ({what}):")
        for key in SPREAD_FIGURES:
            values = rows_[key].astype(float).tolist()
            if key == "within_noise":
                shown = ", ".join(f"{int(v)}/{points}" for v in values)
                lines.append(f"  {key:<18} {shown}  (spread {max(values) - min(values):.0f} points)")
            else:
                shown = ", ".join(f"{v:.1%}" if key == "mean_abs_error" else f"{v:+.1%}" for v in values)
                lines.append(f"  {key:<18} {shown}  (spread {100 * (max(values) - min(values)):.1f} points)")
        if name == "verdict":
            lines.extend(target_rows(rows_, points))
    return "\n".join(lines)


def target_rows(rows_: pd.DataFrame, points: int) -> list[str]:
    """The verdict's per-point target in each repeat, without and with the saturation rule
    (fidelity/saturation.py); nothing for repeats written before the rule."""
    if "within_target" not in rows_ or rows_["within_target"].isna().all():
        return []

    def counts(key: str) -> str:
        return ", ".join("n/a" if v != v else f"{int(v)}/{points}" for v in rows_[key].astype(float))

    def signed(key: str) -> str:
        return ", ".join("n/a" if v != v else f"{v:+.1%}" for v in rows_[key].astype(float))

    return [f"  per-point target (within 10% or inside the real spread): without the saturation rule "
            f"{counts('within_target')}; with it {counts('within_target_with_rule')}",
            f"  past saturation    {counts('past_saturation')} points (judged by makespan, worst "
            f"{signed('worst_makespan_past_saturation')}); worst latency error below saturation "
            f"{signed('worst_below_saturation')}"]
