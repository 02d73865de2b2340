"""A run as vLLM's benchmark would have saved it: the JSON `vllm bench serve --save-result --save-detailed` writes,
field for field (vllm/benchmarks/serve.py, main_async and benchmark, at vllm-project/vllm commit 009e6d4a), so that
what reads a real run's result reads a simulated one (servesim's own reader: fidelity/runs/vllm_bench.py).

The simulated client sends each request at its arrival, or, behind a client's gate (workload.max_concurrency, vLLM's
--max-concurrency), when the gate lets it go: its start_time is its sending (sent_s) and its queue_time the wait at
the client, as vLLM records them; the benchmark starts at the trace's time 0 and ends when the last request has
finished or been dropped (at the horizon, where one was still unfinished). Its chunks are
sim/experiment/token_stream.py's. A request dropped unserved, or unfinished at the horizon, failed: 0 output tokens,
TTFT and latency 0, no chunk gaps, and an error saying why. The simulator generates no text: every generated_texts
entry is "". The header's keys vLLM takes from its arguments say what was simulated (backend and endpoint_type
`servesim`, label the system, model_id the model); servesim's own keys follow num_prompts, where vLLM puts a run's
--metadata: the experiment, system, hardware and GPUs, the request, goodput and token throughputs per GPU, and how
many requests' chunk times were placed rather than exact.
"""
from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import NamedTuple

import numpy as np

from engine.core.records import DROPPED_COLUMNS
from engine.core.system import SystemSpec
from sim.experiment.config import Experiment
from sim.experiment.metrics import sent_times
from sim.experiment.token_stream import Chunks, Schedule, chunk_times
from sim.experiment.vllm_metrics import ClientView, bench_metrics

VLLM_BENCH_FILE = "vllm_bench.json"
SIMULATOR = "servesim"
# vLLM's result: the counts and throughputs its benchmark computes, before the per-request lists
COUNTS = ("completed", "failed", "total_input_tokens", "total_output_tokens", "request_throughput", "request_goodput",
          "output_throughput", "total_token_throughput")
PEAKS = ("max_output_tokens_per_s", "max_concurrent_requests")
PER_GPU = ("request_throughput", "request_goodput", "output_throughput", "total_token_throughput")
DROPPED_ERRORS = {"ignored": "ignored by the scheduler, never served (vLLM's FINISHED_IGNORED)",
                  "aborted": "aborted before it finished"}


def vllm_bench_result(exp: Experiment, system: SystemSpec, rate: float, seed: int, requests: Mapping[str, np.ndarray],
                      iterations: Mapping[str, np.ndarray], dropped: list[tuple], horizon_s: float,
                      schedule: Schedule) -> dict:
    """The run's result, as the JSON object vLLM's benchmark saves."""
    chunks = chunk_times(requests, iterations, schedule)
    view = client_view(requests, chunks, dropped, horizon_s)
    duration = bench_duration(requests, dropped, horizon_s)
    figures = bench_metrics(view, duration, dict(exp.goodput) or None)
    served = ~np.isnan(np.asarray(requests["finish_s"], dtype=np.float64))
    metadata = {"simulator": SIMULATOR, "experiment": exp.name, "system": system.name, "hardware": exp.hardware.name,
                "num_gpus": exp.num_gpus, "seed": seed, "goodput_ms": dict(exp.goodput) or None,
                **{f"{key}_per_gpu": None if figures[key] is None else figures[key] / exp.num_gpus for key in PER_GPU},
                "itl_placed_requests": int((served & ~chunks.exact).sum())}
    workload = exp.workload
    burstiness = None if workload.is_replay else \
        workload.burstiness if workload.burstiness is not None else _burstiness(workload.arrival, workload.cv)
    head = {"date": datetime.now().strftime("%Y%m%d-%H%M%S"), "endpoint_type": SIMULATOR, "backend": SIMULATOR,
            "label": system.name, "model_id": exp.model.name, "tokenizer_id": exp.model.name,
            "num_prompts": len(view.errors), **metadata,
            "request_rate": rate if rate < float("inf") else "inf",  # as vLLM writes it
            "burstiness": burstiness, "max_concurrency": workload.max_concurrency}
    counts = {key: figures.pop(key) for key in COUNTS}
    peaks = {key: figures.pop(key) for key in PEAKS}
    return {**head, "duration": duration, **counts, **per_request(view, client_waits(requests, dropped)), **peaks,
            "rtfx": 0.0, **figures}


