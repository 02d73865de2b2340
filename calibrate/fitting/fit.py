"""Fit a cost model to profiled iteration times, and say how wrong it is on shapes it never saw.

The model has two parts (docs/cost-model-split.md). The device part, fitted here, is the forward's device
time: `device_s` where the raw CSV has it (the CUDA-event span of the forward's kernels; on a CPU the
forward's wall time), else `time_s` (a CSV from before the split, whose forward time holds the host work
inside the forward too). The host part (calibrate/fitting/host_fit.py) is the rest of the iteration's wall time.

Least squares on relative error (each row divided by its time, so a 2 ms decode counts as
much as a 2 s prefill), with non-negative coefficients: every term is a physical cost, and
so is every value of the token-cost table (calibrate/work/features.py). The table's knots are
placed at the token counts of the rows a fit may see; the reported error is k-fold
cross-validated, each shape predicted by a fit (knots included) that never saw it.
"""
from __future__ import annotations

import datetime as dt
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from calibrate.fitting.folds import assign_folds
from calibrate.fitting.host_fit import HOST_COLUMN, MIN_ROWS, fit_host, host_observations
from calibrate.fitting.profile_file import DTYPE_BYTES, Profile
from calibrate.maths.nnls import nnls
from calibrate.profiling.serving import PLAUSIBLE, serving_factor
from calibrate.profiling.speed import PROBE_SHAPES, SpeedSamples
from calibrate.work.features import (
    FEATURE_COLUMNS,
    TERMS,
    block_term_measurable,
    choose_knots,
    design_matrix,
    term_matrix,
    token_costs,
)
from engine.errors import SpecError
from engine.specs.loader import load_model_spec

# rows that are not an iteration shape to fit: swap rows time PCIe; probe rows the machine, over and over;
# host rows the work around the forward; serving rows a replay's iterations beside the same shapes alone
NOT_SHAPES = ("swap", "probe", "host", "serving")
REQUIRED_COLUMNS = ("kind", *FEATURE_COLUMNS, "time_s", "model", "device", "device_name", "dtype", "block_size")
DEVICE_COLUMN = "device_s"  # a profiled shape's device seconds (raw CSVs from before the split lack it)


@dataclass
class FitResult:
    profile: Profile
    predictions: pd.DataFrame  # every row: predicted_s (final fit), heldout_predicted_s, ape of the latter, fold


@dataclass
class Fit:
    """A fitted cost model: the token-cost table and the TERMS coefficients."""
    knots: list[int]
    token_costs_s: list[float]
    coefficients: np.ndarray  # in TERMS order

    def predict(self, rows: pd.DataFrame) -> np.ndarray:
        return (token_costs(rows["num_tokens"].to_numpy(), self.knots, self.token_costs_s)
                + term_matrix(rows) @ self.coefficients)


def fit_rows(train: pd.DataFrame) -> Fit:
    """Least squares on relative error, all coefficients non-negative, knots from these rows' sizes.
    decode_block_s stays 0 unless the rows timed decodes at two or more block sizes."""
    knots = choose_knots(train["num_tokens"])
    x = design_matrix(train, knots)
    fitted = np.ones(x.shape[1], dtype=bool)
    if not block_term_measurable(train):
        fitted[len(knots) + list(TERMS).index("decode_block_s")] = False
    t = train["time_s"].to_numpy(dtype=float)
    scale = np.abs(x[:, fitted]).max(axis=0)
    scale[scale == 0] = 1.0
    weighted = x[:, fitted] / t[:, None] / scale  # relative error, columns on one scale for conditioning
    coef = np.zeros(x.shape[1])
    coef[fitted] = nnls(weighted, np.ones(len(t))) / scale
    return Fit(knots, [float(c) for c in coef[:len(knots)]], coef[len(knots):])


