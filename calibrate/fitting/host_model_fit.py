"""A host model fitted to a measured table of host work (calibrate/tables/host_table.py), with its held-out error.

Each term is fitted apart, non-negative (calibrate/maths/nnls.py), on the features TERM_FEATURES gives it, every row
weighted by 1 / its total host time, so that the fit minimises the relative error of the per-iteration total
(the figure judged). A feature that scales with something the training rows do not vary (one vocabulary, one
context, one tensor-parallel degree) is left out of that fit: the rows cannot say what it costs, and its
coefficient is 0.

The terms and their features, from what the two public vintages show:

- schedule, process_outputs: per iteration and per sequence; process_outputs, and prepare_inputs, also per
  sequence per 1k tokens of context (the January engine's CodeLlama-34B rows, 16k context, spend 3.5x the
  Llama-2 rows' (4k) prepare_inputs per sequence: block tables sized by the context);
- sampler: per iteration and per sequence, each also per 1k tokens of vocabulary (the May file's Qwen-72B,
  152k vocabulary, samples at 3x Llama-2's cost per sequence);
- prepare_inputs: also a multi-worker part (May: twice the per-iteration cost at tensor_parallel > 1);
- worker_comm (Ray's driver-worker calls): per iteration and per sequence at any degree (one Ray worker is
  called at tensor_parallel 1 too: 0.16-1.0 ms measured), a multi-worker step at tensor_parallel > 1 (about
  6 ms in May), with a per-sequence part per 1k tokens of context, and per worker beyond two.

Where this differs from Vidur's predictor: Vidur fits each (model, tensor-parallel degree) apart on batch size
alone, so it prices only the models and degrees measured; here model size and workers are features, so one
fit prices any ModelSpec and degree. Like Vidur, the four CPU steps are medians and worker_comm the file's
only statistic (May: mean; January: median). Both add the terms in series to the device time.

Held-out error, on the per-iteration total, mean |error| relative to the measured total:
- leave one model out: each model's rows predicted by a fit on the other models' rows;
- largest batches: the rows at the file's largest batch size predicted by a fit on the smaller batches.
"""
from __future__ import annotations

import numpy as np

from calibrate.maths.nnls import nnls
from calibrate.parts.host_model import HostModel
from calibrate.tables.host_table import HostTable
from calibrate.work.host_features import FEATURES, ITERATION, SEQUENCE

TARGET = 0.10  # held-out mean |error| of the per-iteration total host time
TERM_FEATURES = {
    "schedule": ("per_iteration_s", "per_sequence_s"),
    "sampler": ("per_iteration_s", "per_sequence_s", "per_iteration_per_kvocab_s", "per_sequence_per_kvocab_s"),
    "prepare_inputs": ("per_iteration_s", "per_sequence_s", "per_sequence_per_kcontext_s",
                       "multi_worker_per_iteration_s", "multi_worker_per_sequence_s"),
    "process_outputs": ("per_iteration_s", "per_sequence_s", "per_sequence_per_kcontext_s"),
    "worker_comm": ("per_iteration_s", "per_sequence_s", "multi_worker_per_iteration_s",
                    "multi_worker_per_sequence_s", "multi_worker_per_sequence_per_kcontext_s",
                    "per_extra_worker_per_iteration_s", "per_extra_worker_per_sequence_s"),
}


def feature_column(table: HostTable, feature: str) -> np.ndarray:
    """A feature's value on each row: its scale for the row's model and degree, times the batch's sequences
    where it is paid per sequence (the table's rows have no prompt tokens)."""
    f = FEATURES[feature]
    scale = np.array([f.scale(size, int(tp)) for size, tp in zip(table.sizes(), table.tensor_parallel)])
    if f.paid == SEQUENCE:
        return scale * table.batch_size
    return scale if f.paid == ITERATION else np.zeros(len(table))


def said(table: HostTable, feature: str) -> bool:
    """Whether the rows can tell a feature's cost from the plain per-iteration or per-sequence one's: its
    scale (model size, workers) takes more than one value among them."""
    f = FEATURES[feature]
    if f.size is None and f.workers is None:
        return True
    scales = {f.scale(size, int(tp)) for size, tp in zip(table.sizes(), table.tensor_parallel)}
    return len(scales) > 1


