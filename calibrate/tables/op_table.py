"""Per-operation GPU timing tables (Vidur's profiling format), read into one row per measured kernel.

A table holds one model's non-attention operations (calibrate/work/layer_ops.py) timed at many token counts
and tensor-parallel degrees: its architecture in `n_head`, `n_kv_head`, `n_embd`, `n_expanded_embd`,
`use_gated_mlp`, and `time_stats.<op>.median` in milliseconds. Each row becomes one row per operation
with its work beside its time: FLOPs and weight bytes for the matmuls, bytes moved for the rest.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from calibrate.work.layer_ops import GEMMS, OPS, LayerShape, gemm_work
from engine.errors import SpecError
from engine.specs.checks import existing_file

ARCH_COLUMNS = ("n_head", "n_kv_head", "n_embd", "n_expanded_embd", "use_gated_mlp")
POINT_COLUMNS = ("num_tokens", "num_tensor_parallel_workers")
MS = 1e-3

if TYPE_CHECKING:  # pandas is imported by the functions that read tables: a run priced without one never loads it
    import pandas as pd


def time_column(op: str) -> str:
    return f"time_stats.{op}.median"


# an elementwise kernel's column may be missing: that model does not run it (phi-2's parallel block has one norm)
REQUIRED_COLUMNS = ARCH_COLUMNS + POINT_COLUMNS + tuple(time_column(op) for op in GEMMS)


def table_label(path: str | Path) -> str:
    """The model a table measures, from its name: `org_model.mlp.csv`, or `org/model/mlp.csv` as Vidur keeps it."""
    path = Path(path)
    if path.name == "mlp.csv":
        return f"{path.parent.parent.name}_{path.parent.name}"
    return path.name.removesuffix(".csv").removesuffix(".mlp")


def read_csv(path: str | Path, what: str) -> pd.DataFrame:
    import pandas as pd

    source = str(path)
    existing_file(path, source, "", what=f"a {what}")
    try:
        return pd.read_csv(path)
    except (UnicodeDecodeError, pd.errors.ParserError, pd.errors.EmptyDataError) as err:
        reason = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise SpecError(source, "", f"not a readable {what}: {reason}") from None


def check_columns(table: pd.DataFrame, required, source: str, what: str) -> None:
    for column in required:
        if column not in table.columns:
            raise SpecError(source, f"column {column}", f"missing; a {what} needs {list(required)}")


def numeric(table: pd.DataFrame, column: str, source: str, positive: bool) -> np.ndarray:
    import pandas as pd

    values = pd.to_numeric(table[column], errors="coerce").to_numpy(dtype=float)
    bad = ~np.isfinite(values) | ((values <= 0) if positive else (values < 0))
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        valid = "a positive number" if positive else "a non-negative number"
        raise SpecError(source, f"row {row + 1}, column {column}", f"{table[column].iloc[row]!r} is not {valid}")
    return values


def layer_shape(table: pd.DataFrame, source: str) -> LayerShape:
    """The one architecture a table measures."""
    values = {}
    for column in ARCH_COLUMNS:
        distinct = table[column].unique()
        if len(distinct) != 1:
            raise SpecError(source, f"column {column}", f"one table measures one model; found {sorted(distinct)}")
        values[column] = distinct[0]
    ints = {c: int(numeric(table, c, source, positive=True)[0]) for c in ARCH_COLUMNS if c != "use_gated_mlp"}
    gated = str(values["use_gated_mlp"]).strip().lower()
    if gated not in ("true", "false", "1", "0"):
        raise SpecError(source, "column use_gated_mlp", f"must be True or False, got {values['use_gated_mlp']!r}")
    if ints["n_embd"] % ints["n_head"]:
        raise SpecError(source, "column n_embd", f"{ints['n_embd']} is not a whole number of {ints['n_head']} heads")
    return LayerShape(ints["n_embd"], ints["n_head"], ints["n_kv_head"], ints["n_expanded_embd"],
                      gated in ("true", "1"))


@dataclass(frozen=True)
class OpTable:
    label: str  # the model it measures, from the file's name
    shape: LayerShape
    # one row per (tp, tokens, op): time_s, flops and weight_bytes (matmuls), moved_bytes (elementwise), model
    ops: pd.DataFrame


def read_op_table(path: str | Path, max_tokens: int | None = None, dtype_bytes: int = 2) -> OpTable:
    """A table's operations at each token count and tensor-parallel degree; rows measured twice are averaged."""
    import pandas as pd

    source = str(path)
    table = read_csv(path, "per-operation table")
    check_columns(table, REQUIRED_COLUMNS, source, "per-operation table")
    if table.empty:
        raise SpecError(source, "", "no rows")
    shape = layer_shape(table, source)
    points = pd.DataFrame({"tokens": numeric(table, "num_tokens", source, positive=True).astype(int),
                           "tp": numeric(table, "num_tensor_parallel_workers", source, positive=True).astype(int)})
    measured = [op for op in OPS if time_column(op) in table.columns and shape.runs(op)]
    for op in measured:
        points[op] = numeric(table, time_column(op), source, positive=True) * MS
    if max_tokens is not None:
        points = points[points["tokens"] <= max_tokens]
    points = points.groupby(["tp", "tokens"], as_index=False).mean()
    if points.empty:
        raise SpecError(source, "column num_tokens", f"no rows at or below {max_tokens} tokens")
    label = table_label(path)
    ops = pd.concat([_op_rows(points, op, shape, dtype_bytes) for op in measured], ignore_index=True)
    return OpTable(label, shape, ops.assign(model=label))


def _op_rows(points: pd.DataFrame, op: str, shape: LayerShape, dtype_bytes: int) -> pd.DataFrame:
    import pandas as pd

    tokens, tp = points["tokens"].to_numpy(float), points["tp"].to_numpy()
    flops, weight_bytes, moved = np.zeros(len(points)), np.zeros(len(points)), np.zeros(len(points))
    for degree in np.unique(tp):
        at = tp == degree
        if op in GEMMS:
            flops[at], weight_bytes[at] = gemm_work(shape.gemm_dims(int(degree))[op], tokens[at], dtype_bytes)
        else:
            moved[at] = tokens[at] * shape.elementwise_bytes_per_token(int(degree), dtype_bytes)[op]
    return pd.DataFrame({"tp": tp, "tokens": points["tokens"].to_numpy(), "op": op, "time_s": points[op].to_numpy(),
                         "flops": flops, "weight_bytes": weight_bytes, "moved_bytes": moved})
