"""The transfer judged on a GPU its fit never saw, per regime, beside the spec-sheet roofline.

Two GPUs are measured here, so the judge goes both ways round where the data lets it:

- A100 -> H200: the A100 per-operation fit (an imported profile's linear part) carried to the H200 spec
  sheet, against the engine's H200 prefills of 2,048 and 4,096 tokens. Those rows are whole forwards
  timed on the host, and the engine was host-bound (a decode costs ~24 ms at any batch), so only they
  are used: device work dominates them (100-490 ms against the ~24 ms host floor). They hold more than
  the linear part: the engine's own attention kernel (per prompt squared, never measured on an A100) and
  a cost per prompt and per iteration. Those are fitted on the 2,048-token rows, given each candidate's
  linear part, and both candidates are judged on the 4,096-token rows: what is judged is how the
  linear part's time grows with the tokens, i.e. the compute-bound regime's achieved FLOP/s.
- H200 -> A100: the compute share fitted on those H200 rows (the same decomposition, the share on a
  grid), carried to the A100 spec sheet, against LLaMA-7B's measured A100 linear part per iteration
  (the imported profile's token table) where it is compute-bound on the A100.

The memory-bound and ridge regimes have no held-out GPU here: the H200 decodes are host-bound. This judgement is
printed by `calibrate import` and `calibrate fit`; what prices a GPU nobody measured is chosen with every GPU whose
per-operation timings servesim has held out in turn (research/judging/gpu_holdout.py).
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

from calibrate.clock.roofline import RooflineCostModel, RooflineParams
from calibrate.fitting.profile_file import Profile
from calibrate.hardware.hardware import HardwareSpec, load_hardware
from calibrate.judging.carry_rule import SHIPPED_NOTE
from calibrate.judging.regime_errors import RegimeError, choose
from calibrate.maths.nnls import nnls
from calibrate.parts.linear_model import LinearFit
from calibrate.parts.transfer import COMPUTE_BOUND, REGIMES, regime_of
from calibrate.tables.op_table import read_csv
from engine.core.batch import Batch
from engine.errors import SpecError
from engine.specs.loader import load_model_spec

PROFILES = Path(__file__).resolve().parents[1] / "profiles"
H200_RAW = (PROFILES / "h200-llama-7b.raw.csv", PROFILES / "h200-opt-13b.raw.csv")
DEVICE_DOMINATED_TOKENS = 2048  # prefills at least this long: 4x and more the engine's host-bound floor
SHARE_GRID = np.round(np.arange(0.30, 1.0001, 0.01), 2)


def _errors(predicted, measured) -> np.ndarray:
    measured = np.asarray(measured, dtype=float)
    return np.abs(np.asarray(predicted, dtype=float) - measured) / measured


def _prefill(num_prompts: int, tokens: int) -> Batch:
    each = tokens // num_prompts
    return Batch(prefill_seq_ids=list(range(num_prompts)), prefill_lens=[each] * num_prompts,
                 prefill_sample_ids=[(i,) for i in range(num_prompts)])


def _linear_seconds(cost: RooflineCostModel, batch: Batch) -> float:
    """A forward's device time less its attention: the linear part the candidate prices."""
    return cost.iteration_time(batch) - cost.prefill_attention_time(batch)


def device_rows(path: str | Path) -> pd.DataFrame:
    """An engine profile's raw prefills that device work dominates, timed by their `device_s` where every row
    has one (the forward's device time measured apart from the host's), else by their whole `time_s`."""
    raw = read_csv(path, "raw engine profile")
    for column in ("kind", "num_prefills", "num_tokens", "sum_prefill_sq", "time_s", "model"):
        if column not in raw.columns:
            raise SpecError(str(path), f"column {column}", "missing; a raw engine profile has it")
    if "device_s" in raw.columns and pd.to_numeric(raw["device_s"], errors="coerce").notna().all():
        # the forward's device time measured apart from the host's: judge on it alone
        raw = raw.assign(time_s=pd.to_numeric(raw["device_s"]))
    rows = raw[(raw["kind"] == "prefill") & (raw["num_tokens"] >= DEVICE_DOMINATED_TOKENS)]
    if rows.empty or rows["num_tokens"].nunique() < 2:
        raise SpecError(str(path), COMPUTE_BOUND, (
            f"needs prefills of two token counts at or above {DEVICE_DOMINATED_TOKENS} (device-dominated); "
            f"found {sorted(rows['num_tokens'].unique())}"))
    return rows.reset_index(drop=True)


