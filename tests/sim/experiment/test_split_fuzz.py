"""Split fleets at random, driven to their edges: pool sizes, routers, what a full decode pool does, decode pools
too small to take two requests at once, and KV links from none (refused) through too slow for any copy to end in
the run to all but free, on a tiny model's short traces cut at their horizon. Every config either runs or is
refused in one line; a run's summary is finite (NaN where nothing was measured) and counts only what happened
before its horizon; every request is recorded once (finished, unfinished, or dropped); a request's KV moves at
most once, and every finished request's once.

Bounded for CI: derandomized, a few dozen examples of a few seconds of arrivals on opt-tiny."""
from __future__ import annotations

import math
from collections import Counter

import pytest
from hypothesis import HealthCheck, Phase, event, example, given, settings
from hypothesis import strategies as st

from engine.core.records import DROPPED_COLUMNS, SPECULATIVE_COLUMNS
from engine.errors import SpecError, Unservable
from sim.core.split_fleet import TRANSFER_COLUMNS, SplitRuns
from sim.experiment import run
from sim.experiment.config import load_experiment
from sim.experiment.metrics import SIGNED_METRICS, SUMMARY_METRICS
from sim.experiment.run import horizon_of, run_one, trace_for
from sim.experiment.split_run import SPLIT_COLUMNS, serve_split_trace

EDGE_BANDWIDTHS = ["0", "1.0e-300", "1.0e-3", ".inf",  # refused; the rest runs, 1 B/s copying no prompt in the run
                   "1.0", "1.0e+3", "1.0e+4", "1.0e+5", "1.0e+6", "1.0e+9", "1.0e+300"]
