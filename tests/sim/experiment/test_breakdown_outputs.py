"""A run asked for its breakdown records exactly what it would without, plus where each iteration's time went:
device kinds and host terms as iterations columns, their shares in the summary, and a Chrome/Perfetto trace."""
from __future__ import annotations

import gzip
import json
import struct

import numpy as np
import pytest
import yaml

from calibrate.clock.breakdown import fold
from engine.core.records import ITERATION_COLUMNS
from engine.errors import SpecError
from sim.experiment.config import experiment_from_dict
from sim.experiment.run import run_one
from sim.experiment.sweep import execute, summary_columns
from sim.experiment.trace_events import TRACE_FILE
from tests.helpers.configs import tiny

HOST = "{kind: roofline, overhead_s: 0.0004}"


def experiment(tmp_path, **keys):
    raw = yaml.safe_load(tiny(**keys))
    return experiment_from_dict(raw, str(tmp_path / "tiny.yaml"), tmp_path)


def bits(values) -> list[bytes]:
    return [struct.pack("<d", v) for v in np.asarray(values, dtype=float).tolist()]


@pytest.mark.parametrize("fleet", [{}, {"replicas": "3"}, {"replicas": "2", "router": "least_outstanding"}])
def test_a_breakdown_changes_no_record_and_adds_up_to_each_iteration(tmp_path, fleet):
    plain = experiment(tmp_path, rates="[3]", **fleet)
    split = experiment(tmp_path, rates="[3]", breakdown="true", **fleet)
    system = plain.systems[0]
    a, b = run_one(plain, system, 3.0, 0), run_one(split, system, 3.0, 0)
    for name in ITERATION_COLUMNS:
        assert bits(a.iteration_arrays[name]) == bits(b.iteration_arrays[name]), name
    assert json.dumps({k: v for k, v in b.summary.items() if not k.startswith("share_")}) == json.dumps(a.summary)
    it = b.iteration_arrays
    kinds = [name for name in it if name.startswith("device_") and name != "device_s"]
    assert "device_linear_s" in kinds and "device_attention_s" in kinds
    # the roofline's kinds add up to its device part to the bit, and the parts to each iteration's duration
    # (a duration is the clock's end less its start, so within the clock's rounding)
    for i in range(0, len(it["duration_s"]), 7):
        assert bits([fold(float(it[k][i]) for k in kinds)]) == bits([it["device_s"][i]])
    total = it["device_s"] + it["host_s"] + it["swap_s"]
    np.testing.assert_allclose(total, it["duration_s"], rtol=1e-9)
    shares = {k: v for k, v in b.summary.items() if k.startswith("share_")}
    assert shares["share_device"] + shares["share_host"] + shares["share_swap"] == pytest.approx(1.0)
    assert shares["share_device_linear"] > shares["share_device_all_reduce"] == 0.0


def test_a_roofline_overhead_is_its_own_kind_and_no_host_work_is_charged(tmp_path):
    """A roofline's fixed overhead shows as its own kind, at exactly what the config gave."""
    exp = experiment(tmp_path, rates="[2]", cost_model=HOST, breakdown="true")
    result = run_one(exp, exp.systems[0], 2.0, 0)
    assert set(result.iteration_arrays["device_overhead_s"].tolist()) == {0.0004}
    assert not result.iteration_arrays["host_s"].any()  # a roofline without host work charges none


def test_trace_events_are_a_trace_of_the_iterations(tmp_path):
    exp = experiment(tmp_path, rates="[3]", replicas="2", trace_events="true")
    assert exp.breakdown  # implied
    from sim.experiment.sweep import RunKey

    files = execute(exp, RunKey(exp.systems[0], 3.0, 0), "digest", "csv").files
    trace = json.loads(gzip.decompress(files[TRACE_FILE]))
    events = trace["traceEvents"]
    threads = {e["tid"] for e in events if e["name"] == "thread_name" and e["pid"] == 0}
    assert threads == {0, 1}  # the replicas (the requests' tracks are process 1's: test_request_tracks)
    iterations = [e for e in events if e.get("cat") == "iteration"]
    result = run_one(exp, exp.systems[0], 3.0, 0)
    assert len(iterations) == len(result.iteration_arrays["duration_s"])
    # each iteration's parts follow it: laid end to end inside it, adding up to it
    groups: list[tuple[dict, list]] = []
    for e in events:
        if e.get("cat") == "iteration":
            groups.append((e, []))
        elif e.get("cat") in ("device", "host", "swap"):
            groups[-1][1].append(e)
    for it, inside in groups:
        assert {e["tid"] for e in inside} == {it["tid"]}
        assert sum(e["dur"] for e in inside) == pytest.approx(it["dur"], rel=1e-6)
        assert inside[0]["ts"] == it["ts"]
        for before, after in zip(inside, inside[1:]):
            assert after["ts"] == pytest.approx(before["ts"] + before["dur"])
    assert execute(exp, RunKey(exp.systems[0], 3.0, 0), "digest", "csv").files[TRACE_FILE] == files[TRACE_FILE]


def test_the_summary_carries_the_shares_after_its_columns(tmp_path):
    exp = experiment(tmp_path, breakdown="true")
    rows = [run_one(exp, s, r, 0).summary for s in exp.systems for r in exp.rates]
    columns = list(summary_columns(rows))
    assert columns.index("share_device") > columns.index("seed") and columns[-1].startswith("share_")


@pytest.mark.parametrize("key", ["breakdown", "trace_events"])
def test_a_flag_that_is_not_a_boolean_is_refused_by_name(tmp_path, key):
    with pytest.raises(SpecError, match=f"{key}.*true or false"):
        experiment(tmp_path, **{key: "1"})


def test_the_command_asks_for_it_and_a_plain_rerun_does_not_keep_it(tmp_path):
    import pandas as pd

    from servesim.cli import main

    config = tmp_path / "tiny.yaml"
    config.write_text(tiny(rates="[2]", systems="[vllm]"))
    out = tmp_path / "out"
    assert main(["run", str(config), "--out", str(out), "--iterations", "csv", "--no-plots", "--trace-events"]) == 0
    run_dir = out / "runs" / "vllm_rate2_seed0"
    assert "device_linear_s" in pd.read_csv(run_dir / "iterations.csv.gz").columns
    assert (run_dir / TRACE_FILE).exists() and "share_device" in pd.read_csv(out / "summary.csv").columns
    # the same config without the flags is another run: simulated again, without the breakdown or the trace
    assert main(["run", str(config), "--out", str(out), "--iterations", "csv", "--no-plots"]) == 0
    assert "device_linear_s" not in pd.read_csv(run_dir / "iterations.csv.gz").columns
    assert not (run_dir / TRACE_FILE).exists() and "share_device" not in pd.read_csv(out / "summary.csv").columns


def test_a_named_host_model_shows_its_own_terms(tmp_path):
    """A config that names a host model breaks the host part down by that model's terms, which add up to it."""
    exp = experiment(tmp_path, rates="[2]", breakdown="true",
                     cost_model="{kind: roofline, host: vllm-a100-2024-05}")
    it = run_one(exp, exp.systems[0], 2.0, 0).iteration_arrays
    terms = [name for name in it if name.startswith("host_") and name != "host_s"]
    assert {"host_schedule_s", "host_sampler_s", "host_prepare_inputs_s", "host_process_outputs_s"} <= set(terms)
    np.testing.assert_allclose(sum(it[name] for name in terms), it["host_s"], rtol=1e-12)
    assert (it["host_s"] > 1e-3).all()  # a vLLM-derived engine's host work: milliseconds an iteration
