"""The workload a bench run replayed (LLMServingSim's flat JSONL, optionally gzip-compressed): found beside or above
the run, its content checked against the run's recorded hash, and read with its token ids.

One request a line: {input_toks, output_toks, arrival_time_ns, input_tok_ids[, output_tok_ids]}. The run's
requests.jsonl row i is the workload's line i. Agentic sessions (`sub_requests`) chain their calls on completions,
which a replay of fixed arrivals cannot; they are refused.
"""
from __future__ import annotations

import gzip
import hashlib
from pathlib import Path

import numpy as np

from engine.errors import SpecError
from fidelity.runs.fields import json_object, line_key, required, whole
from fidelity.runs.real_run import WorkloadTokens

WORKLOADS_FOLDER = "workloads"  # where the bench keeps them, at the top of its repository
SUFFIXES = ("", ".gz")


def find_workload(run_folder: Path, dataset_path: str | None, dataset_hash: str | None, meta: Path) -> Path:
    """The workload meta.json names: at dataset_path, or by its file name (with or without .gz), in the run's folder or
    any folder above it or in a workloads/ folder there; failing those, a workload file there whose content has the
    recorded hash (a workload published under another name)."""
    if dataset_path is None:
        raise SpecError(str(meta), "dataset_path", "missing: the run does not say which workload it replayed; give "
                        "--workload PATH")
    name = Path(dataset_path).name
    folders = [run_folder.resolve(), *run_folder.resolve().parents]
    for folder in folders:
        for candidate in (folder / dataset_path, folder / name, folder / WORKLOADS_FOLDER / name):
            for suffix in SUFFIXES:
                path = candidate.with_name(candidate.name + suffix)
                if path.is_file():
                    return path
    if dataset_hash is not None:
        for folder in folders:
            for path in sorted((folder / WORKLOADS_FOLDER).glob("*.jsonl*")):
                if path.name.endswith((".jsonl", ".jsonl.gz")) and content_sha256(path) == dataset_hash:
                    return path
    raise SpecError(str(meta), "dataset_path", f"{dataset_path}: no file {name}[.gz] in {run_folder} or above it "
                    f"(nor one with its dataset_hash in a {WORKLOADS_FOLDER}/ folder there); give --workload PATH")


def content_sha256(path: Path) -> str:
    return hashlib.sha256(_content(path)).hexdigest()


def _content(path: Path) -> bytes:
    try:
        data = path.read_bytes()
        return gzip.decompress(data) if path.suffix == ".gz" else data
    except (OSError, EOFError, gzip.BadGzipFile) as err:
        raise SpecError(str(path), "", f"cannot be read: {err}") from None


def read_workload(path: Path, dataset_hash: str | None, meta: Path) -> WorkloadTokens:
    """Every request's prompt token ids and intended arrival; the content must have the run's dataset_hash."""
    content = _content(path)
    digest = hashlib.sha256(content).hexdigest()
    if dataset_hash is not None and digest != dataset_hash:
        raise SpecError(str(path), "sha256", f"is {digest}, but {meta} records dataset_hash {dataset_hash}: not the "
                        "workload this run replayed")
    requests = [_request(row, path, line) for line, row in _rows(content, path)]
    if not requests:
        raise SpecError(str(path), "", "holds no request")
    token_ids, output_len, arrivals_ns = zip(*requests)
    arrivals = np.array(arrivals_ns, np.int64)
    return WorkloadTokens(str(path), digest, tuple(token_ids), np.array(output_len, np.int64),
                          (arrivals - arrivals.min()) / 1e9)


def _rows(content: bytes, path: Path):
    for number, text in enumerate(content.decode("utf-8", errors="strict").splitlines(), 1):
        if text.strip():
            yield number, json_object(text, path, number)


def _request(row: dict, path: Path, line: int) -> tuple[np.ndarray, int, int]:
    if "sub_requests" in row:
        raise SpecError(str(path), line_key(line, "sub_requests"), "an agentic session chains its calls on their "
                        "completions; servesim replays independent requests at fixed arrivals only")
    where = f"line {line}"
    input_toks = whole(required(row, "input_toks", path, where), path, line_key(line, "input_toks"), low=1)
    output_toks = whole(required(row, "output_toks", path, where), path, line_key(line, "output_toks"), low=1)
    arrival_ns = whole(required(row, "arrival_time_ns", path, where), path, line_key(line, "arrival_time_ns"))
    ids = required(row, "input_tok_ids", path, where)
    key = line_key(line, "input_tok_ids")
    if not isinstance(ids, list) or not all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in ids):
        raise SpecError(str(path), key, "must be a list of token ids (integers >= 0)")
    if len(ids) != input_toks:
        raise SpecError(str(path), key, f"holds {len(ids)} token ids, but input_toks is {input_toks}; they must agree")
    return np.array(ids, np.int64), output_toks, arrival_ns