EDGE_LATENCIES = ["0", "0", "1.0e-6", "1.0e-6", "0.05", "0.5", "5", "1.0e+4", "86400", "1.0e+300"]  # mostly served
# the config file is written again for each example: the fixture's one path serves them all; no explain phase,
# which reruns a failing example for minutes
FUZZ = settings(deadline=None, derandomize=True, database=None, max_examples=50,
                phases=[Phase.explicit, Phase.generate, Phase.shrink],
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
ROUTERS = ["round_robin", "least_outstanding", "power_of_two", "cache_aware"]
KIND, PREFILLED, START, END, DECODE = (TRANSFER_COLUMNS.index(k) for k in
                                       ("kind", "prefilled_s", "start_s", "end_s", "decode_replica"))


# what the decode pool proposes: nothing, an n-gram lookup, or an EAGLE head (whose KV takes the decode pool's room)
SPECULATIVE = [None, "{method: ngram, num_speculative_tokens: 2, acceptance: {mean_accepted: 1}}",
               "{method: eagle, num_speculative_tokens: 4, acceptance: {rates: [0.9, 0.7, 0.5, 0.3]}}"]


def config(num_prefill: int, num_decode: int, router: str, on_decode_full: str, bytes_per_s: str, latency_s: str,
           decode_gib: str, rate: float, duration_s: float, max_time_factor: float,
           speculative: str | None = None) -> str:
    caching = ", prefix_caching: true" if router == "cache_aware" else ""
    proposing = f", speculative: {speculative}" if speculative is not None else ""
    system = f"{{preset: vllm, name: split{caching}{proposing}}}" if caching or proposing else "vllm"
    return f"""\
name: split-fuzz
model: opt-tiny
hardware: a100-40gb
kv_cache_gib: 0.01
workload: {{dataset: sharegpt-standin, duration_s: {duration_s}}}
systems: [{system}]
router: {router}
rates: [{rate}]
warmup_s: 0.5
max_time_factor: {max_time_factor}
split:
  prefill: {{replicas: {num_prefill}}}
  decode: {{replicas: {num_decode}, kv_cache_gib: {decode_gib}}}
  kv_link: {{kind: custom, bytes_per_s: {bytes_per_s}, latency_s: {latency_s}}}
  on_decode_full: {on_decode_full}
"""


def one_line(err: BaseException) -> bool:
    return isinstance(err, (SpecError, Unservable)) and str(err) != "" and "\n" not in str(err)


@pytest.mark.slow
@FUZZ
@given(num_prefill=st.integers(1, 3), num_decode=st.integers(1, 3), router=st.sampled_from(ROUTERS),
       on_decode_full=st.sampled_from(["hold", "recompute"]),
       bytes_per_s=st.one_of(st.sampled_from(EDGE_BANDWIDTHS), st.floats(1.0, 1e12).map(repr)),
       latency_s=st.sampled_from(EDGE_LATENCIES),
       decode_gib=st.sampled_from(["null", "0.0002", "0.001"]),  # 0.0002: 26 blocks, one long request
       rate=st.sampled_from([1.0, 4.0, 16.0]), duration_s=st.sampled_from([1.0, 2.0]),
       max_time_factor=st.sampled_from([1.0, 2.0]), speculative=st.sampled_from(SPECULATIVE))
# a decode pool full at once, recomputing; a link that ends no copy in the run
@example(num_prefill=2, num_decode=1, router="round_robin", on_decode_full="recompute", bytes_per_s="1.0e+9",
         latency_s="0", decode_gib="0.0002", rate=16.0, duration_s=2.0, max_time_factor=2.0, speculative=None)
@example(num_prefill=1, num_decode=2, router="least_outstanding", on_decode_full="hold", bytes_per_s="1.0",
         latency_s="0", decode_gib="null", rate=4.0, duration_s=2.0, max_time_factor=1.0, speculative=None)
# the same full decode pool, its EAGLE head's KV beside the target's and four proposals' slots a decode
@example(num_prefill=2, num_decode=1, router="cache_aware", on_decode_full="recompute", bytes_per_s="1.0e+9",
         latency_s="0", decode_gib="0.0002", rate=16.0, duration_s=2.0, max_time_factor=2.0,
         speculative=SPECULATIVE[2])
def test_random_split_fleets_at_their_edges_summarize_only_their_run(write_config, monkeypatch, num_prefill,
                                                                     num_decode, router, on_decode_full, bytes_per_s,
                                                                     latency_s, decode_gib, rate, duration_s,
                                                                     max_time_factor, speculative):
    path = write_config(config(num_prefill, num_decode, router, on_decode_full, bytes_per_s, latency_s, decode_gib,
                               rate, duration_s, max_time_factor, speculative))
    served: list[SplitRuns] = []  # the fleet's transfers, as run_one serves it

    def serving(*args) -> SplitRuns:
        served.append(serve_split_trace(*args))
        return served[-1]
    monkeypatch.setattr(run, "serve_split_trace", serving)
    try:
        exp = load_experiment(path)
        result = run_one(exp, exp.systems[0], rate, 0)
    except (SpecError, Unservable) as err:
        assert one_line(err), repr(err)
        event(f"refused: {getattr(err, 'key', type(err).__name__)}")
        return
    event("served" if speculative is None else "served speculating")
    trace = trace_for(exp, rate, 0)
    horizon = horizon_of(exp, trace)
    check_summary(result.summary, horizon)
    check_each_request_once(result.request_arrays, result.dropped_values, len(trace))
    check_transfers(served[0].transfers, result.request_arrays, horizon, num_prefill)
    check_speculation(result.request_arrays, result.iteration_arrays, speculative is not None, num_prefill)
    for kind in sorted({row[KIND] for row in served[0].transfers}):
        event(f"transfers {kind}")


def check_summary(summary: dict, horizon: float) -> None:
    for metric in (*SUMMARY_METRICS, *SPLIT_COLUMNS):
        value = float(summary[metric])
        assert math.isnan(value) or (math.isfinite(value) and (value >= 0 or metric in SIGNED_METRICS)), \
            f"{metric} = {value}"
    for metric in ("kv_copy_mean_s", "kv_wait_mean_s", "ttft_mean_s", "latency_mean_s"):
        assert not summary[metric] > horizon, f"{metric} = {summary[metric]} past the horizon {horizon}"
    assert not summary["recomputed_share"] > 1


def check_each_request_once(requests: dict, dropped: list[tuple], num_requests: int) -> None:
    """Finished, unfinished at the horizon, or dropped: each request of the trace once."""
    ids = Counter(int(rid) for rid in requests["request_id"])
    ids.update(int(values[DROPPED_COLUMNS.index("request_id")]) for values in dropped)
    assert sorted(ids) == list(range(num_requests)) and set(ids.values()) <= {1}


def check_transfers(transfers: list[tuple], requests: dict, horizon: float, num_prefill: int) -> None:
    """A request's KV moves at most once, every finished request's (beyond one token) once, and none after the
    horizon."""
    rows = Counter(row[0] for row in transfers)
    assert set(rows.values()) <= {1}, "a request's KV moved twice"
    kind = {row[0]: row[KIND] for row in transfers}
    for row in transfers:
        if row[KIND] == "copied":
            assert row[PREFILLED] <= row[START] <= row[END] <= horizon
        elif row[KIND] == "unfinished":
            assert math.isnan(row[END]) and (math.isnan(row[START]) or row[PREFILLED] <= row[START] < horizon)
        elif row[KIND] == "waiting":
            assert row[DECODE] == -1 and math.isnan(row[START])
        else:
            assert row[KIND] == "recomputed" and row[START] == row[END] < horizon
    for rid, finish, output_len, replica in zip(requests["request_id"], requests["finish_s"], requests["output_len"],
                                                requests["replica"]):
        finished = finish is not None and not math.isnan(finish)  # an all-unfinished column holds None
        if finished and output_len > 1:
            assert kind.get(int(rid)) in ("copied", "recomputed"), f"request {rid} finished without its KV moved"
            assert replica >= num_prefill  # decoded on a decode replica
        if kind.get(int(rid)) in ("unfinished", "waiting"):
            assert not finished


def check_speculation(requests: dict, iterations, speculating: bool, num_prefill: int) -> None:
    """A speculating decode pool's tokens proposed and accepted, per request and per iteration, agree, and the
    prefill replicas propose none; a fleet that does not speculate records neither column."""
    if not speculating:
        assert not set(SPECULATIVE_COLUMNS) & (set(requests) | set(iterations))
        return
    prefilling = iterations["replica"] < num_prefill
    for name in SPECULATIVE_COLUMNS:
        assert requests[name].sum() == iterations[name].sum() and not iterations[name][prefilling].any()
    assert (requests["accepted_tokens"] <= requests["proposed_tokens"]).all()
