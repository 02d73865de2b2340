"""A serving engine's measured host work per iteration, read from Vidur's public cpu_overheads.csv.

Each row is one (model, batch size, tensor-parallel degree) of a vLLM-derived engine (Sarathi-Serve on Ray
workers), with the mean and median milliseconds of each step of its iteration's CPU work. Two vintages are
public, spelling the columns in different case (`SCHEDULE_MEDIAN` in January 2024, `schedule_median` in May);
column names are read without regard to case. The worker communication is `ray_comm_time_mean` where the file
has it (Vidur's predictor reads the mean) and `ray_comm_time_median` otherwise (the January file has only that).

A malformed file is refused with a SpecError naming the file, the line and the column.
"""
from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from calibrate.work.host_features import ModelSize
from engine.errors import SpecError
from engine.specs.checks import existing_file

MS = 1e-3
# the iteration's host work, each a term of the host model, from the first of its columns the file has
TERM_COLUMNS = {
    "schedule": ("schedule_median",),
    "sampler": ("sampler_e2e_median",),
    "prepare_inputs": ("prepare_inputs_e2e_median",),
    "process_outputs": ("process_model_outputs_median",),
    "worker_comm": ("ray_comm_time_mean", "ray_comm_time_median"),
}
KEY_COLUMNS = ("model_name", "batch_size", "tensor_parallel_degree")
# The sizes of the models the public files measured, from each model's config.json on Hugging Face
# (vocab_size, max_position_embeddings), as Vidur's own model configs copy them.
CSV_MODELS = {
    "meta-llama/Llama-2-7b-hf": ModelSize(vocab_size=32000, max_seq_len=4096),
    "meta-llama/Llama-2-70b-hf": ModelSize(vocab_size=32000, max_seq_len=4096),
    "codellama/CodeLlama-34b-Instruct-hf": ModelSize(vocab_size=32000, max_seq_len=16384),
    "microsoft/phi-2": ModelSize(vocab_size=51200, max_seq_len=2048),
    "internlm/internlm-20b": ModelSize(vocab_size=103168, max_seq_len=4096),
    "Qwen/Qwen-72B": ModelSize(vocab_size=152064, max_seq_len=32768),
}
WHAT = "host-overhead table (Vidur's cpu_overheads.csv)"


@dataclass(frozen=True)
class HostTable:
    """One file's rows: each row's line in the file, its model, batch size, tensor-parallel degree, and the
    seconds of each term (TERM_COLUMNS) in `seconds`; `columns` names the column each term was read from."""

    source: str
    lines: np.ndarray
    models: tuple[str, ...]
    batch_size: np.ndarray
    tensor_parallel: np.ndarray
    seconds: dict[str, np.ndarray]
    columns: dict[str, str]

    def __len__(self) -> int:
        return len(self.lines)

    @property
    def total_s(self) -> np.ndarray:
        """Each row's host time per iteration: its terms in series, as Vidur's predictor adds them."""
        return sum((self.seconds[term] for term in TERM_COLUMNS), np.zeros(len(self)))

    def sizes(self) -> list[ModelSize]:
        return [CSV_MODELS[m] for m in self.models]

    def select(self, mask: np.ndarray) -> HostTable:
        return HostTable(self.source, self.lines[mask], tuple(np.asarray(self.models, dtype=object)[mask]),
                         self.batch_size[mask], self.tensor_parallel[mask],
                         {t: s[mask] for t, s in self.seconds.items()}, self.columns)


def read_host_table(path: str | Path) -> HostTable:
    source = str(path)
    existing_file(path, source, "", what=f"a {WHAT}")
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise SpecError(source, "", f"not a text file: byte {err.start} is not UTF-8 (a {WHAT} is CSV)") from None
    rows = list(csv.reader(text.splitlines()))
    if not rows or not any(rows[0]):
        raise SpecError(source, "", f"empty; a {WHAT} starts with a header line")
    header = [name.strip().lower() for name in rows[0]]
    index = _column_index(header, source)
    if len(rows) < 2:
        raise SpecError(source, "", "no rows after the header line")
    parsed = [_row(fields, line, header, index, source) for line, fields in enumerate(rows[1:], start=2)
              if any(f.strip() for f in fields)]
    return HostTable(
        source, np.array([p[0] for p in parsed], dtype=int), tuple(p[1] for p in parsed),
        np.array([p[2] for p in parsed], dtype=int), np.array([p[3] for p in parsed], dtype=int),
        {term: np.array([p[4][term] for p in parsed]) for term in TERM_COLUMNS},
        {term: header[index[term]] for term in TERM_COLUMNS})


def _column_index(header: list[str], source: str) -> dict[str, int]:
    """Where each key column and each term's column is (a term from the first of its spellings present)."""
    for i, name in enumerate(header):
        if name and header.index(name) != i:
            raise SpecError(source, f"column {name}", "appears twice (column names are read without regard to case)")
    index = {}
    for key in KEY_COLUMNS:
        if key not in header:
            raise SpecError(source, f"column {key}", f"missing; a {WHAT} needs {list(KEY_COLUMNS)}")
        index[key] = header.index(key)
    for term, spellings in TERM_COLUMNS.items():
        found = [s for s in spellings if s in header]
        if not found:
            raise SpecError(source, f"column {spellings[0]}", f"missing; the {term} term is read from "
                            f"{' or '.join(spellings)}")
        index[term] = header.index(found[0])
    return index


def _row(fields: list[str], line: int, header: list[str], index: dict[str, int], source: str):
    if len(fields) != len(header):
        raise SpecError(source, f"line {line}", f"has {len(fields)} fields; the header names {len(header)}")
    model = fields[index["model_name"]].strip()
    if model not in CSV_MODELS:
        raise SpecError(source, f"line {line}, column model_name", (
            f"{model!r} is a model whose size this reader does not know; known: {sorted(CSV_MODELS)}"))
    batch = _whole(fields, line, "batch_size", index, source)
    tp = _whole(fields, line, "tensor_parallel_degree", index, source)
    seconds = {term: _milliseconds(fields, line, header[index[term]], index[term], source) * MS
               for term in TERM_COLUMNS}
    return line, model, batch, tp, seconds


def _whole(fields: list[str], line: int, column: str, index: dict[str, int], source: str) -> int:
    text = fields[index[column]].strip()
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not (np.isfinite(value) and value >= 1 and value.is_integer()):
        raise SpecError(source, f"line {line}, column {column}", f"must be a positive whole number, got {text!r}")
    return int(value)


def _milliseconds(fields: list[str], line: int, column: str, i: int, source: str) -> float:
    text = fields[i].strip()
    try:
        value = float(text)
    except ValueError:
        raise SpecError(source, f"line {line}, column {column}",
                        f"{text!r} is not a number (milliseconds)") from None
    if not np.isfinite(value):
        raise SpecError(source, f"line {line}, column {column}", f"{text!r} is not a finite number of milliseconds")
    if value < 0:
        raise SpecError(source, f"line {line}, column {column}", f"{text} is negative: a time is at least 0 ms")
    return value
