"""A real serving run as servesim reads it, whichever format it came in: its requests as columns, its per-second
series, its engine settings as recorded, and the workload it replayed (with token ids) where there is one."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True, eq=False)  # arrays: compare columns, not objects
class RealRequests:
    """One row per request the run served, in the file's order (not sorted by arrival).

    arrival_s: when the request reached the engine, in seconds after the first arrival, on the run's own clock.
    ttft_s, tpot_s, e2e_s: the publisher's definitions (the reader's docstring says which); tpot_s is NaN for a
    request of one output token. itl_s: each request's gaps between consecutive tokens, where the run recorded them.
    """

    line: np.ndarray         # int64: where the request is in its file (a JSONL line, or a position from 0)
    request_id: tuple[str, ...]
    arrival_s: np.ndarray    # float64
    prompt_len: np.ndarray   # int64
    output_len: np.ndarray   # int64
    ttft_s: np.ndarray       # float64
    tpot_s: np.ndarray       # float64
    e2e_s: np.ndarray        # float64
    itl_s: tuple[np.ndarray, ...] | None = None

    def __len__(self) -> int:
        return len(self.prompt_len)


@dataclass(frozen=True, eq=False)
class RealSeries:
    """The run's per-second series, as its logger wrote it: each row a second ending at t_s (its own clock)."""

    t_s: np.ndarray
    prompt_tokens_per_s: np.ndarray
    generation_tokens_per_s: np.ndarray
    running: np.ndarray
    waiting: np.ndarray
    kv_usage_pct: np.ndarray


@dataclass(frozen=True)
class EngineSettings:
    """The engine's settings as the run recorded them; None where it did not."""

    model_id: str | None = None
    gpu_name: str | None = None
    gpu_name_from: str | None = None  # the file and key the GPU's name was read from
    tensor_parallel: int | None = None
    data_parallel: int | None = None
    expert_parallel: bool | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    block_size: int | None = None
    prefix_caching: bool | None = None
    num_gpu_blocks: int | None = None
    gpu_memory_utilization: float | None = None
    max_model_len: int | None = None
    dtype: str | None = None
    async_scheduling: bool | None = None
    cudagraph_capture_sizes: tuple[int, ...] | None = None
    engine_version: str | None = None  # e.g. "vllm 0.19.0"


@dataclass(frozen=True, eq=False)
class WorkloadTokens:
    """The workload a run replayed: each request's prompt token ids, and the arrivals it was asked to keep."""

    path: str
    sha256: str  # of the uncompressed bytes
    input_tok_ids: tuple[np.ndarray, ...]  # int64 per request, in the workload's order (= the run's rows)
    output_len: np.ndarray  # int64: the output tokens each request was pinned to
    intended_arrival_s: np.ndarray  # float64: arrival_time_ns after the first, in seconds


@dataclass(frozen=True, eq=False)
class RealRun:
    source: str                 # the path read
    format: str                 # one of FORMATS
    name: str                   # a label for outputs
    requests: RealRequests
    settings: EngineSettings
    series: RealSeries | None = None
    workload: WorkloadTokens | None = None
    arrivals_recorded: bool = True
    # requests the run records as failed, left out of `requests` (vLLM's bench: an error, or no token)
    failed: int = 0
    notes: tuple[str, ...] = field(default_factory=tuple)


BENCH_LAYOUT = "llmservingsim-bench"
VLLM_BENCH = "vllm-bench-serve"
FORMATS = (BENCH_LAYOUT, VLLM_BENCH)
