"""Synthetic host-overhead tables in Vidur's cpu_overheads.csv format, from known coefficients."""
from __future__ import annotations

from pathlib import Path

from calibrate.tables.host_table import CSV_MODELS
from calibrate.work.host_features import FEATURES, ITERATION, SEQUENCE

# what the synthetic engine costs: (term, feature) -> seconds; every feature the fit has, so that each can
# be seen recovered
TRUE_TERMS = {
    "schedule": {"per_iteration_s": 40e-6, "per_sequence_s": 15e-6},
    "sampler": {"per_iteration_s": 350e-6, "per_sequence_s": 3e-6, "per_iteration_per_kvocab_s": 3e-6,
                "per_sequence_per_kvocab_s": 60e-9},
    "prepare_inputs": {"per_iteration_s": 280e-6, "per_sequence_s": 5e-6, "per_sequence_per_kcontext_s": 3e-6,
                       "multi_worker_per_iteration_s": 440e-6, "multi_worker_per_sequence_s": 1e-6},
    "process_outputs": {"per_iteration_s": 60e-6, "per_sequence_s": 15e-6, "per_sequence_per_kcontext_s": 2e-6},
    "worker_comm": {"per_iteration_s": 200e-6, "per_sequence_s": 4e-6, "multi_worker_per_iteration_s": 5.7e-3,
                    "multi_worker_per_sequence_s": 50e-6, "multi_worker_per_sequence_per_kcontext_s": 1e-6,
                    "per_extra_worker_per_iteration_s": 90e-6, "per_extra_worker_per_sequence_s": 20e-6},
}
COLUMNS = {"schedule": "schedule_median", "sampler": "sampler_e2e_median",
           "prepare_inputs": "prepare_inputs_e2e_median", "process_outputs": "process_model_outputs_median"}
MODELS = list(CSV_MODELS)
BATCHES = (8, 16, 32, 48, 64, 96, 128)
DEGREES = (1, 2, 4)


def term_seconds(term: str, model: str, batch: int, tp: int, terms=TRUE_TERMS) -> float:
    size = CSV_MODELS[model]
    total = 0.0
    for feature, c in terms[term].items():
        f = FEATURES[feature]
        total += c * f.scale(size, tp) * (batch if f.paid == SEQUENCE else 1 if f.paid == ITERATION else 0)
    return total


def rows(models=MODELS, batches=BATCHES, degrees=DEGREES, terms=TRUE_TERMS):
    return [(m, b, tp, {t: term_seconds(t, m, b, tp, terms) for t in terms})
            for m in models for b in batches for tp in degrees]


def write_table(path: Path, table_rows=None, *, upper: bool = False, comm: str = "ray_comm_time_mean",
                extra: dict | None = None) -> Path:
    """The rows as Vidur writes them: an unnamed index column, milliseconds, means beside medians (here
    the same), and `upper` spells the columns as the January 2024 file does."""
    names = [""]
    for column in COLUMNS.values():
        names += [column.replace("_median", "_mean"), column]
    names += ["model_name", "batch_size", "tensor_parallel_degree", comm]
    lines = []
    for i, (model, batch, tp, seconds) in enumerate(table_rows if table_rows is not None else rows()):
        fields = [str(i)]
        for term in COLUMNS:
            ms = seconds[term] * 1e3
            fields += [repr(ms), repr(ms)]
        fields += [model, str(batch), str(tp), repr(seconds["worker_comm"] * 1e3)]
        lines.append(",".join(fields))
    header = [n.upper() if upper and n not in ("model_name", "batch_size", "tensor_parallel_degree") else n
              for n in names]
    if extra:
        header += list(extra)
        lines = [line + "," + ",".join(extra.values()) for line in lines]
    path.write_text("\n".join([",".join(header)] + lines) + "\n")
    return path
