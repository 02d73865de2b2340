"""`servesim reproduce` end to end, on traces cut far below --quick so the whole pipeline runs in seconds."""
import re

import pandas as pd
import pytest

from servesim.cli import main
from sim.reproduce import scale
from sim.reproduce.claims import CLAIMS
from sim.reproduce.figures import FIG12, FIG13, FIG14, FIG15, FIG18, FIGURES, Source
from sim.reproduce.runner import footer, reproduce
from sim.reproduce.scale import PAPER, PREDICTED, QUICK, Scale

TINY = Scale("test", "test: 20-s traces, the lowest rate of each curve", duration_s=20, warmup_s=5, max_rates=1,
             max_extra_probes=0)  # the crossing search has tests of its own (test_reproduce_crossing.py)


# every figure reproduced takes a minute, so each test that reads it is in the slow tier; the default tier reproduces
# one figure (test_quick_on_the_command_line, and tests/test_api.py)
@pytest.fixture(scope="module")
def reproduced(tmp_path_factory):
    out = tmp_path_factory.mktemp("reproduce")
    lines = []
    table = reproduce(["all"], out, TINY, jobs=1, progress=lines.append)
    return out, table, lines


def expected_files(name):
    files = {"summary.csv", "plotted.csv", f"{name}.png", f"{name}.svg"}
    if any(panel.kind == "latency" for panel in FIGURES[name].panels):
        files.add("sustainable_rates.csv")
    return files


@pytest.mark.slow
@pytest.mark.parametrize("name", list(FIGURES))
def test_each_figure_writes_every_file(reproduced, name):
    out, _, _ = reproduced
    assert {p.name for p in (out / name).iterdir()} == expected_files(name)
    summary = pd.read_csv(out / name / "summary.csv", keep_default_na=False)
    assert set(summary["panel"].astype(str)) == {p.id for p in FIGURES[name].panels}
    predicted = {p.id for p in FIGURES[name].panels if p.cost_model_of}
    for frame in (summary, pd.read_csv(out / name / "plotted.csv", keep_default_na=False)):
        # a cut run says so in every CSV; a cost model's prediction, which no cut changes, says that
        expected = frame["panel"].astype(str).map(lambda panel: PREDICTED if panel in predicted else TINY.description)
        assert (frame["scale"] == expected).all()
    assert (out / name / f"{name}.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.slow
def test_figures_of_the_new_kinds_plot_their_numbers(reproduced):
    out, _, _ = reproduced
    saving = pd.read_csv(out / "fig15" / "plotted.csv")
    assert sorted(zip(saving["panel"], saving["series"], saving["sequences"])) == sorted(
        (panel, series, width) for panel in "ab" for series in ("Alpaca", "ShareGPT") for width in (2, 4, 6))
    assert ((saving["memory_saving_pct"] > 0) & (saving["memory_saving_pct"] < 100)).all()
    plotted = pd.read_csv(out / "fig19" / "plotted.csv")
    curve = plotted[plotted["panel"] == "a"]
    assert list(curve["block_size"]) == [1, 2, 4, 8, 16, 32, 64, 128, 256]
    assert curve["recompute_ms"].nunique() == 1 and curve["swap_in_out_ms"].is_monotonic_decreasing
    kernel = pd.read_csv(out / "fig18" / "plotted.csv")
    assert len(kernel[kernel["panel"] == "a"]) == 6  # batch 8 and 32 x context 64, 128, 256


@pytest.mark.slow
def test_a_figure_says_what_it_is_not(reproduced):
    out, _, _ = reproduced
    lines = footer(FIGURES["fig14"], pd.read_csv(out / "fig14" / "summary.csv"), TINY)
    assert lines[0] == TINY.description
    assert any(line.startswith("Workload: alpaca-standin (parametric stand-in") for line in lines)
    assert sum("beam search, width" in line for line in lines) == 3  # one line per workload, whatever its rate
    assert not any("arrivals at" in line for line in lines)
    paper_length = footer(FIGURES["fig19"], pd.read_csv(out / "fig19" / "summary.csv"), PAPER)
    assert paper_length[0].startswith("Workload: sharegpt")
    assert paper_length[-1].startswith("(a) not simulated: the prediction of fig19b_recompute_vs_swap.yaml's "
                                       "cost model, roofline(a100-40gb")


@pytest.mark.slow
def test_the_table_has_a_row_for_every_claim_each_with_a_value_or_a_reason(reproduced):
    out, table, _ = reproduced
    written = pd.read_csv(out / "paper_vs_sim.csv", keep_default_na=False)
    assert list(written["claim"]) == [claim.id for claim in CLAIMS]
    for _, row in written.iterrows():
        assert row["lands"] in ("yes", "no", "n/a")
    assert (written["simulated"] != "").all()  # every figure ran, so every claim has its value
    md = (out / "paper_vs_sim.md").read_text()
    assert md.count("\n| fig") == len(CLAIMS) and TINY.description in md


@pytest.mark.slow
def test_progress_has_one_line_per_run_with_the_time_left(reproduced):
    _, _, lines = reproduced
    counts = [re.match(r"\s+\[(\d+)/(\d+), \S+ left\] ", line) for line in lines if "left]" in line]
    assert all(counts) and [int(c.group(1)) for c in counts] == list(range(1, len(counts) + 1))
    # the total counts every run of every figure until a sweep finds some already done (Fig. 13 reads
    # Fig. 12's runs): by the last run it is exact
    assert int(counts[-1].group(2)) == len(counts)


@pytest.mark.slow
def test_every_figures_runs_go_through_one_pool_costliest_first(reproduced):
    _, _, lines = reproduced
    assert sum("costliest first" in line for line in lines) == 1  # one pool for every config's runs
    runs = [re.search(r"\]\s+(\S+): .* rate (\S+) +seed", line) for line in lines if "left]" in line]
    assert all(runs) and len({run.group(1) for run in runs}) > 1  # each line names its config
    # in one process the runs finish in the order they start: by cost, which falls as the rate does within a
    # config and workload
    seen: dict[str, float] = {}
    for run in runs:
        config, rate = run.group(1), float(run.group(2))
        assert rate <= seen.get(config, rate), f"{config} ran rate {rate} after a lower one"
        seen[config] = rate


@pytest.mark.slow
def test_a_second_call_simulates_nothing_and_writes_the_same_bytes(reproduced):
    out, _, _ = reproduced
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file() and "sweeps" not in p.parts}
    lines = []
    reproduce(["all"], out, TINY, jobs=1, progress=lines.append)
    assert not [line for line in lines if "left]" in line]
    assert sum("resuming" in line for line in lines) == 1  # every run of every figure found done
    after = {p: p.read_bytes() for p in before}
    assert [p.name for p in before if before[p] != after[p]] == []


