"""LLMServingSim's bench layout of a vLLM V1 run, read exactly.

    <run>/vllm/requests.jsonl   a request a line: request_id, input_toks, output_toks, arrival_time (wall-clock
                                epoch: another clock, never subtracted from the rest), queued_ts, scheduled_ts,
                                first_token_ts, last_token_ts (vLLM's RequestStateStats, monotonic seconds)
    <run>/vllm/timeseries.csv   per second (bench_series.py)
    <run>/vllm/meta.json        engine settings, the workload's path and hash (bench_meta.py)
    a workload JSONL[.gz]       what was replayed, with token ids (workload_file.py)

The publisher's metrics, reproduced exactly: TTFT = first_token_ts - queued_ts; TPOT = (last_token_ts -
first_token_ts) / (output_toks - 1); E2E latency = last_token_ts - queued_ts. A request's arrival is its
queued_ts, after the first request's: the clock its latencies start on.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from engine.errors import SpecError
from fidelity.runs.bench_meta import read_meta
from fidelity.runs.bench_series import read_series
from fidelity.runs.fields import jsonl_rows, line_key, required, seconds, text, whole
from fidelity.runs.real_run import BENCH_LAYOUT, RealRequests, RealRun, WorkloadTokens
from fidelity.runs.workload_file import find_workload, read_workload

VLLM_FOLDER = "vllm"
TIMESTAMPS = ("queued_ts", "scheduled_ts", "first_token_ts", "last_token_ts")  # in the order a request lives them


def is_bench_run(path: Path) -> bool:
    return (path / VLLM_FOLDER / "requests.jsonl").is_file() or (path / "requests.jsonl").is_file()


def read_bench_run(path: Path, workload: Path | None = None) -> RealRun:
    """The run in `path` (its folder, or its vllm/ folder); the workload found as meta.json says, or `workload`."""
    files = path / VLLM_FOLDER if (path / VLLM_FOLDER / "requests.jsonl").is_file() else path
    meta_path = files / "meta.json"
    if not meta_path.is_file():
        raise SpecError(str(meta_path), "", "missing: a bench run keeps its engine settings and workload there")
    meta = read_meta(meta_path)
    rows = [_request(row, files / "requests.jsonl", line) for line, row in jsonl_rows(files / "requests.jsonl")]
    if not rows:
        raise SpecError(str(files / "requests.jsonl"), "", "holds no request")
    run_folder = files.parent if files.name == VLLM_FOLDER else files
    workload_path = workload or find_workload(run_folder, meta.dataset_path, meta.dataset_hash, meta_path)
    tokens = read_workload(workload_path, meta.dataset_hash, meta_path)
    _check_against_workload(rows, tokens, files / "requests.jsonl")
    series_path = files / "timeseries.csv"
    series = read_series(series_path) if series_path.is_file() else None
    notes = () if series is not None else (f"{series_path} is missing: no real per-second series",)
    return RealRun(str(path), BENCH_LAYOUT, _name(run_folder), _columns(rows), meta.settings, series, tokens,
                   notes=notes)


def _request(row: dict, path: Path, line: int) -> tuple:
    """(line, request_id, input_toks, output_toks, queued, scheduled, first, last), each checked."""
    where = f"line {line}"
    request_id = text(required(row, "request_id", path, where), path, line_key(line, "request_id"))
    input_toks = whole(required(row, "input_toks", path, where), path, line_key(line, "input_toks"), low=1)
    output_toks = whole(required(row, "output_toks", path, where), path, line_key(line, "output_toks"), low=1)
    times = [seconds(required(row, name, path, where), path, line_key(line, name)) for name in TIMESTAMPS]
    for (before, earlier), (name, later) in zip(zip(TIMESTAMPS, times), zip(TIMESTAMPS[1:], times[1:])):
        if later < earlier:
            raise SpecError(str(path), line_key(line, name), (
                f"{later!r} is before {before} {earlier!r}; a request is queued, scheduled, then gets its first and "
                f"its last token ({' <= '.join(TIMESTAMPS)})"))
    if "arrival_time" in row:  # the wall clock's: checked, never subtracted from the monotonic times
        seconds(row["arrival_time"], path, line_key(line, "arrival_time"))
    return (line, request_id, input_toks, output_toks, *times)


def _check_against_workload(rows: list[tuple], tokens: WorkloadTokens, path: Path) -> None:
    """Row i of requests.jsonl is line i of the workload: the same count, and the same prompt lengths."""
    if len(rows) != len(tokens.input_tok_ids):
        raise SpecError(str(path), "", f"holds {len(rows)} requests, but its workload {tokens.path} holds "
                        f"{len(tokens.input_tok_ids)}; a run replays its workload whole, a request a line")
    for i, (line, _, input_toks, output_toks, *_) in enumerate(rows):
        for name, value, asked in (("input_toks", input_toks, len(tokens.input_tok_ids[i])),
                                   ("output_toks", output_toks, int(tokens.output_len[i]))):
            if value != asked:
                raise SpecError(str(path), line_key(line, name), (
                    f"is {value}, but request {i + 1} of its workload ({tokens.path}) has {asked}; row i of a run "
                    "is its workload's request i"))


def _columns(rows: list[tuple]) -> RealRequests:
    lines, ids, prompt, output, queued, _, first, last = zip(*rows)
    queued, first, last = (np.array(c, np.float64) for c in (queued, first, last))
    output = np.array(output, np.int64)
    with np.errstate(divide="ignore", invalid="ignore"):
        tpot = np.where(output > 1, (last - first) / (output - 1), np.nan)
    return RealRequests(np.array(lines, np.int64), tuple(ids), queued - queued.min(), np.array(prompt, np.int64),
                        output, first - queued, tpot, last - queued)


def _name(run_folder: Path) -> str:
    """<GPU>-<model> for the bench's examples/<GPU>/<model>/ layout; the folder's name otherwise."""
    parent = run_folder.resolve().parent
    if parent.parent.name == "examples":
        return f"{parent.name}-{run_folder.resolve().name}"
    return run_folder.resolve().name