def _engine_terms(rows: pd.DataFrame) -> np.ndarray:
    """What the A100 never measured: the engine's attention (per prompt squared), per prompt, per iteration."""
    return np.column_stack([rows["sum_prefill_sq"], rows["num_prefills"], np.ones(len(rows))]).astype(float)


def _judged(rows: pd.DataFrame, linear: np.ndarray) -> np.ndarray:
    """Relative errors on the longest prefills, the engine's terms fitted on the shorter ones (given `linear`)."""
    time_s = rows["time_s"].to_numpy(float)
    terms = _engine_terms(rows)
    test = (rows["num_tokens"] == rows["num_tokens"].max()).to_numpy()
    weights = nnls(terms[~test] / time_s[~test, None], 1.0 - linear[~test] / time_s[~test])
    return _errors(linear[test] + terms[test] @ weights, time_s[test])


def _linear_on(rows: pd.DataFrame, cost: RooflineCostModel) -> np.ndarray:
    return np.array([_linear_seconds(cost, _prefill(int(r.num_prefills), int(r.num_tokens)))
                     for r in rows.itertuples()])


def _check_regime(rows: pd.DataFrame, hw: HardwareSpec, source: str) -> None:
    for tokens in rows["num_tokens"].unique():
        if regime_of(tokens, hw) != COMPUTE_BOUND:
            raise SpecError(source, COMPUTE_BOUND, f"{tokens} tokens are not compute-bound on {hw.name}")


def a100_to_h200(fit: LinearFit, raw_paths=H200_RAW, target: str = "h200", measured_on: str = "a100-80gb"
                 ) -> RegimeError:
    """The A100 fit's linear part carried to the H200, judged on its device-dominated prefills."""
    hw = load_hardware(target)
    ours, roof = [], []
    for path in raw_paths:
        rows = device_rows(path)
        _check_regime(rows, hw, str(path))
        spec = load_model_spec(str(rows["model"].iloc[0]))
        ours.append(_judged(rows, _linear_on(rows, RooflineCostModel(spec, hw, linear=fit))))
        roof.append(_judged(rows, _linear_on(rows, RooflineCostModel(spec, hw))))
    ours_all, roof_all = np.concatenate(ours), np.concatenate(roof)
    return RegimeError(f"{measured_on} -> {target}", COMPUTE_BOUND, len(ours_all), float(ours_all.mean()),
                       float(ours_all.max()), float(roof_all.mean()), float(roof_all.max()),
                       "engine prefills >= 2,048 tokens; its attention, per-prompt and fixed costs fitted on "
                       "the 2,048-token rows, judged on the 4,096-token rows")


def fit_compute_share(raw_paths=H200_RAW, measured_on: str = "h200") -> float:
    """The GEMMs' effective share of peak FLOP/s on the measured GPU, from its device-dominated prefills:
    the grid share whose linear part, with the engine's other terms fitted alongside, fits all rows best."""
    hw = load_hardware(measured_on)
    frames = [device_rows(p) for p in raw_paths]
    best, best_loss = float(SHARE_GRID[0]), np.inf
    for share in SHARE_GRID:
        loss = 0.0
        for rows in frames:
            spec = load_model_spec(str(rows["model"].iloc[0]))
            cost = RooflineCostModel(spec, hw, params=RooflineParams(compute_efficiency=float(share)))
            linear, time_s = _linear_on(rows, cost), rows["time_s"].to_numpy(float)
            terms = _engine_terms(rows)
            weights = nnls(terms / time_s[:, None], 1.0 - linear / time_s)
            loss += float(np.sum(((linear + terms @ weights - time_s) / time_s) ** 2))
        if loss < best_loss:
            best, best_loss = float(share), loss
    return best


