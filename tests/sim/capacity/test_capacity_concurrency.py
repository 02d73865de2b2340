"""`servesim capacity --concurrency` (sim/capacity/concurrency.py): the highest max_concurrency that meets the
targets, a closed loop at rate inf, found by an integer search; given as the concurrency and the rate it served."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

import servesim
from servesim.cli import main
from sim.capacity.search import concurrency_search
from tests.helpers.configs import tiny

CLOSED = tiny(systems="[vllm]", rates="[inf]", warmup_s="0", workload="{dataset: sharegpt-standin, num_requests: 120}")
TARGET = "ttft_p90_s=0.5"


def searched(held, start: int, ceiling: int) -> tuple[int, list[int]]:
    """The search's answer and the concurrencies it probed, answered by held(concurrency)."""
    search, probed = concurrency_search(start, ceiling), []
    try:
        concurrency = next(search)
        while True:
            probed.append(concurrency)
            concurrency = search.send(held(concurrency))
    except StopIteration as end:
        return end.value, probed


@pytest.mark.parametrize("start", [1, 3, 8, 64])
@pytest.mark.parametrize("knee", [0, 1, 2, 5, 7, 8, 9, 33, 63, 64, 100])
def test_the_integer_search_finds_the_highest_that_holds(start, knee):
    answer, probed = searched(lambda c: c <= knee, start, 64)
    assert answer == min(knee, 64)
    assert len(probed) == len(set(probed)) and len(probed) <= 16 and max(probed) <= 64


def test_no_information_sends_the_search_up_to_its_ceiling():
    assert searched(lambda c: None if c < 16 else c <= 20, 1, 100) == (20, [1, 2, 4, 8, 16, 32, 24, 20, 22, 21])
    assert searched(lambda c: None, 1, 10) == (0, [1, 2, 4, 8, 10])


@pytest.fixture
def here(tmp_path, monkeypatch) -> Path:
    monkeypatch.chdir(tmp_path)
    Path("closed.yaml").write_text(CLOSED)
    return tmp_path


def test_the_command_answers_in_concurrency_and_in_the_rate_it_served(here, capsys):
    assert main(["capacity", "closed.yaml", "--target", TARGET, "--concurrency", "--out", "out"]) == 0
    printed = capsys.readouterr().out
    table = pd.read_csv("out/capacity_concurrency.csv")
    probes = pd.read_csv("out/capacity_concurrency_probes.csv")
    assert list(table.columns) == ["system", "metric", "limit", "replicas", "max_concurrency", "request_rate_rps",
                                   "limited_by", "cost_model"]
    answer = int(table["max_concurrency"][0])
    assert 1 <= answer < 120 and table["limited_by"][0].startswith(f"at concurrency {answer + 1}: ttft_p90_s ")
    held = probes.set_index("max_concurrency")
    assert bool(held.loc[answer, "holds"]) and not bool(held.loc[answer + 1, "holds"])  # adjacent: exact
    assert table["request_rate_rps"][0] == held.loc[answer, "request_rate_rps"] > held.loc[1, "request_rate_rps"]
    assert f"concurrency {answer:>5} on 1 replica(s)" in printed and "capacity_concurrency.csv" in printed
    lines: list[str] = []
    api = servesim.concurrency_capacity("closed.yaml", TARGET, progress=lines.append)
    pd.testing.assert_frame_equal(api, table, check_dtype=False)
    assert [line for line in printed.splitlines() if line in lines] == lines  # the command's lines, in its order


def test_a_probe_reaching_the_requests_there_are_says_the_capacity_is_at_least_that(here):
    lines: list[str] = []
    table = servesim.concurrency_capacity("closed.yaml", "tpot_p90_s=10", overrides=["workload.num_requests=6"],
                                          progress=lines.append)
    assert table["max_concurrency"][0] == 6 and table["limited_by"][0].startswith("every request in flight at once")
    assert any("holds with all 6 requests in flight at once" in line for line in lines)


@pytest.mark.parametrize("argv, words", [
    (["--rate", "4"], "servesim: error: --rate: is a rate search's; a search over concurrency (--concurrency) runs at "
                      "rate inf and ends on adjacent whole numbers: leave it out"),
    (["--tolerance", "0.1"], "--tolerance: is a rate search's"),
    (["--splits", "2"], "--splits: is a rate search's"),
    (["--set", "workload={dataset: sharegpt-standin, duration_s: 30}", "--set", "rates=[1]"],
     "closed.yaml: workload.num_requests: a search over concurrency sends every request at 0 s (rate inf), so the "
     "requests must be counted, not drawn for workload.duration_s: give workload.num_requests (vLLM's "
     "--num-prompts)"),
    (["--target", "ttft_p91_s=1"], "unknown metric"),
])
def test_what_a_search_over_concurrency_cannot_use_is_refused_in_one_line(here, capsys, argv, words):
    assert main(["capacity", "closed.yaml", "--target", TARGET, "--concurrency", *argv, "--out", "out"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and words in err, err
    assert not Path("out").exists()


def test_a_split_fleet_is_refused_naming_split():
    from engine.errors import SpecError

    config = Path(__file__).resolve().parents[3] / "configs" / "examples" / "split_llama3_70b_h100.yaml"
    with pytest.raises(SpecError) as caught:
        servesim.concurrency_capacity(config, TARGET, overrides=["workload.num_requests=50",
                                                                 "workload.duration_s=null"])
    assert caught.value.key == "split" and "a split fleet does not have; remove split" in caught.value.message


def test_a_rate_search_from_rate_inf_is_refused_naming_rates(here, capsys):
    assert main(["capacity", "closed.yaml", "--target", TARGET, "--out", "out"]) == 2
    err = capsys.readouterr().err
    assert ("closed.yaml: rates: a rate search doubles from the lowest of the rates, and inf is no rate to double: "
            "give a finite one, or search over concurrency (servesim capacity --concurrency)") in err