def check_raw(raw: pd.DataFrame, source: str) -> pd.DataFrame:
    """The CSV's columns checked as numbers before anything computes with them; returns the frame with
    its number columns as numbers (a cell of text read by pandas would make the column text)."""
    missing = [c for c in REQUIRED_COLUMNS if c not in raw.columns]
    if missing:
        raise SpecError(source, f"column {missing[0]}", f"missing; a profile CSV has {list(REQUIRED_COLUMNS)}")
    raw = raw.assign(kind=raw["kind"].astype(str))
    shapes = int((~raw["kind"].isin(NOT_SHAPES)).sum())
    if shapes < 12:
        raise SpecError(source, "rows", f"only {shapes} profiled shapes; a fit needs at least 12")
    raw = raw.assign(time_s=pd.to_numeric(raw["time_s"], errors="coerce"))
    bad = raw.index[~(np.isfinite(raw["time_s"]) & (raw["time_s"] > 0))]
    if len(bad):
        raise SpecError(source, f"row {int(bad[0]) + 1}", "time_s must be a positive number of seconds")
    is_shape = ~raw["kind"].isin(NOT_SHAPES)
    for column, low in (*((c, 0) for c in FEATURE_COLUMNS), ("block_size", 1), ("tensor_parallel", 1)):
        if column not in raw.columns:
            continue
        values = pd.to_numeric(raw[column], errors="coerce")
        # counts: whole, in range, and small enough that their squares (sum_prefill_sq) stay exact
        ok = np.isfinite(values) & (values >= low) & (values == np.floor(values)) & (values < 2.0**53)
        bad = raw.index[is_shape & ~ok]
        if len(bad):
            cell = raw[column].iloc[int(bad[0])]
            raise SpecError(source, f"row {int(bad[0]) + 1}",
                            f"column {column}: {cell!r} is not a whole number >= {low}")
        raw = raw.assign(**{column: values})
    # empty where a row measured none (a probe, a swap; a shape the profiler could not time apart); host_s may
    # dip below 0 where the device's clock and the host's disagree by a little (fit_host_part reads it as 0)
    for column, check, what in ((DEVICE_COLUMN, lambda v: v > 0, "a positive"),
                                (HOST_COLUMN, np.isfinite, "a")):
        if column in raw.columns:
            values = pd.to_numeric(raw[column], errors="coerce")
            bad = raw.index[(values.isna() & raw[column].notna()) | (values.notna() & ~check(values))]
            if len(bad):
                raise SpecError(source, f"row {int(bad[0]) + 1}",
                                f"{column} must be {what} number of seconds or empty, got {raw[column][bad[0]]!r}")
    # block_size may vary: a block-size sweep times decodes at several
    for column in ("model", "device", "dtype", "torch_threads"):
        if column not in raw.columns:
            continue
        if raw[column].nunique(dropna=False) != 1:
            raise SpecError(source, f"column {column}",
                            f"one profile fits one {column}; found {sorted(map(str, raw[column].unique()))}")
    first = raw.iloc[0]
    if first["dtype"] not in DTYPE_BYTES:
        raise SpecError(source, "column dtype", f"{first['dtype']!r} is not one of {list(DTYPE_BYTES)}")
    load_model_spec(str(first["model"]))  # an unknown model: a SpecError listing the shipped ones
    return raw


def speed_reference(raw: pd.DataFrame, source: str) -> dict:
    """The speed probe's median times while the grid was measured (empty for a CSV without probes)."""
    if "probe" not in raw.columns:
        return {}
    probes = raw[raw["kind"] == "probe"]
    samples = SpeedSamples()
    for name, t in zip(probes["probe"], probes["time_s"]):
        if name not in samples.times:
            raise SpecError(source, "column probe", f"unknown probe {name!r}; valid: {list(PROBE_SHAPES)}")
        samples.add(name, float(t))
    return samples.reference() if samples.count else {}