def h200_to_a100(profile: Profile, share: float, measured_on: str = "h200", target: str = "a100-80gb"
                 ) -> RegimeError:
    """The H200's fitted compute share carried to the A100, against the profile's measured A100 linear part
    per iteration (its token table: layers x one layer's operations + the embedding) where compute-bound."""
    hw = load_hardware(target)
    spec = replace(load_model_spec(profile.model), vocab_size=0)  # the tables have no LM head
    knots = np.array(profile.token_knots)
    measured = np.array(profile.token_costs_s)
    at = np.array([regime_of(k, hw) == COMPUTE_BOUND for k in knots])
    if not at.any():
        raise SpecError(profile.model, COMPUTE_BOUND, f"the token table has no compute-bound rows on {target}")
    carried = RooflineCostModel(spec, hw, params=RooflineParams(compute_efficiency=share))
    roofline = RooflineCostModel(spec, hw)
    ours = _errors([_linear_seconds(carried, _prefill(1, int(k))) for k in knots[at]], measured[at])
    roof = _errors([_linear_seconds(roofline, _prefill(1, int(k))) for k in knots[at]], measured[at])
    return RegimeError(f"{measured_on} -> {target}", COMPUTE_BOUND, int(at.sum()), float(ours.mean()),
                       float(ours.max()), float(roof.mean()), float(roof.max()),
                       f"compute share {share:.2f} fitted on the H200 prefills; {profile.model}'s A100 token table")


def judge_profile(profile: Profile, raw_paths=H200_RAW) -> list[RegimeError]:
    """Every cross-GPU judgement the shipped data allows for an imported A100 profile."""
    fit = LinearFit.from_dict(profile.linear)
    return [a100_to_h200(fit, raw_paths), h200_to_a100(profile, fit_compute_share(raw_paths))]


def report_lines(errors: list[RegimeError]) -> list[str]:
    """What `calibrate import` and `fit` print: each regime's held-out error beside the roofline's."""
    lines = [f"{'on a GPU the fit never saw':<34}{'regime':<24}{'rows':>5}  {'transfer mean (worst)':>22}"
             f"  {'roofline mean (worst)':>22}"]
    for e in errors:
        lines.append(f"  {e.direction:<32}{e.regime:<24}{e.rows:>5}  {f'{e.mean:.1%} ({e.worst:.1%})':>22}"
                     f"  {f'{e.roofline_mean:.1%} ({e.roofline_worst:.1%})':>22}")
    judged = {e.regime for e in errors}
    for regime in REGIMES:
        if regime not in judged:
            lines.append(f"  {regime}: no held-out GPU measured it (H200 decodes are host-bound)")
    lines.append("on this judgement alone: " + choose(errors).describe())
    lines.append(SHIPPED_NOTE)
    return lines


def fit_lines(raw_path: str | Path) -> list[str]:
    """What `calibrate fit` adds for an engine profile of a GPU: that GPU held out from the shipped A100 fit,
    and its own compute share carried to the A100 (nothing for a CPU profile: no GPU to carry to)."""
    from calibrate.fitting.profile_file import load_profile
    from calibrate.hardware.hardware import hardware_for_device

    head = read_csv(raw_path, "raw engine profile").head(1)
    if "device" not in head.columns or str(head["device"].iloc[0]) != "cuda":
        return []
    name = hardware_for_device(str(head["device_name"].iloc[0]))
    if name is None or name.startswith("a100"):
        return [f"on a GPU the fit never saw: not judged ({head['device_name'].iloc[0]} is not a held-out GPU "
                "for the shipped A100 fit)"]
    try:
        a100 = load_profile(PROFILES / "a100-80gb-linear.yaml")
        errors = [a100_to_h200(LinearFit.from_dict(a100.linear), [raw_path], target=name),
                  h200_to_a100(a100, fit_compute_share([raw_path], name), measured_on=name)]
    except SpecError as err:
        return [f"on a GPU the fit never saw: not judged ({err})"]
    return report_lines(errors)
