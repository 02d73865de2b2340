"""What `servesim capacity` says beside its numbers where the numbers alone would mislead: a probe that measured
nothing, a search that never found a rate over the target or never found one under it, an answer resting on a
handful of requests, a metric the workload cannot give; and the configs it cannot search."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

import servesim
from engine.errors import SpecError
from servesim.cli import main
from sim.capacity.plan import CapacityPlan, Search, _row, capacity_frame
from sim.capacity.saturation import Pace
from sim.capacity.search import Probe, replica_search
from sim.capacity.targets import TARGET_METRICS, Target, judge
from sim.experiment.config import load_experiment
from sim.experiment.output import check_out_dir
from tests.helpers.configs import tiny

SERVED = {"saturated": False, "backlog_growth": 0.0, "num_unfinished": 0, "num_ignored": 0, "num_aborted": 0,
          **Pace(0.0, 30.0, 0.0, 0.01, 0.1).as_summary()}  # a run that kept pace
TARGET = Target("ttft_p90_s", 1.0)


def summary(ttft: float, measured: int = 500, **served) -> dict:
    return {**{metric: 0.01 for metric in TARGET_METRICS}, **SERVED, **served, "ttft_p90_s": ttft,
            "num_measured": measured, "system": "vLLM", "cost_model": "roofline on a100-40gb",
            "cost_model_source": "roofline(a100-40gb, tp=1, ...)"}


def answer(write_config, path: list[Probe], rate: float, needed: int | None = None,
           total_rate: float | None = None) -> tuple[dict, list[str]]:
    """The row and the notes `servesim capacity` gives for a search that took `path` and found `rate`."""
    exp = load_experiment(write_config(tiny(systems="[vllm]")))
    plan = CapacityPlan(exp, (TARGET,), total_rate)
    notes: list[str] = []
    return _row(plan, Search(exp.systems[0], (TARGET,), True), (rate, needed), path, notes), notes


def drive(search, verdicts: list[bool | None]) -> tuple[list, object]:
    """Run a search generator, answering its probes with `verdicts` in turn: the points it asked, its result."""
    asked = [next(search)]
    try:
        for verdict in verdicts:
            asked.append(search.send(verdict))
    except StopIteration as stop:
        return asked, stop.value
    raise AssertionError(f"the search asked more than {len(verdicts)} probes: {asked}")


def test_a_replica_probe_that_measured_nothing_ends_the_search_without_walking_to_the_limit():
    asked, needed = drive(replica_search(0.01, 9.5), [None])
    assert asked == [(0.01, 1)] and needed is None
    asked, needed = drive(replica_search(40, 10), [False, None])  # walking up: more replicas measure even less
    assert asked == [(40, 4), (40, 5)] and needed is None


def test_the_note_says_the_replicas_cannot_be_told_rather_than_that_none_suffice(write_config):
    path = [Probe(1.0, 1, summary(0.1)), Probe(2.0, 1, summary(5.0)), Probe(0.01, 1, summary(float("nan"), 0))]
    row, notes = answer(write_config, path, 1.0, None, total_rate=0.01)
    assert row["replicas_needed"] is None
    assert any("the replicas needed cannot be told" in note for note in notes)
    assert not any("do not meet the target" in note for note in notes)


def test_a_search_that_held_at_every_rate_says_the_capacity_is_at_least_its_answer(write_config):
    path = [Probe(2.0 ** k, 1, summary(0.1)) for k in range(5)]
    row, notes = answer(write_config, path, 16.0)
    assert row["limited_by"] == "held at every rate probed"
    assert notes == ["  vLLM               holds at every rate probed, up to 16 req/s: the capacity is at least that"]


def test_a_search_that_met_the_target_nowhere_names_how_low_it_looked_and_how_to_look_lower(write_config):
    path = [Probe(5000.0 / 4 ** k, 1, summary(9.0)) for k in range(5)]
    row, notes = answer(write_config, path, 0.0)
    [note] = notes
    assert "no rate probed meets the target, down to 19.53 req/s (ttft_p90_s 9 > 1)" in note
    assert "give lower rates to search below" in note


def test_requests_cut_off_by_a_short_traces_horizon_are_told_apart_from_a_full_replica(write_config):
    cut_off = summary(0.1, saturated=True, num_unfinished=1)
    _, notes = answer(write_config, [Probe(0.5, 1, cut_off)], 0.0)
    assert notes[0].endswith("requests unfinished at the horizon of a short trace may only be long ones: raise "
                             "workload.duration_s or max_time_factor")
    fallen_behind = summary(0.1, saturated=True, num_unfinished=40, backlog_growth=0.3)
    _, notes = answer(write_config, [Probe(0.5, 1, fallen_behind)], 0.0)
    assert "horizon of a short trace" not in notes[0]


def test_an_answer_resting_on_a_few_requests_says_so(write_config):
    path = [Probe(0.02, 1, summary(0.01, measured=3)), Probe(0.04, 1, summary(5.0, measured=6))]
    _, notes = answer(write_config, path, 0.02)
    assert notes == ["  vLLM               the answer rests on 3 requests measured after the warm-up at 0.02 req/s: "
                     "a percentile of so few is noise; raise workload.duration_s"]
    _, notes = answer(write_config, [Probe(1.0, 1, summary(0.1)), Probe(2.0, 1, summary(5.0))], 1.0)
    assert notes == []  # 500 requests: nothing to say


def test_on_a_replay_the_notes_speak_of_its_trace(write_config, tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n" + "".join(
        f"{i},{50 + i},{10 + i}\n" for i in range(20)))
    exp = load_experiment(write_config(tiny(systems="[vllm]", workload=f"{{trace: {trace}}}", warmup_s="0")))
    plan = CapacityPlan(exp, (TARGET,))
    notes: list[str] = []
    path = [Probe(2.0 ** k, 1, summary(0.1, measured=20)) for k in range(3)]
    _row(plan, Search(exp.systems[0], (TARGET,), True), (4.0, None), path, notes)
    assert notes[0].endswith("the capacity is at least that (a replay serves its trace's requests at any rate: "
                             "they may be too few to load a replica)")
    assert notes[1].endswith("a percentile of so few is noise; replay a longer trace")


def test_a_tpot_no_request_can_give_is_named_as_such():
    verdict = judge({**summary(0.1), "tpot_p90_s": float("nan")}, (Target("tpot_p90_s", 0.05),))
    assert verdict.held is None
    assert verdict.why == "no tpot_p90_s measured after the warm-up (TPOT needs a request of 2 output tokens or more)"
    verdict = judge(summary(float("nan")), (TARGET,))
    assert verdict.why == "no ttft_p90_s measured after the warm-up"


SPLIT = "{prefill: {replicas: 1}, decode: {replicas: 1}}"


def test_a_split_config_is_refused_by_the_colocated_search_and_points_to_the_splits(write_config, tmp_path, capsys):
    config = write_config(tiny(systems="[vllm]", rates="[1]", split=SPLIT))
    with pytest.raises(SpecError, match="split: a capacity search varies colocated replicas.*servesim.split_capacity"):
        servesim.capacity(config, "ttft_p90_s=1", rate=4)
    out = tmp_path / "cap"
    assert main(["capacity", str(config), "--target", "ttft_p90_s=1", "--out", str(out)]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.endswith("split: a capacity search varies colocated replicas, which a split fleet does not have; "
                         "give --splits N to search its prefill:decode splits, or remove split")
    assert not out.exists()


def test_a_split_of_a_system_that_cannot_receive_kv_is_refused_at_the_door(write_config, tmp_path, capsys):
    with pytest.raises(SpecError, match=r"systems\[1\]: Orca \(Oracle\) is orca: only vLLM"):
        load_experiment(write_config(tiny(split=SPLIT)))
    out = tmp_path / "cap"
    config = write_config(tiny(rates="[1]"))
    assert main(["capacity", str(config), "--target", "ttft_p90_s=1", "--splits", "2", "--out", str(out)]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert "systems[1]: Orca (Oracle) is orca: only vLLM (kind vllm) serves a prefill:decode split" in line
    assert not out.exists()


def test_a_search_without_splits_leaves_no_earlier_split_table_beside_its_own(write_config, tmp_path):
    out = tmp_path / "cap"
    out.mkdir()
    (out / "capacity_split.csv").write_text("system,fleet\nold,colocated\n")
    config = write_config(tiny(systems="[vllm]", rates="[1]"))
    assert main(["capacity", str(config), "--target", "ttft_p90_s=1", "--tolerance", "0.3", "--out", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["capacity.csv", "capacity_probes.csv", "cost_models.txt",
                                                     "resolved.yaml"]
    assert "measured" in pd.read_csv(out / "capacity_probes.csv").columns
    (label,) = pd.read_csv(out / "capacity.csv")["cost_model"].unique()
    assert "+ vllm-0.19" in label and label in (out / "cost_models.txt").read_text(), (
        "the answer names what priced it, in a few words, and the file beside it in whole")


def test_replica_counts_are_whole_numbers_in_the_table():
    table = capacity_frame([{"system": "a", "replicas_needed": 3}, {"system": "b", "replicas_needed": None}])
    assert str(table["replicas_needed"].dtype) == "Int64"
    assert table.to_csv(index=False).splitlines()[1:] == ["a,3", "b,"]


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux's /proc")
def test_an_output_folder_the_file_system_refuses_is_refused_before_anything_runs():
    with pytest.raises(SpecError, match="--out: cannot write in /proc"):
        check_out_dir(Path("/proc/servesim-out"))