def fit_swap(rows: pd.DataFrame, source: str) -> tuple[float | None, float | None]:
    """(seconds per copy, seconds per byte) from the swap rows (calibrate/profiling/profile.py swap_rows), fitted
    non-negative on relative error; (None, None) without swap rows. A CSV from before copies were counted has
    swap_s_per_block, timed on one run of blocks per layer: read as bytes, nothing per copy; one from before
    they were named so calls them swap_transfers."""
    if rows.empty:
        return None, None
    if "swap_transfers" in rows.columns and "swap_copies" not in rows.columns:
        rows = rows.rename(columns={"swap_transfers": "swap_copies"})
    if "swap_copies" not in rows.columns or rows["swap_copies"].isna().all():
        per_block = rows["swap_s_per_block"].dropna() if "swap_s_per_block" in rows.columns else pd.Series(dtype=float)
        if per_block.empty:
            return None, None
        first = rows.iloc[0]
        if first["dtype"] not in DTYPE_BYTES:
            raise SpecError(source, "column dtype", f"{first['dtype']!r} is not one of {list(DTYPE_BYTES)}")
        element = DTYPE_BYTES[first["dtype"]]
        block_bytes = (load_model_spec(first["model"]).kv_bytes_per_token(element) * int(first["block_size"])
                       / int(first.get("tensor_parallel", 1)))
        return 0.0, float(per_block.median()) / block_bytes
    x = rows[["swap_copies", "swap_bytes"]].to_numpy(dtype=float)
    seconds = rows["swap_s"].to_numpy(dtype=float)
    keep = seconds > 0  # a swap lost in the timing noise says nothing about either cost
    if not keep.any():
        return 0.0, 0.0
    x, seconds = x[keep], seconds[keep]
    scale = x.max(axis=0)
    scale[scale == 0] = 1.0
    per_transfer, per_byte = nnls(x / seconds[:, None] / scale, np.ones(len(seconds))) / scale
    return float(per_transfer), float(per_byte)


def grid_block_size(shapes: pd.DataFrame) -> int:
    """The block size most shapes were timed at (the grid's; a sweep adds a few shapes at others)."""
    counts = shapes["block_size"].astype(int).value_counts()
    return int(counts[counts == counts.max()].index.min())


def fit_profile(raw: pd.DataFrame, source: str, command: str, folds: int = 5, seed: int = 0) -> FitResult:
    """Coefficients from all shapes; the error from k-fold cross-validation.

    Every shape is predicted once by a fit that never saw it (its knots chosen without it
    too), so the reported error covers every kind of shape rather than one lucky split.
    """
    raw = check_raw(raw, source)
    swap_s_per_copy, swap_s_per_byte = fit_swap(raw[raw["kind"] == "swap"], source)
    reference = speed_reference(raw, source)
    host = fit_host_part(raw, folds, seed)
    serving_rows = raw[raw["kind"] == "serving"]
    serving = serving_factor(serving_rows["time_s"], serving_rows["alone_s"]) if len(serving_rows) >= 10 else None
    if serving is not None and not PLAUSIBLE[0] <= serving["factor"] <= PLAUSIBLE[1]:
        warnings.warn(f"{source}: serving factor {serving['factor']:.3f} is outside {list(PLAUSIBLE)}: the machine "
                      f"changed speed between the replay and its re-timing; the profile charges the forward as "
                      f"timed alone (re-profile on a quieter machine to measure it)", stacklevel=2)
        serving = None
    raw = raw[~raw["kind"].isin(NOT_SHAPES)].reset_index(drop=True)
    device_s, device_from = device_times(raw)
    raw = raw.assign(wall_s=raw["time_s"], time_s=device_s)  # the device part is fitted to device time
    fold = assign_folds(raw, folds, seed)
    heldout_predicted = np.zeros(len(raw))
    for k in range(folds):
        test = fold == k
        heldout_predicted[test] = fit_rows(raw[~test]).predict(raw[test])  # knots chosen without them too
    final = fit_rows(raw)
    time_s = raw["time_s"].to_numpy(dtype=float)
    heldout_ape = np.abs(heldout_predicted - time_s) / time_s
    first = raw.iloc[0]
    versions = {c.removesuffix("_version"): str(first[c]) for c in raw.columns if c.endswith("_version")}
    profile = Profile(
        model=str(first["model"]), device=str(first["device"]), device_name=str(first["device_name"]),
        dtype=str(first["dtype"]), tensor_parallel=int(first.get("tensor_parallel", 1)),
        block_size=grid_block_size(raw), token_knots=final.knots, token_costs_s=final.token_costs_s,
        coefficients={term: float(c) for term, c in zip(TERMS, final.coefficients)},
        heldout_mape=float(heldout_ape.mean()), heldout_p95_ape=float(np.quantile(heldout_ape, 0.95)),
        train_rows=int(len(raw)), heldout_rows=int(len(raw)),
        created=dt.date.today().isoformat(), command=command,
        swap_s_per_copy=swap_s_per_copy, swap_s_per_byte=swap_s_per_byte,
        block_sizes=sorted(int(b) for b in raw["block_size"].unique()),
        versions=versions,
        torch_threads=int(first["torch_threads"]) if "torch_threads" in raw.columns else None,
        grid={kind: int(n) for kind, n in raw["kind"].value_counts().sort_index().items()},
        heldout_method=f"{folds}-fold cross-validation, stratified by kind (seed {seed})",
        speed_reference=reference,
        host=host,
        serving=serving,
        device_part={"measured_from": device_from, "shapes": int(len(raw))},
    )
    predictions = raw.assign(predicted_s=final.predict(raw), heldout_predicted_s=heldout_predicted,
                             ape=heldout_ape, fold=fold)
    return FitResult(profile, predictions)


