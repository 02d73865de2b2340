"""Published FP8 GEMM timings (calibrate/gemm_tables/*.csv), read into one row per measured GEMM.

A row is one GEMM of M activation rows against an N x K weight, as its source published it: a time in
microseconds, or a throughput in TFLOP/s (then its time is 2 M N K / throughput, the FLOPs the benchmark divided
by its median time). `activation_quant` says what the timed call did besides the GEMM: `none` (the activations
quantized before the timer started) or `dynamic_per_token` (vLLM's per-token scale and FP8 cast of the 16-bit
activations inside the timed call, as a served FP8-dynamic layer runs them). The README beside the tables names
every source, its commit or thread, and its licence.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from calibrate.parts.fp8_gemm import GEMM_TABLES_DIR
from engine.errors import SpecError

H100_FP8 = GEMM_TABLES_DIR / "h100_fp8.csv"  # shipped beside the fit it made, as its provenance
COLUMNS = ("source", "column", "kernel", "activation_quant", "m", "n", "k", "value", "unit")
QUANTS = ("none", "dynamic_per_token")
UNITS = ("us", "TFLOP/s")


@dataclass(frozen=True)
class GemmRow:
    """One published GEMM timing: its shape, what the timed call ran, and its time in seconds."""
    source: str
    kernel: str
    activation_quant: str
    m: int
    n: int
    k: int
    time_s: float

    @property
    def shape(self) -> tuple[int, int]:
        """The weight's (N, K): what a held-out shape fold leaves out."""
        return self.n, self.k

    @property
    def quantizes(self) -> bool:
        return self.activation_quant != "none"


def read_gemm_table(path: Path = H100_FP8) -> list[GemmRow]:
    """Every row of a GEMM table, in its order; a bad cell is a one-line error naming the row and column."""
    import csv

    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        missing = [c for c in COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise SpecError(str(path), f"column {missing[0]}", f"missing; a GEMM table needs {list(COLUMNS)}")
        return [_row(raw, str(path), number) for number, raw in enumerate(reader, start=1)]


def kernel_rows(rows: list[GemmRow], kernel: str) -> list[GemmRow]:
    """The rows of one kernel; none is a one-line error naming the kernels there are."""
    chosen = [row for row in rows if row.kernel == kernel]
    if not chosen:
        raise ValueError(f"kernel {kernel!r} has no rows; the table has {sorted({r.kernel for r in rows})}")
    return chosen


def _row(raw: dict, source: str, number: int) -> GemmRow:
    m, n, k = (_whole(raw, key, source, number) for key in ("m", "n", "k"))
    value = _positive(raw, "value", source, number)
    unit, quant = raw["unit"], raw["activation_quant"]
    if unit not in UNITS:
        raise SpecError(source, f"row {number}, column unit", f"{unit!r} is not one of {list(UNITS)}")
    if quant not in QUANTS:
        raise SpecError(source, f"row {number}, column activation_quant", f"{quant!r} is not one of {list(QUANTS)}")
    time_s = value * 1e-6 if unit == "us" else 2.0 * m * n * k / (value * 1e12)
    return GemmRow(raw["source"], raw["kernel"], quant, m, n, k, time_s)


def _whole(raw: dict, key: str, source: str, number: int) -> int:
    text = raw[key]
    if not text.isdigit() or int(text) < 1:
        raise SpecError(source, f"row {number}, column {key}", f"{text!r} is not a positive whole number")
    return int(text)


def _positive(raw: dict, key: str, source: str, number: int) -> float:
    try:
        value = float(raw[key])
    except ValueError:
        value = -1.0
    if not value > 0 or value == float("inf"):
        raise SpecError(source, f"row {number}, column {key}", f"{raw[key]!r} is not a positive number")
    return value
