"""What a replica leaves behind: one row per request and one per iteration, columnar."""
from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

REQUEST_COLUMNS = ("request_id", "replica", "arrival_s", "first_token_s", "finish_s",
                   "prompt_len", "output_len", "n", "num_preemptions")
ITERATION_COLUMNS = ("replica", "start_s", "duration_s", "num_prefill_tokens", "num_prefills", "num_decodes",
                     "sum_decode_context", "num_running_groups", "num_waiting", "num_swap_blocks",
                     "num_copy_blocks", "kv_token", "kv_reserved", "kv_internal", "kv_external", "kv_idle")


@dataclass
class Records:
    requests: dict[str, list] = field(default_factory=lambda: {c: [] for c in REQUEST_COLUMNS})
    iterations: dict[str, list] = field(default_factory=lambda: {c: [] for c in ITERATION_COLUMNS})

    def add_request(self, **row) -> None:
        for column in REQUEST_COLUMNS:
            self.requests[column].append(row[column])

    def requests_frame(self) -> pd.DataFrame:
        return pd.DataFrame(self.requests, columns=list(REQUEST_COLUMNS)).sort_values(
            "request_id", kind="stable").reset_index(drop=True)

    def iterations_frame(self) -> pd.DataFrame:
        return pd.DataFrame(self.iterations, columns=list(ITERATION_COLUMNS))