def test_an_unknown_figure_is_a_one_line_error(capsys, tmp_path):
    assert main(["reproduce", "fig99", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err
    assert "fig99: unknown figure; valid: fig2, fig12, fig13, fig14, fig15, fig16, fig17, fig18, fig19, all" in err
    assert not any(tmp_path.iterdir())


def test_quick_on_the_command_line(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(scale, "QUICK", TINY)  # --quick's wiring, at the test's length
    assert main(["reproduce", "fig19", "--quick", "--jobs", "1", "--out", str(tmp_path)]) == 0
    assert {p.name for p in (tmp_path / "fig19").iterdir()} == expected_files("fig19")
    assert (tmp_path / "sweeps" / "test" / "fig19b_recompute_vs_swap" / "runs").is_dir()
    assert "claims:" in capsys.readouterr().out


def test_quick_cuts_traces_and_rates_and_the_paper_scale_nothing():
    raw = {"workload": {"duration_s": 3600}, "rates": [1, 2, 3, 4, 5, 6, 7, 8, 9]}
    assert QUICK.overrides(raw, thin=True) == ["workload.duration_s=300", "rates=[1, 4, 6, 9]"]
    assert QUICK.overrides(raw, thin=False) == ["workload.duration_s=300"]
    assert QUICK.overrides({"workload": {"duration_s": 200}, "rates": [1]}, thin=True) == []
    assert PAPER.overrides(raw, thin=True) == [] and PAPER.is_paper and not QUICK.is_paper


def test_sweeps_that_differ_only_in_rates_or_systems_share_their_runs():
    fig12a, fig13a = FIG12.panels[0].sources[0], FIG13.panels[0].sources[0]
    assert fig12a.runs_dir == fig13a.runs_dir == "fig12a_sharegpt_opt13b"
    sharegpt, alpaca = FIG18.panels[1].sources
    assert sharegpt.runs_dir != alpaca.runs_dir
    # Fig. 15's Alpaca bars read Fig. 14's runs (vLLM's); its ShareGPT ones run apart
    fig14a, (fig15_alpaca, fig15_sharegpt) = FIG14.panels[0].sources[0], FIG15.panels[0].sources[:2]
    assert fig14a.runs_dir == fig15_alpaca.runs_dir != fig15_sharegpt.runs_dir
    assert Source("x.yaml", ("workload.n=2", "rates=[1]")).runs_dir == "x-workload.n-2"
