"""The control plane's records (engine.core.records) as numpy columns for metrics and outputs, and as pandas
frames for callers that want them (pandas is imported only then: a run's own path does not need it)."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from engine.core.records import (
    ITERATION_COLUMNS,
    REQUEST_COLUMNS,
    SPECULATIVE_COLUMNS,
    ServingRecords,
    request_columns_of,
)
from sim.core.columns import infer_column

if TYPE_CHECKING:
    import pandas as pd


class Records(ServingRecords):
    def request_arrays(self) -> dict[str, np.ndarray]:
        return request_arrays(self.request_values)

    def iteration_arrays(self) -> dict[str, np.ndarray]:
        """Views of the typed iteration columns (read-only): no copy of the largest table a run makes."""
        return {name: np.frombuffer(column, dtype=np.float64 if column.typecode == "d" else np.int64)
                for name, column in zip(ITERATION_COLUMNS, self.iteration_columns)}

    def requests_frame(self) -> pd.DataFrame:
        import pandas as pd

        return pd.DataFrame(self.request_values, columns=list(self.request_columns)).sort_values(
            "request_id", kind="stable").reset_index(drop=True)

    def iterations_frame(self) -> pd.DataFrame:
        """Every iteration's columns; a speculating replica's with its tokens proposed and accepted after them, as
        the real engine's (engine.runtime.records.ReplayResult.iteration_columns): a merged fleet's keep none
        (sim.experiment.speculation_records orders a fleet's)."""
        # views of the typed columns (pandas copies on write; Parquet's writer takes the same buffers too)
        import pandas as pd

        frame = pd.DataFrame(self.iteration_arrays(), columns=list(ITERATION_COLUMNS), copy=False)
        if not self.speculation_values:
            return frame
        if len(self.speculation_values) != len(frame):
            raise RuntimeError(f"{len(frame)} iterations recorded but {len(self.speculation_values)} speculation "
                               "counts")
        table = np.asarray(self.speculation_values, dtype=np.int64).reshape(-1, 2)
        return frame.assign(**{name: table[:, i] for i, name in enumerate(SPECULATIVE_COLUMNS)})


def request_arrays(request_values: list[tuple]) -> dict[str, np.ndarray]:
    """A column per field of RequestRecord, rows ordered by request id (ties: as recorded), each column typed by
    its values (sim.core.columns.infer_column)."""
    if not request_values:  # typed all the same, for the metrics (the times are floats)
        return {name: np.empty(0, dtype=np.float64 if name.endswith("_s") else np.int64) for name in REQUEST_COLUMNS}
    # a run with prefix caching, or speculation: every row longer (engine.core.records.request_columns_of)
    names = request_columns_of(len(request_values[0]))
    columns = {name: infer_column(values) for name, values in zip(names, zip(*request_values))}
    order = np.argsort(columns["request_id"], kind="stable")
    return {name: column[order] for name, column in columns.items()}
