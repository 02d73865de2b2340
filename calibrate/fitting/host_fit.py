"""The host part of an iteration's cost, fitted with its own held-out error.

An iteration's wall time is device time (the forward's kernels) plus host time (Python, launches, syncs,
scheduling, building inputs, completing sequences). Two kinds of row measure host time:

- profiled shapes whose raw CSV has `host_s`: the rest of the iteration's wall time beyond its `device_s`;
- the host replay's iterations (kind "host", calibrate/parts/host.py): a served step beyond its forward, in
  `host_s` where the profiler wrote it, else in `time_s` (every raw CSV from before the split).

Host time is small and its relative error on the smallest rows would dominate a relative fit, so the
HOST_TERMS (per iteration, per sequence, per prompt token) are fitted non-negative on absolute seconds.
A per-prompt host term is not fitted: on the one replay measured (the 182 iterations in
results/reference/validation/cpu-opt-125m-calibrated/profile) it fits to 0 and leaves the held-out
error no better (13.6% -> 13.7% mean); the engine's per-prompt cost is in its forward, which the device
part prices as per_prefill_s.
The held-out error is k-fold cross-validated, stratified by where the rows came from.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from calibrate.fitting.folds import assign_folds  # one fold assignment for both parts
from calibrate.maths.nnls import nnls
from calibrate.parts.host import HOST_TERMS

HOST_COLUMN = "host_s"  # a profiled shape's host seconds (raw CSVs from before the split lack it)
REPLAY = "host replay"  # a row's source, as the held-out error by source names it
SHAPES = "profiled shapes"
MIN_ROWS = 10  # fewer rows than this measure no host part


def host_observations(raw: pd.DataFrame, shape_kinds: pd.Series) -> pd.DataFrame:
    """The rows that measured host time: num_seqs, num_prefill_tokens, time_s (their host seconds) and
    source (SHAPES or REPLAY). `shape_kinds` marks the profiled shapes among raw's rows."""
    has_column = HOST_COLUMN in raw.columns
    host_s = raw[HOST_COLUMN] if has_column else pd.Series(np.nan, index=raw.index)
    replay = raw["kind"] == "host"
    shapes = shape_kinds & host_s.notna()
    seconds = np.where(host_s.notna(), host_s, raw["time_s"])  # a replay row from before the split: time_s
    frame = raw.assign(time_s=seconds, source=np.where(replay, REPLAY, SHAPES))
    return frame.loc[replay | shapes, ["num_seqs", "num_prefill_tokens", "time_s", "source"]].reset_index(drop=True)


def host_matrix(rows: pd.DataFrame) -> np.ndarray:
    return np.column_stack([np.ones(len(rows)), rows["num_seqs"].to_numpy(float),
                            rows["num_prefill_tokens"].to_numpy(float)])


def measured_from(rows: pd.DataFrame, replay_column: str) -> str:
    """Which rows the host part was fitted on, in words."""
    counts = rows["source"].value_counts() if "source" in rows.columns else pd.Series({REPLAY: len(rows)})
    parts = []
    if counts.get(SHAPES, 0):
        parts.append(f"host_s of {counts[SHAPES]} {SHAPES}")
    if counts.get(REPLAY, 0):
        what = "host_s" if replay_column == HOST_COLUMN else "time_s: each step beyond its forward"
        parts.append(f"{counts[REPLAY]} iterations of the {REPLAY} ({what})")
    return " and ".join(parts)


def fit_host(rows: pd.DataFrame, folds: int = 5, seed: int = 0, replay_column: str = "time_s") -> dict:
    """HOST_TERMS fitted non-negative on absolute seconds, with the k-fold held-out error of each row's
    prediction: mean |error| in seconds (and its p95), and relative to the row's host time (mean and p95,
    over rows with a positive host time), overall and, where both kinds of row were measured, by kind."""
    x, y = host_matrix(rows), rows["time_s"].to_numpy(float)
    kinds = rows["source"] if "source" in rows.columns else pd.Series("host", index=rows.index)
    fold = assign_folds(rows.assign(kind=kinds), folds, seed)
    predicted = np.zeros(len(rows))
    for k in range(folds):
        test = fold == k
        predicted[test] = x[test] @ nnls(x[~test], y[~test])
    coef = nnls(x, y)
    error = np.abs(predicted - y)
    positive = y > 0
    ape = error[positive] / y[positive]
    host = {term: float(c) for term, c in zip(HOST_TERMS, coef)}
    host.update(heldout_mean_abs_error_s=float(error.mean()), mean_s=float(y.mean()), rows=int(len(rows)),
                heldout_p95_abs_error_s=float(np.quantile(error, 0.95)),
                heldout_mape=float(ape.mean()) if len(ape) else 0.0,
                heldout_p95_ape=float(np.quantile(ape, 0.95)) if len(ape) else 0.0,
                measured_from=measured_from(rows, replay_column))
    if kinds.nunique() > 1:
        host["heldout_mape_by_source"] = {
            str(source): float(np.mean(error[at & positive] / y[at & positive]))
            for source in sorted(kinds.unique()) if (at := (kinds == source).to_numpy()).any()
            and (at & positive).any()}
    return host
