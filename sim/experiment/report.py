"""The table printed at the end of a run, from its summary rows (as columns: sim/experiment/table.py)."""
from __future__ import annotations

from sim.experiment.closed_loop import CONCURRENCY_COLUMN
from sim.experiment.table import group_means, rows_to_columns

COLUMNS = [("normalized_latency", "norm_lat", "{:.3f}"), ("ttft_p50_s", "ttft_p50", "{:.2f}"),
           ("tpot_mean_s", "tpot", "{:.3f}"), ("throughput_rps", "req/s", "{:.2f}"),
           ("mean_batched_requests", "batch", "{:.1f}"), ("kv_token_share", "kv_tok", "{:.0%}"),
           ("preemptions", "preempt", "{:d}"), ("num_unfinished", "unfin", "{:d}")]


def summary_table(rows: list[dict]) -> str:
    """One line per system and rate (and client's gate, where one held requests back: `conc`), the mean over seeds
    (group_means: exactly rounded, whatever order the runs finished in)."""
    names = [c for c, _, _ in COLUMNS]
    keys = ["system", "rate"] + ([CONCURRENCY_COLUMN] if any(CONCURRENCY_COLUMN in row for row in rows) else [])
    means = group_means(rows_to_columns(rows, [*keys, *names]), keys, names)
    gate = len(keys) > 2
    header = f"{'system':<18} {'rate':>6} " + (f"{'conc':>5} " if gate else "") + \
        " ".join(f"{label:>9}" for _, label, _ in COLUMNS)
    lines = [header, "-" * len(header)]
    for row in means:
        cells = []
        for column, _, fmt in COLUMNS:
            value = row[column]
            cells.append(f"{fmt.format(int(value) if 'd' in fmt else value):>9}")
        lead = f"{row['system']:<18} {row['rate']:>6g} " + (f"{int(row[CONCURRENCY_COLUMN]):>5} " if gate else "")
        lines.append(lead + " ".join(cells))
    return "\n".join(lines)


def unmeasured_warnings(rows: list[dict], warmup_s: float) -> list[str]:
    """A line for each run with no request to measure: its latency metrics are NaN, not an error."""
    return [f"{row['system']} at {row['rate']:g} req/s, seed {row['seed']}: no request arrived after the "
            f"{warmup_s:g}-s warm-up ({row['num_requests']} in the trace), so its latency metrics are NaN; "
            "raise workload.duration_s or the rate, or lower warmup_s"
            for row in rows if row["num_measured"] == 0]