def device_times(shapes: pd.DataFrame) -> tuple[np.ndarray, str]:
    """Each profiled shape's device seconds, and where they came from in words: device_s where measured,
    else the forward's wall time (time_s), which on a GPU also holds the host work inside the forward."""
    wall = shapes["time_s"].to_numpy(dtype=float)
    if DEVICE_COLUMN not in shapes.columns or shapes[DEVICE_COLUMN].isna().all():
        return wall, ("time_s: the forward's wall time (the raw CSV predates device_s: the host work inside "
                      "the forward is in the device part)")
    device = pd.to_numeric(shapes[DEVICE_COLUMN]).to_numpy(dtype=float)
    missing = np.isnan(device)
    what = "device_s: the forward's device time (the span of its kernels; on a CPU its wall time)"
    if not missing.any():
        return device, what
    return np.where(missing, wall, device), (f"{what}, on {int((~missing).sum())} shapes; time_s (the forward's "
                                             f"wall time) on {int(missing.sum())} that lack it")


def fit_host_part(raw: pd.DataFrame, folds: int, seed: int) -> dict | None:
    """The host part (calibrate/fitting/host_fit.py) from every row that measured host time; None with fewer than
    MIN_ROWS of them (the simulator then charges the device part alone)."""
    rows = host_observations(raw, ~raw["kind"].isin(NOT_SHAPES))
    if len(rows) < MIN_ROWS:
        return None
    below = rows["time_s"] < 0
    if below.any():
        warnings.warn(f"{int(below.sum())} rows measured host_s below 0 (down to {rows['time_s'].min() * 1e6:.1f} us: "
                      f"the device's and the host's clocks disagree by that much); read as 0", stacklevel=3)
        rows = rows.assign(time_s=rows["time_s"].clip(lower=0.0))
    replay = raw[raw["kind"] == "host"]
    replay_column = HOST_COLUMN if HOST_COLUMN in raw.columns and replay[HOST_COLUMN].notna().any() else "time_s"
    return fit_host(rows, folds, seed, replay_column)


def fit_and_save(raw: pd.DataFrame, source: str, command: str, profile_path: str | Path,
                 plot_path: str | Path | None = None, folds: int = 5, seed: int = 0) -> FitResult:
    """fit_profile, then write the profile and its predicted-vs-measured plot (beside it by default)."""
    result = fit_profile(raw, source, command, folds=folds, seed=seed)
    result.profile.save(profile_path)
    plot = Path(plot_path) if plot_path is not None else Path(profile_path).with_suffix(".png")
    fit_plot(result.predictions, plot, title=f"{result.profile.model} on {result.profile.device_name}")
    return result


def fit_plot(predictions: pd.DataFrame, path, title: str = ""):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from engine.atomic import write_atomic

    fig, ax = plt.subplots(figsize=(4.2, 4.0))
    for kind, rows in predictions.groupby("kind", sort=True):
        ax.scatter(rows["time_s"] * 1e3, rows["heldout_predicted_s"] * 1e3, s=14, label=kind, alpha=0.7)
    lo = float(min(predictions["time_s"].min(), predictions["predicted_s"].min()) * 1e3)
    hi = float(max(predictions["time_s"].max(), predictions["predicted_s"].max()) * 1e3)
    ax.plot([lo, hi], [lo, hi], color="gray", linewidth=0.8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("measured device part of the iteration (ms)")
    ax.set_ylabel("predicted when held out (ms)")
    ax.legend(frameon=False, fontsize=8)
    if title:
        ax.set_title(title, fontsize=9)
    write_atomic(path, lambda f: fig.savefig(f, format="png", dpi=120, bbox_inches="tight",
                                             metadata={"Software": None}))
    plt.close(fig)