def result_bytes(result: dict) -> bytes:
    """The file's bytes, as vLLM's json.dump writes them."""
    return json.dumps(result).encode()


class Sent(NamedTuple):
    """One request as the client recorded it (a failed one: no output, no chunk)."""

    request_id: int
    prompt_len: int
    output_len: int
    start_s: float
    ttft_s: float = 0.0
    itl_s: np.ndarray = np.empty(0)
    latency_s: float = 0.0
    error: str = ""


def client_view(requests: Mapping[str, np.ndarray], chunks: Chunks, dropped: list[tuple], horizon_s: float
                ) -> ClientView:
    """Every request the client sent, served or not, in the order it sent them (by request id)."""
    unfinished = f"unfinished when the simulation stopped at its horizon, {horizon_s:g} s"
    sent = []
    for rid, prompt, output, n, start, finish, times in zip(
            requests["request_id"], requests["prompt_len"], requests["output_len"], requests["n"],
            np.asarray(sent_times(requests), dtype=np.float64), np.asarray(requests["finish_s"], dtype=np.float64),
            chunks.times):
        if np.isnan(finish):
            sent.append(Sent(int(rid), int(prompt), 0, float(start), error=unfinished))
        else:
            sent.append(Sent(int(rid), int(prompt), int(n * output), float(start), float(times[0] - start),
                             np.diff(times), float(finish - start)))
    at = {name: DROPPED_COLUMNS.index(name) for name in ("request_id", "prompt_len", "arrival_s", "status")}
    sent += [Sent(int(row[at["request_id"]]), int(row[at["prompt_len"]]), 0, float(row[at["arrival_s"]]),
                  error=DROPPED_ERRORS[row[at["status"]]]) for row in dropped]
    sent.sort(key=lambda request: request.request_id)
    return ClientView(
        prompt_len=np.array([r.prompt_len for r in sent], dtype=np.int64),
        output_len=np.array([r.output_len for r in sent], dtype=np.int64),
        start_s=np.array([r.start_s for r in sent], dtype=np.float64),
        ttft_s=np.array([r.ttft_s for r in sent], dtype=np.float64),
        itl_s=[r.itl_s for r in sent],
        latency_s=np.array([r.latency_s for r in sent], dtype=np.float64),
        errors=[r.error for r in sent])


def client_waits(requests: Mapping[str, np.ndarray], dropped: list[tuple]) -> list[float]:
    """Each request's wait at the client's gate (vLLM's client_queue_time: its sending less its arrival), in the
    order of client_view (by request id); 0 without a gate, and for a request dropped unserved (its record keeps its
    arrival alone)."""
    waited = np.asarray(sent_times(requests), dtype=np.float64) - np.asarray(requests["arrival_s"], dtype=np.float64)
    by_id = dict(zip(np.asarray(requests["request_id"]).tolist(), waited.tolist()))
    ids = sorted([*by_id, *(row[DROPPED_COLUMNS.index("request_id")] for row in dropped)])
    return [by_id.get(request_id, 0.0) for request_id in ids]


def bench_duration(requests: Mapping[str, np.ndarray], dropped: list[tuple], horizon_s: float) -> float:
    """From the trace's time 0 to the last request's end: its finish, its drop, or the horizon where one was still
    unfinished when the simulation stopped."""
    finish = np.asarray(requests["finish_s"], dtype=np.float64)
    if np.isnan(finish).any():
        return float(horizon_s)
    ends = [*finish.tolist(), *(row[DROPPED_COLUMNS.index("dropped_s")] for row in dropped)]
    return float(max(ends, default=0.0))


def per_request(view: ClientView, waits: list[float] | None = None) -> dict[str, list]:
    """The detailed result's lists, one entry a request, in seconds (vLLM's units for them)."""
    return {"input_lens": view.prompt_len.tolist(), "output_lens": view.output_len.tolist(),
            "ttfts": view.ttft_s.tolist(), "itls": [gaps.tolist() for gaps in view.itl_s],
            "latencies": view.latency_s.tolist(), "start_times": view.start_s.tolist(),
            "queue_times": waits if waits is not None else [0.0] * len(view.errors),  # at the client's gate
            "generated_texts": [""] * len(view.errors), "errors": list(view.errors)}


def _burstiness(arrival: str, cv: float) -> float:
    """vLLM's burstiness of the arrival process: the shape of its gamma gaps, 1 for Poisson, inf for constant."""
    if arrival == "gamma":
        return 1.0 / cv**2
    return float("inf") if arrival == "constant" else 1.0
