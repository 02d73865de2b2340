"""The table printed at the end of a run."""
from __future__ import annotations

import pandas as pd

COLUMNS = [("normalized_latency", "norm_lat", "{:.3f}"), ("ttft_p50_s", "ttft_p50", "{:.2f}"),
           ("tpot_mean_s", "tpot", "{:.3f}"), ("throughput_rps", "req/s", "{:.2f}"),
           ("mean_batched_requests", "batch", "{:.1f}"), ("kv_token_share", "kv_tok", "{:.0%}"),
           ("preemptions", "preempt", "{:d}"), ("num_unfinished", "unfin", "{:d}")]


def summary_table(summary: pd.DataFrame) -> str:
    means = summary.groupby(["system", "rate"], sort=False)[[c for c, _, _ in COLUMNS]].mean().reset_index()
    header = f"{'system':<18} {'rate':>6} " + " ".join(f"{label:>9}" for _, label, _ in COLUMNS)
    lines = [header, "-" * len(header)]
    for _, row in means.iterrows():
        cells = []
        for column, _, fmt in COLUMNS:
            value = row[column]
            cells.append(f"{fmt.format(int(value) if 'd' in fmt else value):>9}")
        lines.append(f"{row['system']:<18} {row['rate']:>6g} " + " ".join(cells))
    return "\n".join(lines)


def unmeasured_warnings(summary: pd.DataFrame, warmup_s: float) -> list[str]:
    """A line for each run with no request to measure: its latency metrics are NaN, not an error."""
    return [f"{row['system']} at {row['rate']:g} req/s, seed {row['seed']}: no request arrived after the "
            f"{warmup_s:g}-s warm-up ({row['num_requests']} in the trace), so its latency metrics are NaN; "
            "raise workload.duration_s or the rate, or lower warmup_s"
            for _, row in summary.iterrows() if row["num_measured"] == 0]
