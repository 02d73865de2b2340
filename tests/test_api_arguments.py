"""The Python API's own door: each function refuses a bad argument as its command refuses a bad option, with
a SpecError naming the argument, before anything is written; what a user would write (a system's config
key, a lone override string, progress=None) works.

The commands' work is replaced by a sentinel where only the door is under test, so no case simulates for
long; the one real run is a few seconds of trace.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import servesim
from engine.errors import SpecError
from servesim.cli import main
from tests.helpers.doors import Reached, write_api_folder
from tests.helpers.doors import reached as _reached


@pytest.fixture
def here(tmp_path, monkeypatch) -> Path:
    monkeypatch.chdir(tmp_path)
    write_api_folder(tmp_path)
    return tmp_path


def _work_stopped(monkeypatch, module: str, name: str) -> None:
    import importlib

    for other, _ in WORK:  # imported first: sweep.py binds run_one as it imports, and would keep the sentinel
        importlib.import_module(other)
    monkeypatch.setattr(importlib.import_module(module), name, _reached)


@pytest.fixture
def no_work(monkeypatch) -> None:
    """Every function's work stopped where it would start: an argument the door let through fails the
    test at once (a Reached), not after minutes of simulation."""
    for module, name in WORK:
        _work_stopped(monkeypatch, module, name)


WORK = [("sim.experiment.run", "run_one"), ("sim.experiment.sweep", "sweep"), ("sim.experiment.sweep", "sweep_rows"),
        ("sim.reproduce.runner", "reproduce"), ("fidelity.validate", "validate")]


def _reached_with(call) -> tuple:
    with pytest.raises(Reached) as stopped:
        call()
    return stopped.value.args


def refused(call, *words: str) -> str:
    """call() raises a SpecError naming what was wrong, and leaves no ./out, ./rep or ./results."""
    with pytest.raises(SpecError) as err:
        call()
    for text in words:
        assert text in str(err.value), str(err.value)
    assert not any(Path(name).exists() for name in ("out", "rep", "results")), str(err.value)
    return str(err.value)


# --- simulate ----------------------------------------------------------------------------------------------
def test_simulate_takes_a_systems_config_key_as_well_as_its_display_name(here):
    one = servesim.simulate("tiny.yaml", system="vllm")
    assert one.summary["system"] == "vLLM" and one.summary["num_requests"] > 0
    err = refused(lambda: servesim.simulate("tiny.yaml", system="vlm"), "system: 'vlm' is not a system")
    assert "'vLLM' (key 'vllm')" in err and "'Orca (Oracle)' (key 'orca-oracle')" in err


def test_simulate_finds_a_key_under_preset_and_in_a_loaded_experiment(here, monkeypatch):
    _work_stopped(monkeypatch, "sim.experiment.run", "run_one")
    overrides = ["systems=[{preset: orca-max, name: Orca big}, vllm]"]
    (exp, system, _, _), _ = _reached_with(lambda: servesim.simulate("tiny.yaml", system="orca-max",
                                                                      overrides=overrides))
    assert system.name == "Orca big"
    # numpy's numbers pass the checks as Python's do: a notebook's rates and seeds come from arrays
    (_, system, rate, seed), _ = _reached_with(lambda: servesim.simulate(exp, system="vllm", rate=np.float64(2),
                                                                          seed=np.int64(0)))
    assert system.name == "vLLM" and (rate, seed) == (2.0, 0) and type(seed) is int


def test_a_key_two_systems_share_asks_for_the_display_name(here, no_work):
    refused(lambda: servesim.simulate("tiny.yaml", system="vllm",
                                      overrides=["systems=[vllm, {preset: vllm, name: vLLM 2}]"]),
            "system: 'vllm' is the key of several systems ('vLLM', 'vLLM 2')")


@pytest.mark.parametrize("seed, words", [(-1, "seed: must be a non-negative integer, got -1"),
                                         (0.5, "seed: must be a non-negative integer, got 0.5"),
                                         ("0", "seed: must be a non-negative integer, got '0'"),
                                         (7, "seed: 7 is not one of the experiment's seeds [0]")])
def test_a_bad_seed_is_refused_naming_seed(here, no_work, seed, words):
    refused(lambda: servesim.simulate("tiny.yaml", seed=seed), words)


@pytest.mark.parametrize("rate, words", [(3, "rate: 3 is not one of the experiment's rates [2.0]"),
                                         ("2", "rate: must be a positive number or inf (every request at 0 s), "
                                               "got '2'"),
                                         (True, "rate: must be a positive number or inf (every request at 0 s), got "
                                                "True"),
                                         (float("nan"), "rate: must be a positive number or inf (every request at "
                                                        "0 s), got nan"),
                                         (float("inf"), "rate: inf is not one of the experiment's rates [2.0]")])
def test_a_rate_not_the_experiments_is_refused_naming_rate(here, no_work, rate, words):
    refused(lambda: servesim.simulate("tiny.yaml", rate=rate), words)


@pytest.mark.parametrize("concurrency, words", [
    (4, "concurrency: 4 is not one of the experiment's concurrencies [None]; give one of them, or add it to the "
        "config (overrides=['concurrencies=[4]'])"),
    (0, "concurrency: must be a positive integer, got 0"), (2.5, "concurrency: must be a positive integer, got 2.5")])
def test_a_concurrency_not_the_experiments_is_refused_naming_concurrency(here, no_work, concurrency, words):
    refused(lambda: servesim.simulate("tiny.yaml", concurrency=concurrency), words)


@pytest.mark.parametrize("config", [5, None, b"tiny.yaml", "tiny\0.yaml", "x" * 300])
def test_a_config_that_is_no_path_is_refused_naming_config(here, no_work, config):
    refused(lambda: servesim.simulate(config), "config: ")


def test_a_loaded_experiment_takes_no_overrides_in_any_function(here, no_work):
    exp = servesim.load_experiment("tiny.yaml")
    for call in (lambda: servesim.simulate(exp, overrides=["rates=[1]"]),
                 lambda: servesim.run(exp, "out", overrides="rates=[1]")):
        refused(call, "overrides: apply to a config file")


# --- load_experiment ------------------------------------------------------------------------------------
def test_a_lone_override_string_is_one_override_and_none_is_none(here):
    assert servesim.load_experiment("tiny.yaml", "rates=[3]").rates == (3.0,)
    assert servesim.load_experiment("tiny.yaml", None).rates == (2.0,)


@pytest.mark.parametrize("path, overrides, words", [
    (None, (), "path: must be an experiment config's path (a str or a Path), got None"),
    (5, (), "path: must be an experiment config's path"),
    ("tiny.yaml", 5, "overrides: must be a list of strings"),
    ("tiny.yaml", ["rates=[2]", 5], "overrides: [1]: must be a string"),
    ("tiny.yaml", [["rates=[2]"]], "overrides: [0]: must be a string")])
def test_load_experiment_refuses_what_is_no_path_or_no_overrides(here, path, overrides, words):
    refused(lambda: servesim.load_experiment(path, overrides), words)


def test_load_experiment_refuses_a_loaded_experiment_in_a_few_words(here):
    err = refused(lambda: servesim.load_experiment(servesim.load_experiment("tiny.yaml")), "path: ")
    assert len(err) < 200, err


# --- run ----------------------------------------------------------------------------------------------------
def test_progress_none_runs_quietly(here, capsys):
    summary = servesim.run("tiny.yaml", "out", iterations="none", progress=None, overrides=["systems=[vllm]"])
    assert list(summary["system"]) == ["vLLM"] and capsys.readouterr().out == ""


@pytest.mark.parametrize("keywords, words", [
    ({"progress": 5}, "progress: must be a function"),
    ({"progress": lambda: None}, "progress: must take one argument, the line"),
    ({"jobs": -1}, "jobs: -1: must be at least 1, or 0 for one per core"),
    ({"jobs": "2"}, "jobs: must be a non-negative integer, got '2'"),
    ({"jobs": 1.5}, "jobs: must be a non-negative integer"),
    ({"jobs": True}, "jobs: must be a non-negative integer"),
    ({"iterations": "xml"}, "iterations: xml: unknown format"),
    ({"iterations": ["csv"]}, "iterations: ['csv']: unknown format"),
    ({"iterations": None}, "iterations: None: unknown format")])
def test_run_refuses_a_bad_argument_before_making_its_folder(here, no_work, keywords, words):
    refused(lambda: servesim.run("tiny.yaml", "out", **keywords), words)


@pytest.mark.parametrize("out_dir, words", [(5, "out_dir: must be a folder's path"),
                                            (b"out", "out_dir: must be a folder's path"),
                                            ("file.txt", "out_dir: file.txt is a file, not a folder"),
                                            ("file.txt/out", "out_dir: file.txt is a file, not a folder"),
                                            ("out\0", "out_dir: 'out\\x00' holds a NUL character")])
def test_run_refuses_an_out_dir_that_is_no_folder(here, no_work, out_dir, words):
    refused(lambda: servesim.run("tiny.yaml", out_dir), words)


def test_run_jobs_zero_is_one_per_core_and_none_is_the_commands_folder(here, monkeypatch):
    _work_stopped(monkeypatch, "sim.experiment.sweep", "sweep_rows")
    (_, out_dir, executor), _ = _reached_with(lambda: servesim.run("tiny.yaml", None, jobs=0))
    assert out_dir == Path("results") / "tiny" and executor.jobs == 2  # one per core, at most one per run
    assert not Path("results").exists()


# --- reproduce ----------------------------------------------------------------------------------------------
def test_reproduce_takes_a_lone_figure_name(here, monkeypatch):
    _work_stopped(monkeypatch, "sim.reproduce.runner", "reproduce")
    (names, out_dir, scale), kwargs = _reached_with(lambda: servesim.reproduce("fig12", "rep", jobs=0))
    assert names == ["fig12"] and out_dir == Path("rep") and scale.name == "paper" and kwargs["jobs"] >= 1


@pytest.mark.parametrize("keywords, words", [
    ({"figures": ["fig99"]}, "figures: fig99: unknown figure; valid: fig2, fig12"),
    ({"figures": ["all", "fig99"]}, "figures: fig99: unknown figure"),
    ({"figures": [12]}, "figures: [0]: must be a string"),
    ({"figures": 12}, "figures: must be a list of strings"),
    ({"quick": "yes"}, "quick: must be True or False, got 'yes'"),
    ({"quick": 1}, "quick: must be True or False, got 1"),
    ({"jobs": "x"}, "jobs: must be a non-negative integer, got 'x'"),
    ({"jobs": -2}, "jobs: -2: must be at least 1"),
    ({"out_dir": None}, "out_dir: must be a folder's path"),
    ({"out_dir": "file.txt"}, "out_dir: 'file.txt' is a file"),
    ({"out_dir": "file.txt/rep"}, "out_dir: file.txt is a file, not a folder"),
    ({"progress": "print"}, "progress: must be a function")])
def test_reproduce_refuses_a_bad_argument_before_anything_loads(here, no_work, keywords, words):
    refused(lambda: servesim.reproduce(**{"figures": ["fig19"], "out_dir": "rep", **keywords}), words)


def test_the_command_refuses_all_with_an_unknown_figure_too(here, no_work, capsys):
    assert main(["reproduce", "all", "fig99", "--out", "rep"]) == 2
    assert "servesim: error: reproduce: fig99: unknown figure" in capsys.readouterr().err
    assert not Path("rep").exists()


# --- validate -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("keywords, words", [
    ({"config": 5}, "config: must be a validation config's path"),
    ({"out_dir": 5}, "out_dir: must be a folder's path"),
    ({"overrides": [1]}, "overrides: [0]: must be a string"),
    ({"exact": "yes"}, "exact: must be True or False, got 'yes'"),
    ({"log": 5}, "log: must be a function")])
def test_validate_refuses_a_bad_argument_before_torch_loads(here, no_work, keywords, words):
    refused(lambda: servesim.validate(**{"config": "tiny.yaml", **keywords}), words)


def test_validate_checks_the_device_as_the_command_does(here, no_work, monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    config = Path(__file__).resolve().parents[1] / "configs/validation/h200-opt-13b.yaml"
    refused(lambda: servesim.validate(config, "out"),
            "h200-opt-13b.yaml: validation.device: cuda, but torch finds no CUDA device on this machine")


def test_validate_refuses_a_file_for_its_folder_before_the_replays(here, no_work, capsys):
    pytest.importorskip("torch")
    from tests.helpers.validate_tiny import write_tiny_validation

    Path("val").mkdir()
    config = write_tiny_validation(Path("val"))
    refused(lambda: servesim.validate(config, "file.txt/out"), "out_dir: file.txt is a file, not a folder")
    assert main(["validate", str(config), "--out", "file.txt"]) == 2
    assert "servesim: error: --out: file.txt is a file, not a folder" in capsys.readouterr().err


# --- capacity and split_capacity ----------------------------------------------------------------------------
@pytest.fixture
def no_search(monkeypatch) -> None:
    """Any probe ends the test: the door must have refused, or passed, before the first."""
    import sim.capacity.plan
    import sim.capacity.split

    monkeypatch.setattr(sim.capacity.plan, "run_jobs", _reached)
    monkeypatch.setattr(sim.capacity.split, "run_jobs", _reached)


@pytest.mark.parametrize("function, keywords, words", [
    ("split_capacity", {"splits": None}, "splits: must be a whole number of replicas from 2 to 16"),
    ("split_capacity", {"splits": "3"}, "splits: must be a whole number of replicas from 2 to 16"),
    ("split_capacity", {"splits": 2, "jobs": -1}, "jobs: -1: must be at least 1, or 0 for one per core"),
    ("split_capacity", {"splits": 2, "progress": 5}, "progress: must be a function"),
    ("capacity", {"jobs": "2"}, "jobs: must be a non-negative integer, got '2'"),
    ("capacity", {"progress": lambda: None}, "progress: must take one argument, the line")])
def test_capacity_refuses_a_bad_argument_in_one_line_before_any_probe(here, no_search, function, keywords, words):
    err = refused(lambda: getattr(servesim, function)("tiny.yaml", "ttft_p90_s=5", **keywords), words)
    assert "\n" not in err


def test_capacity_takes_its_targets_as_a_mapping_too(here, no_search):
    # a Python caller writes {metric: limit}: the same targets as the strings, checked alike
    from sim.capacity.targets import Target, parse_targets

    assert parse_targets({"ttft_p90_s": 1, "tpot_p90_s": 0.05}) == parse_targets("ttft_p90_s=1,tpot_p90_s=0.05") == (
        Target("ttft_p90_s", 1.0), Target("tpot_p90_s", 0.05))
    refused(lambda: servesim.capacity("tiny.yaml", {"ttft_p91_s": 1}), "unknown metric")
    refused(lambda: servesim.capacity("tiny.yaml", {"ttft_p90_s": -1}), "limit must be a positive number")
    refused(lambda: servesim.capacity("tiny.yaml", {}), "give at least one METRIC=LIMIT")
    with pytest.raises(Reached):  # a good mapping gets as far as the first probe
        servesim.capacity("tiny.yaml", {"ttft_p90_s": 5}, progress=None)


def test_capacity_reports_each_probe_and_its_notes_as_the_command_prints_them(here, capsys):
    lines: list[str] = []
    table = servesim.capacity("tiny.yaml", "ttft_p90_s=5", tolerance=0.3, overrides=["systems=[vllm]"], jobs=0,
                              progress=lines.append)
    assert list(table["system"]) == ["vLLM"] and capsys.readouterr().out == ""
    probes = [line for line in lines if " replica(s) at " in line]
    assert probes and all(line.startswith("  vLLM ") for line in probes)
    assert " replica(s) at " not in lines[-1]  # the note on its answer (6-s traces: no rate holds, and it says why)
    assert main(["capacity", "tiny.yaml", "--target", "ttft_p90_s=5", "--tolerance", "0.3", "--set",
                 "systems=[vllm]", "--out", "out", "--jobs", "1"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert [line for line in printed if line in lines] == lines  # the command's lines, in its order


def test_split_capacity_reports_its_header_and_probes(here, capsys):
    lines: list[str] = []
    servesim.split_capacity("tiny.yaml", "ttft_p90_s=5", splits=2, tolerance=0.3, overrides=["systems=[vllm]"],
                            progress=lines.append)
    assert lines[0].startswith("prefill:decode splits of up to 2 replicas") and capsys.readouterr().out == ""
    assert any(line.startswith("  vLLM ") and "1P:1D" in line for line in lines[1:])
