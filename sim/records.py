"""The control plane's records (engine.core.records), as pandas frames for metrics and outputs."""
from __future__ import annotations

import pandas as pd

from engine.core.records import ITERATION_COLUMNS, REQUEST_COLUMNS, ServingRecords


class Records(ServingRecords):
    def requests_frame(self) -> pd.DataFrame:
        return pd.DataFrame(self.requests, columns=list(REQUEST_COLUMNS)).sort_values(
            "request_id", kind="stable").reset_index(drop=True)

    def iterations_frame(self) -> pd.DataFrame:
        return pd.DataFrame(self.iterations, columns=list(ITERATION_COLUMNS))
