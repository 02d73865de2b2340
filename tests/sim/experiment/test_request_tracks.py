"""The trace's request tracks: each request's life read off its records (queued, its prefill iteration, decode, where
it ended), a thread per request under a `requests` process, at most MAX_REQUEST_TRACKS of them."""
from __future__ import annotations

import gzip
import json
from collections import defaultdict

import numpy as np
import pytest
import yaml

from sim.core.records import request_arrays
from sim.experiment.config import experiment_from_dict
from sim.experiment.request_tracks import MAX_REQUEST_TRACKS, RunRequests, request_events
from sim.experiment.sweep import RunKey, execute
from sim.experiment.trace_events import TRACE_FILE, US
from tests.helpers.configs import tiny


def iterations(*rows: tuple[int, float, float]) -> dict[str, np.ndarray]:
    """(replica, start_s, duration_s) rows, in the order they ended."""
    replica, start, duration = zip(*rows)
    return {"replica": np.array(replica), "start_s": np.array(start), "duration_s": np.array(duration)}


# two replicas; replica 1's first iteration ends when replica 0's does, at 1.0 s
KNOWN_ITERATIONS = iterations((0, 0.0, 1.0), (1, 0.5, 0.5), (0, 1.0, 0.5), (1, 1.0, 0.5), (0, 1.5, 0.5),
                              (0, 2.0, 0.5))
# request_id, replica, arrival, first token, finish, prompt, output, n, preemptions
KNOWN_REQUESTS = [(0, 0, 0.0, 1.0, 2.5, 10, 4, 1, 0),
                  (1, 0, 0.0, 1.0, 2.0, 20, 3, 1, 1),
                  (4, 1, 0.2, 1.0, 1.5, 30, 2, 2, 0),
                  (2, 0, 1.2, 2.0, None, 40, 9, 1, 0)]  # cut off by the horizon
# request_id, replica, arrival, first token, dropped at, prompt, output, n, preemptions, status
KNOWN_DROPPED = [(3, 0, 1.8, None, 2.0, 5000, 10, 1, 0, "ignored")]


def tracks(events) -> dict[int, list[tuple]]:
    """Each request's events, as (name, phase, start s, duration s or None)."""
    found = defaultdict(list)
    for e in events:
        if e["pid"] == 1 and e["ph"] in "Xi":
            found[e["tid"]].append((e["name"], e["ph"], e["ts"] / US, e["dur"] / US if "dur" in e else None))
    return dict(found)