def fit_terms(table: HostTable) -> dict[str, dict[str, float]]:
    """Every term's coefficients, fitted non-negative on these rows alone."""
    weight = 1.0 / table.total_s
    terms = {}
    for term, features in TERM_FEATURES.items():
        used = [f for f in features if said(table, f)]
        x = np.column_stack([feature_column(table, f) for f in used]) * weight[:, None]
        coef = nnls(x, table.seconds[term] * weight)
        fitted = dict(zip(used, (float(c) for c in coef)))
        terms[term] = {f: fitted.get(f, 0.0) for f in features}
    return terms


def predict_total(terms: dict[str, dict[str, float]], table: HostTable) -> np.ndarray:
    return sum((c * feature_column(table, f) for coefs in terms.values() for f, c in coefs.items()),
               np.zeros(len(table)))


def model_folds(table: HostTable) -> dict[str, np.ndarray]:
    """Leave one model out: each model's rows, the fold it is held out in."""
    models = np.asarray(table.models, dtype=object)
    return {m: models == m for m in dict.fromkeys(table.models)}


def largest_batches(table: HostTable) -> np.ndarray:
    return table.batch_size >= table.batch_size.max()


def heldout_predictions(table: HostTable) -> dict[str, np.ndarray]:
    """Each held-out row's predicted total by a fit that never saw it: 'leave_one_model_out' (every row)
    and 'largest_batches' (the rows at the largest batch size; NaN elsewhere)."""
    by_model = np.full(len(table), np.nan)
    for held in model_folds(table).values():
        if held.all():
            continue  # one model alone: nothing to fit on
        by_model[held] = predict_total(fit_terms(table.select(~held)), table.select(held))
    largest = np.full(len(table), np.nan)
    held = largest_batches(table)
    if not held.all():
        largest[held] = predict_total(fit_terms(table.select(~held)), table.select(held))
    return {"leave_one_model_out": by_model, "largest_batches": largest}


def heldout_errors(table: HostTable) -> dict:
    """The held-out figures a host model file keeps (calibrate/parts/host_model.py), each beside its target."""
    total = table.total_s
    predicted = heldout_predictions(table)
    error = {k: np.abs(p / total - 1) for k, p in predicted.items()}
    lomo = error["leave_one_model_out"]
    by_model = {m: _mean(lomo[held]) for m, held in model_folds(table).items()}
    held = largest_batches(table)
    fitted = np.abs(predict_total(fit_terms(table), table) / total - 1)
    return {
        "target_mean_abs_error": TARGET,
        "leave_one_model_out": {"mean_abs_error": _mean(lomo), "p95_abs_error": _quantile(lomo, 0.95),
                                "rows": int(np.isfinite(lomo).sum()), "by_model": by_model},
        "largest_batches": {"batch_size_at_least": int(table.batch_size.max()),
                            "mean_abs_error": _mean(error["largest_batches"][held]), "rows": int(held.sum())},
        "in_sample_mean_abs_error": _mean(fitted),
        "rows": len(table),
        "mean_host_s": float(total.mean()),
    }


def _mean(values: np.ndarray) -> float | None:
    values = values[np.isfinite(values)]
    return float(values.mean()) if len(values) else None


def _quantile(values: np.ndarray, q: float) -> float | None:
    values = values[np.isfinite(values)]
    return float(np.quantile(values, q)) if len(values) else None


def fit_host_model(table: HostTable, name: str, measured: str, source: str, licence: str) -> HostModel:
    terms = {term: {f: c for f, c in coefs.items() if c > 0} or {"per_iteration_s": 0.0}
             for term, coefs in fit_terms(table).items()}
    heldout = heldout_errors(table)
    heldout["fitted_on"] = (f"{len(table)} rows of {table.source.rsplit('/', 1)[-1]}: "
                            f"{len(set(table.models))} models, batch sizes {int(table.batch_size.min())}-"
                            f"{int(table.batch_size.max())}, tensor_parallel "
                            f"{sorted(set(int(t) for t in table.tensor_parallel))}; worker_comm from "
                            f"{table.columns['worker_comm']}")
    return HostModel(name, measured, source, licence, terms, heldout)
