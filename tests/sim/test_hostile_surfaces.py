"""Hostile inputs at every surface (capacity's search, trace rows, calibrate CSVs, config keys, command-line
flags), each a regression test at the command line: a one-line error with exit status 2, or the right
answer, in --jobs 1 and --jobs 2 where the command takes --jobs.

Every case runs the command's main() in this process (as test_hostile_inputs.py does); only the signal
test starts a subprocess, since a signal is what it is about.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest
import yaml

from calibrate.fitting.profile_file import FORMAT, load_profile
from servesim.cli import main
from tests.helpers.hostile import TINY, profile

REPO = Path(__file__).resolve().parents[2]
REPLAY = TINY.replace("{dataset: sharegpt-standin, arrival: poisson, duration_s: 20}", "{trace: t.csv}") \
    .replace("warmup_s: 2", "warmup_s: 0")
TRACE_HEADER = "arrived_at,num_prefill_tokens,num_decode_tokens"
JOBS = ["1", "2"]


@pytest.fixture
def here(tmp_path, monkeypatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tiny.yaml").write_text(textwrap.dedent(TINY))
    (tmp_path / "replay.yaml").write_text(textwrap.dedent(REPLAY))
    (tmp_path / "folder").mkdir()
    return tmp_path


def refused(capsys, argv: list[str], *expected: str) -> str:
    """main(argv) exits 2 with one line naming what was wrong, and writes no ./out."""
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("servesim: error: ") and err.count("\n") == 1, err
    for words in expected:
        assert words in err, err
    assert not Path("out").exists()
    return err


def trace(rows: str, name: str = "t.csv", header: str = TRACE_HEADER) -> None:
    Path(name).write_text(f"{header}\n{rows}")


# --- 1, 2: capacity ends, with the right answer --------------------------------------------------
CAPACITY = ["capacity", "tiny.yaml", "--target", "normalized_latency=0.1", "--out", "out"]


@pytest.mark.parametrize("jobs", JOBS)
def test_a_tolerance_finer_than_a_float_resolves_is_refused(here, capsys, jobs):
    refused(capsys, CAPACITY + ["--tolerance", "1e-20", "--jobs", jobs],
            "--tolerance: 1e-20 is finer than a float resolves between two rates (about 8.9e-16 relative)")


@pytest.mark.parametrize("jobs", JOBS)
def test_a_replay_the_rate_cannot_change_is_refused_naming_time_scale(here, capsys, jobs):
    trace("0,10,10\n1,20,20\n")
    refused(capsys, ["capacity", "replay.yaml", "--target", "normalized_latency=0.1", "--set",
                     "workload.time_scale=1", "--out", "out", "--jobs", jobs],
            "replay.yaml: workload.time_scale: replays t.csv at 1x its recorded rate whatever the request rate")


@pytest.mark.parametrize("jobs", JOBS)
def test_a_rate_past_the_request_limit_is_refused_before_any_probe(here, capsys, jobs):
    refused(capsys, CAPACITY + ["--rate", "1e9", "--jobs", jobs],
            "--rate: 1e+09 req/s for 20 s (workload.duration_s) is about 2e+10 requests, more than one run "
            "simulates (10,000,000)")


def test_capacity_searches_up_from_a_rate_where_nothing_is_measured(here, capsys):
    """At 0.01 req/s no request arrives after the warm-up: that says nothing, so the search goes up and
    finds the rate that holds, and the same one in one process or two."""
    answers = {}
    for jobs in JOBS:
        assert main(CAPACITY[:-1] + [f"out{jobs}", "--set", "rates=[0.01]", "--tolerance", "0.2", "--jobs", jobs]) == 0
        probes = pd.read_csv(f"out{jobs}/capacity_probes.csv")
        answers[jobs] = pd.read_csv(f"out{jobs}/capacity.csv")["max_rate_per_replica_rps"][0]
        assert probes["rate"].iloc[0] == 0.01 and pd.isna(probes["holds"].iloc[0])  # no information, not over
        assert probes["holds"].eq(True).any() and probes["holds"].eq(False).any()
    assert answers["1"] == answers["2"] > 0.01
    assert "no rate meets the target" not in capsys.readouterr().out


# --- 3: token counts are numbers before they are integers ----------------------------------------
@pytest.mark.parametrize("row, column, cell", [
    ("0,9223372036854775807,10", "num_prefill_tokens", "9223372036854775807"),  # wrapped to a negative
    ("0,5e18,5e18", "num_prefill_tokens", "5e18"),  # the sum wrapped: "too long" never applied
    ("0,10,1e20", "num_decode_tokens", "1e20"),  # was "no request with tokens to serve"
])
@pytest.mark.parametrize("jobs", JOBS)
def test_a_count_past_what_an_integer_holds_names_file_row_and_column(here, capsys, row, column, cell, jobs):
    trace(f"0,10,10\n{row}\n")
    refused(capsys, ["run", "replay.yaml", "--out", "out", "--jobs", jobs],
            f"t.csv: row 2: (line 3) column {column}: {cell} is more than a count is read as")


def test_a_lengths_file_count_past_an_integer_is_refused_too(here, capsys):
    Path("lengths.csv").write_text("prompt_len,output_len\n10,10\n20,18446744073709551616\n")
    refused(capsys, ["run", "tiny.yaml", "--set", "workload.dataset=lengths.csv", "--out", "out"],
            "lengths.csv: row 2: (line 3) column output_len: 18446744073709551616 is more than a count")


def test_a_long_but_countable_row_is_dropped_by_the_documented_rule(here, capsys):
    trace("0,10,10\n0.5,4000000000000000,4000000000000000\n1,20,20\n")
    assert main(["run", "replay.yaml", "--out", "out", "--jobs", "1", "--iterations", "none"]) == 0
    assert pd.read_csv("out/summary.csv")["num_requests"][0] == 2
    assert "RuntimeWarning" not in capsys.readouterr().err


# --- 4: a user's mistake is not an internal error --------------------------------------------------
@pytest.mark.parametrize("jobs", JOBS)
def test_samples_that_must_swap_with_no_swap_space_name_the_key(here, capsys, jobs):
    assert main(["run", "tiny.yaml", "--set", "workload.n=6", "--set", "swap_space_gib=0", "--set", "rates=[4]",
                 "--out", "out", "--jobs", jobs, "--iterations", "none"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "must be swapped out to preempt it" in err and "raise swap_space_gib" in err


@pytest.mark.parametrize("jobs", JOBS)
def test_an_unservable_run_of_a_two_system_sweep_names_its_system(here, capsys, jobs):
    # the scheduler's message names the request and swap_space_gib; which system's run it was, only the run knows
    systems = "[orca-oracle, {preset: vllm, name: vLLM swapping, preemption: swap}]"
    assert main(["run", "tiny.yaml", "--set", f"systems={systems}", "--set", "workload.n=6", "--set",
                 "swap_space_gib=0", "--set", "rates=[4]", "--out", "out", "--jobs", jobs, "--iterations", "none"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert err.startswith("servesim: error: vLLM swapping at rate 4, seed 0: request "), err
    assert "raise swap_space_gib" in err, err


def test_an_unservable_error_keeps_its_type_with_the_run_named(here):
    from engine.errors import SwapSpaceExhausted
    from sim.experiment.config import load_experiment
    from sim.experiment.run import run_one

    exp = load_experiment("tiny.yaml", ["workload.n=6", "swap_space_gib=0", "rates=[4]"])
    with pytest.raises(SwapSpaceExhausted, match=r"^vLLM at rate 4, seed 0: request \d+: its 6 sequences"):
        run_one(exp, exp.systems[0], 4, 0)


def test_date_times_that_change_utc_offset_are_counted_in_real_seconds(here):
    from sim.workload.recorded import read_recorded_trace

    # the clocks went back an hour between the rows: 2 s apart, not an hour and 2 s
    trace("2023-10-29 01:59:59+02:00,10,10\n2023-10-29 01:00:01+01:00,20,20\n",
          header="TIMESTAMP,ContextTokens,GeneratedTokens")
    assert read_recorded_trace("t.csv").arrival_s.tolist() == [0.0, 2.0]


def test_a_local_time_beside_one_with_an_offset_is_refused_naming_the_row(here, capsys):
    trace("2023-10-29 01:59:59+02:00,10,10\n2023-10-29 02:00:01,20,20\n",
          header="TIMESTAMP,ContextTokens,GeneratedTokens")
    refused(capsys, ["run", "replay.yaml", "--out", "out"],
            "t.csv: row 2: (line 3) column TIMESTAMP: '2023-10-29 02:00:01' lacks a UTC offset and row 1 has one")


@pytest.mark.parametrize("value", ["inf", "nan", "0", "-1"])
@pytest.mark.parametrize("jobs", JOBS)
def test_a_bad_ylim_is_refused_before_anything_runs(here, capsys, value, jobs):
    """It used to simulate everything, write summary.csv, then fail in the plot."""
    refused(capsys, ["run", "tiny.yaml", "--ylim", value, "--out", "out", "--jobs", jobs],
            f"--ylim: must be a positive number, got {float(value)!r}")


def test_validate_of_a_cuda_config_without_cuda_names_the_key(here, capsys, monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    refused(capsys, ["validate", str(REPO / "configs/validation/h200-opt-13b.yaml"), "--out", "out"],
            "h200-opt-13b.yaml: validation.device: cuda, but torch finds no CUDA device on this machine")


@pytest.mark.parametrize("device, words", [("cuda", "--device: cuda, but torch finds no CUDA device"),
                                           ("tpu", "--device: 'tpu' is not one of ['cpu', 'cuda']")])
def test_calibrate_profile_on_a_device_that_is_not_there_is_refused(here, capsys, monkeypatch, device, words):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    refused(capsys, ["calibrate", "profile", "--model", "opt-tiny", "--device", device, "--out", "out/raw.csv"],
            words)


@pytest.fixture
def raw_csv(here) -> Path:
    from tests.helpers.synthetic_profile import synthetic_raw

    synthetic_raw(0.02).to_csv("raw.csv", index=False)
    return here / "raw.csv"


def test_an_empty_profile_csv_is_refused(here, capsys):
    Path("raw.csv").write_text("")
    refused(capsys, ["calibrate", "fit", "raw.csv", "--out", "out/p.yaml"], "raw.csv: not a profile CSV")


@pytest.mark.parametrize("folds, words", [
    ("1", "--folds: must be an integer >= 2, got 1"),
    ("0", "--folds: must be an integer >= 2, got 0"),  # wrote "0-fold cross-validation"
    ("100000", "--folds: 100000 folds for the"),  # ran for minutes, unbounded
])
def test_folds_are_checked_at_the_door(raw_csv, capsys, folds, words):
    refused(capsys, ["calibrate", "fit", "raw.csv", "--folds", folds, "--out", "out/p.yaml"], words)


# --- 5: a key that only applies to a mode refuses to be set without it ---------------------------------
@pytest.mark.parametrize("overrides, words", [
    (["workload.beam_continue=0.5"], "workload.beam_continue: applies only to beam search"),
    (["workload.cv=2"], "workload.cv: applies only to gamma arrivals"),
    (["workload.prefix_tokens=4", "workload.dataset=chatbot"], "workload.prefix_tokens: applies to a length"),
    (["workload.new_conversation_prob=0.5"], "workload.new_conversation_prob: applies only to a conversation"),
    (["workload.time_scale=2"], "workload.time_scale: applies only when replaying"),
    (["workload.window_s=[0,10]"], "workload.window_s: applies only when replaying"),
])
def test_a_mode_only_key_without_its_mode_is_refused(here, capsys, overrides, words):
    refused(capsys, ["run", "tiny.yaml", *(a for o in overrides for a in ("--set", o)), "--out", "out"], words)


@pytest.mark.parametrize("key, value, words", [
    ("beam_continue", "0.5", "applies only to beam search, and no request of t.csv searches beams"),
])
def test_a_generated_workload_key_beside_a_replay_is_refused(here, capsys, key, value, words):
    trace("0,10,10\n1,20,20\n")
    refused(capsys, ["run", "replay.yaml", "--set", f"workload.{key}={value}", "--out", "out"],
            f"workload.{key}: {words}")


@pytest.mark.parametrize("jobs", JOBS)
@pytest.mark.parametrize("overrides, words", [
    (["rates=[inf]"], "rates[0]: inf sends every request at 0 s (vLLM's --request-rate inf), so the requests must be "
                      "counted"),
    (["rates=[inf]", "workload.duration_s=null", "workload.num_requests=10"],
     "warmup_s: 2 s of warm-up leaves nothing to measure at rate inf"),
    (["workload.max_concurrency=0"], "workload.max_concurrency: must be a positive integer, got 0"),
    (["concurrencies=[2, 2.5]"], "concurrencies[1]: must be a positive integer, got 2.5"),
    (["workload.burstiness=-2"], "workload.burstiness: must be a number in [0.01, 1000000], got -2"),
    (["workload.arrival=gamma", "workload.cv=0.5", "workload.burstiness=4"],
     "workload.burstiness: and workload.cv both give the gaps' shape"),
])
def test_a_client_it_cannot_simulate_is_refused_before_any_run(here, capsys, jobs, overrides, words):
    refused(capsys, ["run", "tiny.yaml", *(a for o in overrides for a in ("--set", o)), "--jobs", jobs, "--out", "out"],
            words)


@pytest.mark.parametrize("jobs", JOBS)
def test_a_search_over_concurrency_without_a_count_names_num_requests(here, capsys, jobs):
    refused(capsys, [*CAPACITY, "--concurrency", "--jobs", jobs], "tiny.yaml: workload.num_requests: a search over "
            "concurrency sends every request at 0 s (rate inf), so the requests must be counted")


def test_a_trace_set_over_a_generated_config_replaces_it_as_documented(here):
    """workload.trace replaces the generated workload: its dataset, arrival and cv stand aside."""
    from sim.experiment.config import load_experiment

    trace("0,10,10\n1,20,20\n")
    exp = load_experiment("tiny.yaml", ["workload.arrival=gamma", "workload.cv=2", "workload.trace=t.csv"])
    assert exp.workload.is_replay


# --- 6: refusals that say what is really wrong --------------------------------------------------------
@pytest.mark.parametrize("jobs", JOBS)
def test_prefix_at_the_documented_maximum_is_refused_at_load_naming_the_key_and_file(here, capsys, jobs):
    from sim.workload.paths import SHAREGPT_CSV

    refused(capsys, ["run", "tiny.yaml", "--set", "workload.dataset=sharegpt", "--set", "workload.prefix_tokens=2045",
                     "--out", "out", "--jobs", jobs],
            "tiny.yaml: workload.prefix_tokens: a prefix of 2045 tokens leaves 3 of max_seq_len 2048",
            f"({SHAREGPT_CSV})", "must be at most")


def test_the_largest_prefix_the_refusal_offers_runs(here):
    from engine.errors import SpecError
    from sim.experiment.config import load_experiment
    from sim.experiment.run import run_one

    with pytest.raises(SpecError) as err:
        load_experiment("tiny.yaml", ["workload.prefix_tokens=2045"])
    largest = int(str(err.value).rsplit("at most ", 1)[1].split()[0])
    exp = load_experiment("tiny.yaml", [f"workload.prefix_tokens={largest}", "workload.duration_s=5",
                                        "warmup_s=0"])
    assert run_one(exp, exp.systems[0], 1.0, 0).summary["num_requests"] > 0


@pytest.mark.parametrize("jobs", JOBS)
def test_300_beams_under_n_1_are_blamed_on_max_num_seqs(here, capsys, jobs):
    trace("0,10,10,1\n1,20,20,300\n", header=TRACE_HEADER + ",beam_width")
    refused(capsys, ["run", "replay.yaml", "--set", "workload.n=1", "--out", "out", "--jobs", jobs],
            "has 300 beams, more than vLLM ever batches (256 sequences)", "max_num_seqs")


@pytest.mark.parametrize("argv, words", [
    (["trace", "sample", "--rate", "1", "--max-seq-len", "-5", "--out", "t.csv"],
     "--max-seq-len: must be an integer >= 3, got -5"),
    (["trace", "sample", "--rate", "1", "--out", "folder"], "--out: 'folder' is a folder"),
    (["trace", "sample", "--rate", "nan", "--out", "t.csv"], "--rate: must be a positive number, got nan"),
    (["trace", "sample", "--rate", "1e9", "--out", "t.csv"], "--rate: 1e+09 req/s for 3600 s"),
    (["trace", "sample", "--rate", "1", "--cv", "2", "--out", "t.csv"], "--cv: applies only to gamma arrivals"),
    (["trace", "sample", "--rate", "1", "--prefix-tokens", "2045", "--out", "t.csv"], "--prefix-tokens: a prefix"),
    (["trace", "build", "sharegpt", "--json", "missing.json", "--out", "t.csv"],
     "--json: 'missing.json': file not found"),
    (["trace", "build", "sharegpt", "--json", "folder", "--out", "t.csv"], "--json: 'folder' is a folder"),
    (["trace", "stats", "folder"], "folder: 'folder' is a folder"),
    (["trace", "stats", "sharegpt", "--max-seq-len", "0"], "--max-seq-len: must be a positive integer, got 0"),
    (["calibrate", "import", "folder", "--model", "opt-13b", "--out", "p.yaml"], "'folder' is a folder"),
    (["calibrate", "show", "folder"], "'folder' is a folder"),
    (["calibrate", "fit", "folder", "--out", "p.yaml"], "'folder' is a folder"),
    (["calibrate", "fit", "/dev/null", "--out", "p.yaml"], "'/dev/null' is not a regular file"),
])
def test_command_arguments_are_checked_at_the_door(here, capsys, argv, words):
    refused(capsys, argv, words)
    assert not Path("t.csv").exists() and not Path("p.yaml").exists()


@pytest.mark.parametrize("jobs", JOBS)
def test_reproduce_refuses_a_file_as_its_output_folder(here, capsys, jobs):
    Path("out.txt").write_text("mine")
    refused(capsys, ["reproduce", "fig2", "--quick", "--out", "out.txt", "--jobs", jobs],
            "--out: 'out.txt' is a file; give the folder")
    assert Path("out.txt").read_text() == "mine"


def test_a_folder_given_as_a_trace_is_a_folder_not_missing(here, capsys):
    refused(capsys, ["run", "replay.yaml", "--set", "workload.trace=folder", "--out", "out"],
            "workload.trace: 'folder' is a folder")


@pytest.mark.parametrize("jobs", JOBS)
def test_orca_says_its_reservations_are_max_length_and_suggests_fewer_beams(here, capsys, jobs):
    assert main(["run", "tiny.yaml", "--set", "systems=[orca-max]", "--set", "workload.dataset=alpaca-standin",
                 "--set", "workload.beam_width=8", "--out", "out", "--jobs", jobs, "--iterations", "none"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert "each sequence reserving 2048 tokens (up to max_seq_len)" in err and "smaller beam_width" in err, err


def test_a_newer_profile_is_not_told_to_refit_over_itself(here, capsys):
    newer = f"servesim-profile/{int(FORMAT.rsplit('/', 1)[1]) + 1}"
    data = yaml.safe_load(_profile_text())
    Path("p.yaml").write_text(yaml.safe_dump({**data, "format": newer}))
    err = refused(capsys, ["calibrate", "show", "p.yaml"], f"'{newer}' was written by a newer servesim",
                  "upgrade servesim")
    assert "re-fit" not in err


def _profile_text() -> str:
    profile().save("base.yaml")
    load_profile("base.yaml")  # a valid one, changed only in its format
    return Path("base.yaml").read_text()


def test_trace_errors_read_as_every_command_does(here, capsys):
    from servesim.cli import main as trace_main  # python -m sim.workload.cli hands over to the front door too

    assert trace_main(["trace", "stats", "missing.csv"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("servesim: error: missing.csv: ") and err.count("\n") == 1, err


# --- signals --------------------------------------------------------------------------------------
# a pool's workers stopped by Ctrl-C stay in the default tier in tests/sim/experiment/test_reruns.py
@pytest.mark.parametrize("jobs", ["1", pytest.param("2", marks=pytest.mark.slow)])
def test_sigterm_prints_the_line_sigint_does_and_exits_as_it_does(tmp_path, jobs):
    """`kill PID` (SIGTERM, to the command alone) ends it as Ctrl-C does: one line, status 130, and no
    worker left behind; it used to exit 143 with nothing on stderr."""
    from tests.helpers.processes import all_exit, children, reap

    config = tmp_path / "long.yaml"
    config.write_text(textwrap.dedent(TINY).replace("duration_s: 20", "duration_s: 1500")
                      .replace("rates: [1]", "rates: [1, 2, 3, 4]"))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-m", "servesim", "run", str(config), "--out", str(tmp_path / "out"),
                             "--jobs", jobs, "--iterations", "none"], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    workers: list[int] = []
    try:
        for line in proc.stdout:
            if "normalized latency" in line:  # a run is done, others pending: seconds of work left
                break
        workers = children(proc.pid)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
        assert (proc.returncode, err) == (130, "servesim: interrupted\n")
        assert all_exit(workers, within_s=15.0), "workers outlived their parent"
    finally:
        reap(proc, workers)


def test_sigterm_handler_is_restored_after_main(here, capsys):
    before = signal.getsignal(signal.SIGTERM)
    main(["run", "tiny.yaml", "--ylim", "nan"])
    assert signal.getsignal(signal.SIGTERM) is before

