"""The control plane's records (engine.core.records), as pandas frames for metrics and outputs."""
from __future__ import annotations

import numpy as np
import pandas as pd

from engine.core.records import ITERATION_COLUMNS, ServingRecords


class Records(ServingRecords):
    def requests_frame(self) -> pd.DataFrame:
        return pd.DataFrame(self.requests, columns=list(self.request_columns)).sort_values(
            "request_id", kind="stable").reset_index(drop=True)

    def iterations_frame(self) -> pd.DataFrame:
        # views of the typed columns (read-only; pandas copies on write): no Python object per value, and no
        # copy of the largest table a run makes (Parquet's writer takes the same buffers too)
        return pd.DataFrame({name: np.frombuffer(column, dtype=np.float64 if column.typecode == "d" else np.int64)
                             for name, column in zip(ITERATION_COLUMNS, self.iteration_columns)},
                            columns=list(ITERATION_COLUMNS), copy=False)
