"""Small real runs written by hand for the tests of fidelity/runs/: a bench run of four requests (with its
workload, meta.json and timeseries.csv) and a vllm bench serve result of three. Every value is a literal here, so
a test can hold a reader to it field by field."""
from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path

BLOCK = 4  # the fixture's KV block size: prompts of a few blocks
# requests 0 and 2 share two full blocks, 0 and 1 the first only, 3 shares nothing; 2's prompt ends in a partial block
PROMPTS = [
    [1, 2, 3, 4, 5, 6, 7, 8, 9],
    [1, 2, 3, 4, 9, 9, 9, 9],
    [1, 2, 3, 4, 5, 6, 7, 8, 10, 11],
    [7, 7, 7, 7, 7],
]
OUTPUTS = [3, 1, 4, 2]
ARRIVALS_NS = [0, 250_000_000, 500_000_000, 1_500_000_000]
# (queued, scheduled, first token, last token): monotonic seconds, queued 0.002 s after each arrival
TIMES = [
    (100.002, 100.003, 100.050, 100.110),
    (100.252, 100.260, 100.300, 100.300),
    (100.502, 100.510, 100.600, 100.690),
    (101.502, 101.505, 101.540, 101.560),
]
MODEL_ID = "meta-llama/Llama-3.1-8B"
GPU = "NVIDIA H100 80GB HBM3"  # h100-sxm's device_names
META = {
    "schema_version": 1, "model": MODEL_ID, "vllm_version": "0.19.0",
    "engine_kwargs": {"model": MODEL_ID, "tensor_parallel_size": 1, "data_parallel_size": 1,
                      "enable_expert_parallel": False, "max_num_seqs": 8, "max_num_batched_tokens": 64,
                      "max_model_len": None, "dtype": "bfloat16", "kv_cache_dtype": "auto", "seed": 42},
    "dataset_path": "workloads/tiny.jsonl", "num_requests": 4, "tick_seconds": 1.0,
    "kv_cache": {"num_gpu_blocks": 64, "num_cpu_blocks": None, "block_size": BLOCK, "gpu_memory_utilization": 0.9,
                 "enable_prefix_caching": True, "kv_cache_memory_bytes": None, "num_kv_tokens": 64 * BLOCK},
    "hardware": {"device_name": GPU, "device_count": 1},
    "resolved_config": {"model_config": {"max_model_len": 256, "dtype": "torch.bfloat16"},
                        "scheduler_config": {"async_scheduling": True, "max_num_seqs": 8,
                                             "max_num_batched_tokens": 64},
                        "compilation_config": {"cudagraph_capture_sizes": [1, 2, 4, 8]}},
}
SERIES = ("t,prompt_throughput,gen_throughput,running,waiting,kv_cache_pct\n"
          "1.0,27.0,4.0,2,1,12.5\n2.0,5.0,3.0,1,0,3.13\n")


def workload_lines() -> list[dict]:
    return [{"input_toks": len(ids), "output_toks": out, "arrival_time_ns": at, "input_tok_ids": ids,
             "output_tok_ids": list(range(out))} for ids, out, at in zip(PROMPTS, OUTPUTS, ARRIVALS_NS)]


def request_lines() -> list[dict]:
    return [{"request_id": f"bench-{i}", "input_toks": len(ids), "output_toks": out,
             "arrival_time": 1_787_000_000.0 + at / 1e9, "queued_ts": q, "scheduled_ts": s, "first_token_ts": f,
             "last_token_ts": last}
            for i, (ids, out, at, (q, s, f, last)) in enumerate(zip(PROMPTS, OUTPUTS, ARRIVALS_NS, TIMES))]


def jsonl(rows: list[dict]) -> str:
    return "".join(json.dumps(row) + "\n" for row in rows)


def write_bench_run(root: Path, requests: list[dict] | None = None, workload: list[dict] | None = None,
                    meta: dict | None = None, series: str | None = SERIES, hashed: bool = True) -> Path:
    """root/workloads/tiny.jsonl and the run root/bench/examples/H100/Llama/ (its vllm/ files); returns the run."""
    workload_text = jsonl(workload_lines() if workload is None else workload)
    (root / "workloads").mkdir(parents=True, exist_ok=True)
    (root / "workloads" / "tiny.jsonl").write_text(workload_text)
    run = root / "bench" / "examples" / "H100" / "Llama"
    (run / "vllm").mkdir(parents=True, exist_ok=True)
    meta = copy.deepcopy(META if meta is None else meta)
    if hashed:
        meta["dataset_hash"] = hashlib.sha256(jsonl(workload_lines()).encode()).hexdigest()
    (run / "vllm" / "meta.json").write_text(json.dumps(meta))
    (run / "vllm" / "requests.jsonl").write_text(jsonl(request_lines() if requests is None else requests))
    if series is not None:
        (run / "vllm" / "timeseries.csv").write_text(series)
    return run


# a vllm bench serve --save-result --save-detailed result: request 1 failed (its error, 0 output tokens)
VLLM_RESULT = {
    "date": "20260901-120000", "endpoint_type": "openai", "backend": "openai", "label": None,
    "model_id": MODEL_ID, "tokenizer_id": MODEL_ID, "num_prompts": 3, "request_rate": 4.0, "burstiness": 1.0,
    "max_concurrency": None, "duration": 2.5, "completed": 2, "failed": 1,
    "input_lens": [12, 20, 7], "output_lens": [4, 0, 2],
    "ttfts": [0.05, 0.0, 0.08], "itls": [[0.02, 0.03, 0.025], [], [0.04]],
    "start_times": [1000.5, 1000.7, 1001.25],
    "generated_texts": ["a b c d", "", "e f"], "errors": ["", "Connection reset", ""],
    "mean_ttft_ms": 65.0,
}


def write_vllm_result(path: Path, drop: tuple[str, ...] = (), **changes) -> Path:
    """The result with `changes`, less the keys in `drop`."""
    result = {key: value for key, value in {**copy.deepcopy(VLLM_RESULT), **changes}.items() if key not in drop}
    path.write_text(json.dumps(result))
    return path
