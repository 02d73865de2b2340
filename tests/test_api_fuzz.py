"""The Python API's arguments at random: every value either works or raises a one-line SpecError naming a
bad argument (or the config file a bad value is in), never a bare TypeError, ValueError or numpy's message,
and nothing is written when it raises.

Each argument draws from values a hostile user would pass, each tagged with what its error must start
with (None: the value is good). Bounded for CI: derandomized, a few dozen examples each, and each
function's work replaced by a sentinel once its arguments pass the door, so no example simulates.
"""
from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import servesim
from engine.errors import SpecError
from tests.helpers.doors import Reached, write_api_folder
from tests.helpers.doors import reached as _reached

FUZZ = settings(deadline=None, derandomize=True, database=None, max_examples=50,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
LOADED = "<the tiny experiment, loaded>"  # drawn as a name: hypothesis shows it in a failing example


def tagged(*pairs) -> st.SearchStrategy:
    """(value, the prefix its error starts with, or None for a good value), good values drawn most."""
    good = [pair for pair in pairs if pair[1] is None]
    return st.sampled_from(good * 3 + list(pairs))


CONFIGS = tagged(("tiny.yaml", None), (Path("tiny.yaml"), None), (LOADED, None), (5, "config"), (None, "config"),
                 (b"tiny.yaml", "config"), ("tiny\0.yaml", "config"), ("missing.yaml", "missing.yaml"),
                 ("folder", "folder"), ("x" * 300, "config"))
OVERRIDES = tagged(((), None), (None, None), ([], None), ("seeds=[0]", None), (["rates=[2]"], None),
                   (("warmup_s=1",), None), (5, "overrides"), ([5], "overrides"), ({"rates": 2}, "overrides"),
                   ([["rates=[2]"]], "overrides"), (["rates"], "tiny.yaml"), (["rates=[-1]"], "tiny.yaml"),
                   ("rates=nan", "tiny.yaml"))
JOBS = tagged((0, None), (1, None), (2, None), (np.int64(1), None), (-1, "jobs"), ("2", "jobs"), (1.5, "jobs"),
              (True, "jobs"), (None, "jobs"), ([1], "jobs"), (math.nan, "jobs"))
PROGRESS = tagged((print, None), (None, None), (lambda line: None, None), (5, "progress"), ("print", "progress"),
                  (lambda: None, "progress"))


@pytest.fixture
def here(tmp_path, monkeypatch) -> Path:
    import importlib

    monkeypatch.chdir(tmp_path)
    write_api_folder(tmp_path)
    Path("folder").mkdir()
    work = [("sim.experiment.run", "run_one"), ("sim.experiment.sweep", "sweep_rows"),
            ("sim.reproduce.runner", "reproduce"), ("fidelity.validate", "validate")]
    for module, _ in work:  # imported before any is stopped: sweep.py binds run_one as it imports, and would keep
        importlib.import_module(module)  # the stand-in past this test
    for module, name in work:
        monkeypatch.setattr(importlib.import_module(module), name, _reached)
    return tmp_path


def _config(value, loaded):
    return loaded if value == LOADED else value


def _overrides_tag(config, overrides, tag):
    """A loaded experiment takes no overrides: any is the `overrides` argument's error."""
    if config == LOADED and overrides:
        return "overrides"
    return tag


def passes(call, *tags) -> tuple | None:
    """The sentinel's arguments if call() passed the door, as it must when every tag is None; else None,
    after checking the SpecError it raised starts with a bad argument's tag and nothing was written."""
    before = set(os.listdir("."))
    bad = {tag for tag in tags if tag is not None}
    try:
        call()
    except Reached as reached:
        assert not bad, f"passed the door with bad {sorted(bad)}"
        assert set(os.listdir(".")) == before
        event("passed")
        return reached.args
    except SpecError as err:
        text = str(err)
        assert bad and any(text.startswith(f"{tag}:") for tag in bad), f"{sorted(bad)} -> {text}"
        assert "\n" not in text
        assert set(os.listdir(".")) == before, f"wrote {set(os.listdir('.')) - before} before refusing"
        event(f"refused: {text.split(':')[0][:20]}")
        return None
    raise AssertionError("returned without reaching its work")


@FUZZ
@given(config=CONFIGS, overrides=OVERRIDES)
def test_load_experiment_loads_or_refuses_naming_the_argument(here, config, overrides):
    (path, path_tag), (extra, extra_tag) = config, overrides
    if path == LOADED:
        path, path_tag = servesim.load_experiment("tiny.yaml"), "path"  # already loaded: not a path
    path_tag = "path" if path_tag == "config" else path_tag
    bad = {t for t in (path_tag, extra_tag) if t}
    try:
        exp = servesim.load_experiment(path, extra)
    except SpecError as err:
        assert bad and any(str(err).startswith(f"{tag}:") for tag in bad), f"{sorted(bad)} -> {err}"
        assert "\n" not in str(err) and len(str(err)) < 400
        return
    assert not bad and exp.rates == (2.0,) and exp.seeds == (0,)


@FUZZ
@given(config=CONFIGS, overrides=OVERRIDES, jobs=JOBS, progress=PROGRESS,
       iterations=tagged(("none", None), ("csv", None), ("parquet", None), ("xml", "iterations"),
                         ("CSV", "iterations"), (None, "iterations"), (["csv"], "iterations"), (5, "iterations")),
       out_dir=tagged(("out", None), (Path("out"), None), (None, None), ("", None), ("deep/er/out", None),
                      (5, "out_dir"), (b"out", "out_dir"), ("out\0", "out_dir"), ("file.txt", "out_dir"),
                      ("file.txt/out", "out_dir"), ("x" * 300, "out_dir")))
def test_run_arguments_work_or_are_refused_before_anything_is_written(here, config, overrides, jobs, progress,
                                                                     iterations, out_dir):
    loaded = servesim.load_experiment("tiny.yaml")
    extra_tag = _overrides_tag(config[0], overrides[0], overrides[1])
    reached = passes(lambda: servesim.run(_config(config[0], loaded), out_dir[0], overrides=overrides[0],
                                          jobs=jobs[0], iterations=iterations[0], progress=progress[0]),
                     config[1], extra_tag, jobs[1], iterations[1], progress[1], out_dir[1])
    if reached:
        (exp, folder, executor), kwargs = reached
        assert folder == (Path("results") / "tiny" if out_dir[0] in (None, "") else Path(out_dir[0]))
        assert 1 <= executor.jobs <= 2 and kwargs["iterations"] == iterations[0]


@FUZZ
@given(config=CONFIGS, overrides=OVERRIDES,
       system=tagged((None, None), ("vLLM", None), ("vllm", None), ("orca-oracle", None), ("Orca (Oracle)", None),
                     ("x", "system"), ("VLLM", "system"), ("", "system"), (5, "system"), (["vLLM"], "system")),
       rate=tagged((None, None), (2, None), (2.0, None), (np.float64(2), None), (3, "rate"), (-1, "rate"),
                   ("2", "rate"), (True, "rate"), (math.nan, "rate"), (math.inf, "rate"), ([2], "rate")),
       seed=tagged((None, None), (0, None), (np.int64(0), None), (-1, "seed"), (0.5, "seed"), ("0", "seed"),
                   (True, "seed"), (7, "seed"), (2**70, "seed")))
def test_simulate_arguments_pick_the_run_or_are_refused(here, config, overrides, system, rate, seed):
    loaded = servesim.load_experiment("tiny.yaml")
    extra_tag = _overrides_tag(config[0], overrides[0], overrides[1])
    reached = passes(lambda: servesim.simulate(_config(config[0], loaded), system=system[0], rate=rate[0],
                                               seed=seed[0], overrides=overrides[0]),
                     config[1], extra_tag, system[1], rate[1], seed[1])
    if reached:
        (_, chosen, chosen_rate, chosen_seed), _ = reached
        assert chosen.name == {"vllm": "vLLM", "orca-oracle": "Orca (Oracle)", None: "vLLM"}.get(system[0], system[0])
        assert (chosen_rate, chosen_seed) == (2.0, 0)


@FUZZ
@given(figures=tagged((("all",), None), ("fig12", None), (["fig19"], None), (("fig2", "fig12"), None), ([], None),
                      (None, None), ("figX", "figures"), (["fig12", 5], "figures"), (12, "figures"),
                      (["all", "fig99"], "figures"), ([["fig12"]], "figures"), ("", "figures")),
       out_dir=tagged(("rep", None), (Path("rep"), None), ("deep/rep", None), (None, "out_dir"), (5, "out_dir"),
                      ("file.txt", "out_dir"), ("file.txt/rep", "out_dir"), ("rep\0", "out_dir")),
       quick=tagged((True, None), (False, None), ("yes", "quick"), (1, "quick"), (0, "quick"), (None, "quick")),
       jobs=JOBS, progress=PROGRESS)
def test_reproduce_arguments_work_or_are_refused_before_anything_loads(here, figures, out_dir, quick, jobs, progress):
    reached = passes(lambda: servesim.reproduce(figures[0], out_dir[0], quick=quick[0], jobs=jobs[0],
                                                progress=progress[0]),
                     figures[1], out_dir[1], quick[1], jobs[1], progress[1])
    if reached:
        (names, folder, scale), kwargs = reached
        assert folder == Path(out_dir[0]) and kwargs["jobs"] >= 1
        assert scale.name == ("quick" if quick[0] else "paper")


@settings(FUZZ, max_examples=30)
@given(config=tagged(("val/tiny.yaml", None), (5, "config"), (None, "config"), ("missing.yaml", "missing.yaml"),
                     ("tiny.yaml", "tiny.yaml")),
       out_dir=tagged((None, None), ("vout", None), ("", None), (5, "out_dir"), (b"vout", "out_dir")),
       overrides=tagged(((), None), (None, None), ("validation.repeats=1", None), (5, "overrides"),
                        ([5], "overrides"), (["validation.repeats=0"], "val/tiny.yaml")),
       exact=tagged((True, None), (False, None), ("yes", "exact"), (0, "exact")),
       log=tagged((print, None), (None, None), (5, "log")))
def test_validate_arguments_work_or_are_refused_before_anything_is_written(here, config, out_dir, overrides, exact,
                                                                          log):
    pytest.importorskip("torch")
    from tests.helpers.validate_tiny import write_tiny_validation

    if not Path("val").exists():
        Path("val").mkdir()
        write_tiny_validation(Path("val"))
    reached = passes(lambda: servesim.validate(config[0], out_dir[0], overrides=overrides[0], exact=exact[0],
                                               log=log[0]),
                     config[1], out_dir[1], overrides[1], exact[1], log[1])
    if reached:
        (cfg, folder), kwargs = reached
        assert folder == (Path("results/validation/tiny") if out_dir[0] in (None, "") else Path(out_dir[0]))
        assert kwargs["exact_only"] is exact[0]
