"""vLLM's `vllm bench serve --save-result --save-detailed` JSON is read exactly (seconds per request, vLLM's own
TTFT, TPOT, E2E and ITL), a failed request is left out and counted, arrivals come only from start_times (or an
"inf" rate's burst), and a file without per-request fields or with a malformed one is refused in one line."""
from __future__ import annotations

import math

import numpy as np
import pytest

from engine.errors import SpecError
from fidelity.runs.read import read_run
from tests.helpers.real_runs import MODEL_ID, write_vllm_result


def test_every_served_request_is_read_exactly(tmp_path):
    run = read_run(write_vllm_result(tmp_path / "result.json"))
    r = run.requests
    assert run.format == "vllm-bench-serve" and run.name == "result" and run.failed == 1
    assert run.settings.model_id == MODEL_ID and run.workload is None and run.series is None
    assert r.line.tolist() == [0, 2] and r.prompt_len.tolist() == [12, 7] and r.output_len.tolist() == [4, 2]
    assert r.arrival_s.tolist() == [0.0, 1001.25 - 1000.5] and run.arrivals_recorded
    assert r.ttft_s.tolist() == [0.05, 0.08]
    assert r.e2e_s.tolist() == [0.05 + sum([0.02, 0.03, 0.025]), 0.08 + 0.04]
    assert r.tpot_s.tolist() == [sum([0.02, 0.03, 0.025]) / 3, 0.04 / 1]
    assert [gaps.tolist() for gaps in r.itl_s] == [[0.02, 0.03, 0.025], [0.04]]
    assert any("1 failed requests" in note for note in run.notes)


def test_without_start_times_the_arrivals_are_not_recorded_nor_invented(tmp_path):
    run = read_run(write_vllm_result(tmp_path / "r.json", drop=("start_times",)))
    assert not run.arrivals_recorded and "arrivals were not recorded" in run.notes[0]
    assert "request_rate 4.0, burstiness 1.0" in run.notes[0]


def test_an_infinite_rate_without_a_concurrency_limit_sent_everything_at_zero(tmp_path):
    run = read_run(write_vllm_result(tmp_path / "r.json", drop=("start_times",), request_rate="inf"))
    assert run.arrivals_recorded and run.requests.arrival_s.tolist() == [0.0, 0.0]
    limited = read_run(write_vllm_result(tmp_path / "l.json", drop=("start_times",), request_rate="inf",
                                         max_concurrency=4))
    assert not limited.arrivals_recorded and "closed loop" in limited.notes[0]


def test_a_request_of_one_token_has_no_tpot(tmp_path):
    run = read_run(write_vllm_result(tmp_path / "r.json", output_lens=[4, 0, 1], itls=[[0.02, 0.03, 0.025], [], []]))
    assert math.isnan(run.requests.tpot_s[1]) and run.requests.e2e_s[1] == 0.08
    assert np.isfinite(run.requests.tpot_s[0])


MALFORMED = {
    "saved without --save-detailed": (dict(drop=("input_lens", "output_lens", "ttfts", "itls", "errors",
                                                 "generated_texts", "start_times")), "input_lens", "--save-detailed"),
    "one list missing": (dict(drop=("itls",)), "itls", "missing"),
    "a list too short": (dict(ttfts=[0.05, 0.0]), "ttfts", "has 2 entries, but input_lens has 3"),
    "a negative ttft": (dict(ttfts=[0.05, 0.0, -0.1]), "ttfts[2]", ">= 0"),
    "an itl not a list": (dict(itls=[[0.02], [], 0.04]), "itls[2]", "list of seconds"),
    "a gap not a number": (dict(itls=[[0.02, "x"], [], [0.04]]), "itls[0][1]", "finite number"),
    "a fractional length": (dict(input_lens=[12.5, 20, 7]), "input_lens[0]", "integer"),
    "a bad start time": (dict(start_times=[1000.5, 1000.7, None]), "start_times[2]", "finite number"),
    "every request failed": (dict(errors=["x", "y", "z"]), "errors", "every request failed"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_a_malformed_result_is_refused_naming_the_file_and_field(tmp_path, case):
    changes, where, what = MALFORMED[case]
    path = write_vllm_result(tmp_path / "r.json", **changes)
    with pytest.raises(SpecError) as caught:
        read_run(path)
    text = str(caught.value)
    assert text.startswith(f"{path}: {where}:") and what in text and "\n" not in text, text


def test_results_appended_one_a_line_are_refused(tmp_path):
    path = write_vllm_result(tmp_path / "r.json")
    path.write_text(path.read_text() + "\n" + path.read_text())
    with pytest.raises(SpecError, match=r"r.json: line 2: a second JSON value"):
        read_run(path)
