"""vLLM's own benchmark result: the JSON `vllm bench serve --save-result --save-detailed` writes, read exactly.

Read from vLLM's source, vllm-project/vllm at commit def9ce85ba1079af970a58ed3d42dd861ae35d58 (the `vllm bench`
CLI of v0.11 and later: vllm/benchmarks/serve.py, vllm/benchmarks/lib/endpoint_request_func.py), where the
per-request lists are in seconds (the summary's *_ms figures in milliseconds):

    input_lens[i]   prompt tokens             output_lens[i]  output tokens (0 for a failed request)
    ttfts[i]        time to the first token   itls[i]         the gaps between the following chunks, a list
    errors[i]       "" when it succeeded      start_times[i]  when it was sent (time.perf_counter; some versions)

and a header (date, model_id, tokenizer_id, num_prompts, request_rate ("inf" or req/s), burstiness,
max_concurrency, duration, ...). Without --save-detailed the lists are not saved, and there is nothing to replay.
vLLM's definitions, kept: TTFT = ttfts[i]; E2E = ttfts[i] + sum(itls[i]) (its `latency`: the last chunk's time
after the send); TPOT = sum(itls[i]) / (output_lens[i] - 1); ITL = every gap of itls. All client-side: they include
the HTTP server and streaming, which an engine's own timestamps do not.

Arrivals: start_times where the file has them. Otherwise they were drawn by the client (request_rate, burstiness,
a seed) and not saved, so they are not invented: the run says so and can be replayed only with a workload from
--config. One exception is recorded by definition: request_rate "inf" without max_concurrency sent every request at
once, at 0. The engine's settings are not in the file (a --config experiment gives them).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from engine.errors import SpecError
from fidelity.runs.fields import json_file, optional, seconds, text, whole
from fidelity.runs.real_run import VLLM_BENCH, EngineSettings, RealRequests, RealRun

PER_REQUEST = ("input_lens", "output_lens", "ttfts", "itls")


def read_vllm_bench(path: Path) -> RealRun:
    result = json_file(path, "one benchmark result (a JSON object)")
    missing = [name for name in PER_REQUEST if name not in result]
    if len(missing) == len(PER_REQUEST):
        raise SpecError(str(path), "input_lens", "missing, with every per-request field (input_lens, output_lens, "
                        "ttfts, itls): saved without --save-detailed? Rerun vllm bench serve with --save-result "
                        "--save-detailed")
    if missing:
        raise SpecError(str(path), missing[0], f"missing; a detailed result has every one of {list(PER_REQUEST)}")
    count = _list(result, "input_lens", path, None)
    lists = {name: _list(result, name, path, len(count)) for name in (*PER_REQUEST[1:], "errors", "start_times")}
    served = [i for i in range(len(count)) if _served(lists, result, i, path)]
    if not served:
        raise SpecError(str(path), "errors", "every request failed: nothing was served to compare")
    requests = _requests(result, lists, served, path)
    arrivals, note = _arrivals(result, lists["start_times"], served, path)
    notes = (note,) + ((f"{len(count) - len(served)} failed requests (errors) left out",)
                       if len(served) < len(count) else ())
    if arrivals is not None:
        requests = _with_arrivals(requests, arrivals)
    model_id = optional(result.get("model_id"), text, path, "model_id")
    return RealRun(str(path), VLLM_BENCH, path.stem, requests, EngineSettings(model_id=model_id),
                   arrivals_recorded=arrivals is not None, failed=len(count) - len(served), notes=notes)


def _list(result: dict, name: str, path: Path, length: int | None) -> list | None:
    value = result.get(name)
    if value is None and length is not None and name in ("errors", "start_times"):
        return None  # optional
    if not isinstance(value, list):
        raise SpecError(str(path), name, f"must be a list, one entry a request, got {type(value).__name__}")
    if length is not None and len(value) != length:
        raise SpecError(str(path), name, f"has {len(value)} entries, but input_lens has {length}; one a request")
    if length is None and not value:
        raise SpecError(str(path), name, "is empty: no request")
    return value


def _served(lists: dict, result: dict, i: int, path: Path) -> bool:
    """A request that succeeded: no error, and at least one output token (vLLM's bench writes 0 for a failure)."""
    errors = lists["errors"]
    if errors is not None and errors[i] not in (None, ""):
        if not isinstance(errors[i], str):
            raise SpecError(str(path), f"errors[{i}]", f"must be a string (\"\" when it succeeded), got {errors[i]!r}")
        return False
    return whole(lists["output_lens"][i], path, f"output_lens[{i}]") > 0


def _requests(result: dict, lists: dict, served: list[int], path: Path) -> RealRequests:
    prompt = np.array([whole(result["input_lens"][i], path, f"input_lens[{i}]", low=1) for i in served], np.int64)
    output = np.array([lists["output_lens"][i] for i in served], np.int64)
    ttft = np.array([seconds(lists["ttfts"][i], path, f"ttfts[{i}]") for i in served])
    itls = tuple(_gaps(lists["itls"][i], path, f"itls[{i}]") for i in served)
    decode = np.array([gaps.sum() for gaps in itls])
    with np.errstate(divide="ignore", invalid="ignore"):
        tpot = np.where(output > 1, decode / (output - 1), np.nan)
    index = np.array(served, np.int64)
    return RealRequests(index, tuple(f"request {i}" for i in served), np.zeros(len(served)), prompt, output, ttft,
                        tpot, ttft + decode, itls)


def _gaps(value: Any, path: Path, key: str) -> np.ndarray:
    if not isinstance(value, list):
        raise SpecError(str(path), key, f"must be a list of seconds between tokens, got {type(value).__name__}")
    return np.array([seconds(gap, path, f"{key}[{j}]") for j, gap in enumerate(value)], np.float64)


def _arrivals(result: dict, start_times: list | None, served: list[int], path: Path) -> tuple[np.ndarray | None, str]:
    """The served requests' sends, seconds after the first; None (and why) where the file does not record them."""
    if start_times is not None:
        sent = np.array([seconds(start_times[i], path, f"start_times[{i}]") for i in served])
        return sent - sent.min(), "arrivals: start_times (when the client sent each request)"
    rate, limit = result.get("request_rate"), result.get("max_concurrency")
    if rate == "inf" and limit is None and result.get("ramp_up_strategy") is None:
        return np.zeros(len(served)), "arrivals: request_rate inf without max_concurrency: every request sent at 0"
    drawn = f"request_rate {rate}, burstiness {result.get('burstiness')}"
    if limit is not None:
        drawn += f", max_concurrency {limit} (a closed loop)"
    return None, (f"arrivals were not recorded ({drawn}: drawn by the client and not saved); a replay needs a "
                  "workload from --config")


def _with_arrivals(requests: RealRequests, arrivals: np.ndarray) -> RealRequests:
    return RealRequests(requests.line, requests.request_id, arrivals, requests.prompt_len, requests.output_len,
                        requests.ttft_s, requests.tpot_s, requests.e2e_s, requests.itl_s)