def test_each_requests_life_is_read_off_its_records():
    requests = RunRequests(request_arrays(KNOWN_REQUESTS), KNOWN_DROPPED)
    events = list(request_events(requests, KNOWN_ITERATIONS))
    assert tracks(events) == {
        0: [("queued", "X", 0.0, 0.0), ("prefill", "X", 0.0, 1.0), ("decode", "X", 1.0, 1.5),
            ("finished", "i", 2.5, None)],
        1: [("queued", "X", 0.0, 0.0), ("prefill", "X", 0.0, 1.0), ("decode (preempted 1x)", "X", 1.0, 1.0),
            ("finished", "i", 2.0, None)],
        2: [("queued", "X", 1.2, pytest.approx(0.3)), ("prefill", "X", 1.5, 0.5),
            ("decode (unfinished)", "X", 2.0, 0.5)],  # to the trace's end
        3: [("queued", "X", 1.8, pytest.approx(0.2)), ("ignored", "i", 2.0, None)],
        4: [("queued", "X", 0.2, pytest.approx(0.3)), ("prefill", "X", 0.5, 0.5),  # its own replica's iteration
            ("decode", "X", 1.0, 0.5), ("finished", "i", 1.5, None)],
    }
    names = {e["tid"]: e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert names == {i: f"request {i}" for i in range(5)}
    assert [e["args"]["name"] for e in events if e["name"] == "process_name"] == ["requests"]
    decode = next(e for e in events if e.get("tid") == 4 and e["name"] == "decode")
    assert decode["args"] == {"replica": 1, "prompt_tokens": 30, "output_tokens": 2, "n": 2, "preemptions": 0}


def test_a_chunked_system_names_what_the_records_cannot_split():
    requests = RunRequests(request_arrays(KNOWN_REQUESTS[:1]), chunked=True)
    assert [name for name, *_ in tracks(request_events(requests, KNOWN_ITERATIONS))[0]] == [
        "queued / earlier chunks", "last prefill chunk", "decode", "finished"]


@pytest.mark.parametrize(("count", "cap", "every", "shown", "nth"), [
    (95, 10, 10, 10, "10th"), (100, 10, 10, 10, "10th"), (101, 10, 11, 10, "11th"), (10, 10, 1, 10, ""),
    (2500, MAX_REQUEST_TRACKS, 3, 834, "3rd"), (2001, MAX_REQUEST_TRACKS, 3, 667, "3rd")])
def test_a_long_run_gets_every_kth_request_up_to_the_cap(count, cap, every, shown, nth):
    waiting = [(i, 0, 0.01 * i, None, None, 10, 10, 1, 0) for i in range(count)]  # nothing ran
    events = list(request_events(RunRequests(request_arrays(waiting)), iterations((0, 0.0, 1.0)), cap=cap))
    assert sorted(tracks(events)) == list(range(0, count, every)) and len(tracks(events)) == shown <= cap
    name = next(e["args"]["name"] for e in events if e["name"] == "process_name")
    assert name == (f"requests: every {nth} of {count} by id ({shown} tracks)" if nth else "requests")


def run_trace(tmp_path, **keys) -> tuple[list[dict], dict]:
    raw = yaml.safe_load(tiny(trace_events="true", **keys))
    exp = experiment_from_dict(raw, str(tmp_path / "tiny.yaml"), tmp_path)
    from sim.experiment.run import run_one

    key = RunKey(exp.systems[0], exp.rates[0], 0)
    trace = json.loads(gzip.decompress(execute(exp, key, "digest", "none").files[TRACE_FILE]))
    return trace["traceEvents"], run_one(exp, key.system, key.rate, 0).request_arrays


@pytest.mark.parametrize("keys", [{"rates": "[3]", "replicas": "2"},
                                  {"rates": "[6]", "kv_cache_gib": "3", "systems": "[vllm]"}])
def test_a_tiny_runs_request_tracks_are_its_requests(tmp_path, keys):
    """A fleet of two, and one replica short of KV (preemptions, requests left waiting at the horizon)."""
    events, requests = run_trace(tmp_path, **keys)
    found = tracks(events)
    assert sorted(found) == requests["request_id"].tolist()
    # each slice's start and length in integer nanoseconds, as Perfetto reads them
    found_ns = {tid: [(round(ts * 1e9), round(dur * 1e9)) for _, ph, ts, dur in track if ph == "X"]
                for tid, track in found.items()}
    iteration_slices = {(e["tid"], round(e["ts"] * 1e3), round((e["ts"] + e["dur"]) * 1e3)) for e in events
                        if e.get("cat") == "iteration"}
    for i, request_id in enumerate(requests["request_id"].tolist()):
        names = [name for name, *_ in found[request_id]]
        arrival, first, finish = (requests[c][i] for c in ("arrival_s", "first_token_s", "finish_s"))
        preempted = int(requests["num_preemptions"][i])
        decode = f"decode (preempted {preempted}x)" if preempted else "decode"
        if np.isnan(first):
            assert names == ["queued (unfinished)"]
        elif np.isnan(finish):
            assert names == ["queued", "prefill", decode + " (unfinished)"]
        else:
            assert names == ["queued", "prefill", decode, "finished"]
            assert found[request_id][-1][2] == pytest.approx(finish)
        assert found[request_id][0][2] == pytest.approx(arrival)
        if not np.isnan(first):
            queued, prefill, decode_slice = (found_ns[request_id][j] for j in range(3))
            assert queued[0] + queued[1] == prefill[0] and prefill[0] + prefill[1] == decode_slice[0]  # end to end
            assert decode_slice[0] == round(first * 1e9)
            # the prefill is one of its replica's iterations, the one that ended at its first token
            assert (int(requests["replica"][i]), prefill[0], prefill[0] + prefill[1]) in iteration_slices
    assert any("preempted" in name for track in found.values() for name, *_ in track) == ("kv_cache_gib" in keys)


def test_the_command_says_how_the_tracks_are_capped(tmp_path, capsys):
    from servesim.cli import main

    config = tmp_path / "tiny.yaml"
    config.write_text(tiny(rates="[2]", systems="[vllm]"))
    assert main(["run", str(config), "--out", str(tmp_path / "out"), "--no-plots", "--trace-events"]) == 0
    assert (f"a track per request, at most {MAX_REQUEST_TRACKS} (beyond, every k-th request by id"
            in capsys.readouterr().out)
