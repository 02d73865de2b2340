"""The figures show every system that ran: a system past its knee at every rate still has its points on the axes."""
from __future__ import annotations

import math

import pytest

pytest.importorskip("matplotlib")

from sim.experiment import plots  # noqa: E402


def summary() -> list[dict]:
    rows = []
    for system, latencies in (("FasterTransformer", [0.7, 3.0, 9.0]), ("vLLM", [0.03, 0.05, 0.3])):
        for rate, value in zip([0.5, 1.0, 2.0], latencies):
            rows.append({"system": system, "rate": rate, "normalized_latency": value, "saturated": value > 0.5,
                         "ttft_p90_s": value * 10, "tpot_p90_s": value / 2})
    return rows


@pytest.fixture
def drawn(monkeypatch):
    axes = []

    def keep(fig, ax, path, title=""):
        axes.append(ax)
        return path
    monkeypatch.setattr(plots, "save_figure", keep)
    return axes


def test_points_above_the_axis_are_drawn_on_its_edge_and_the_knee_line_is_there(drawn, tmp_path):
    plots.normalized_latency_plot(summary(), tmp_path / "n.png", ylim=1.0)
    ax = drawn[0]
    by_label = {line.get_label(): line for line in ax.lines}
    ft = by_label["FasterTransformer"]
    assert list(ft.get_ydata()) == [0.7, 1.0, 1.0]  # clipped to the axis, not drawn off it
    off = [line for line in ax.lines if line.get_label() == "_off axis" and line.get_color() == ft.get_color()]
    assert len(off) == 1 and list(off[0].get_xdata()) == [1.0, 2.0]
    assert any(list(line.get_ydata()) == [0.5, 0.5] for line in ax.lines)  # the 0.5 s/token line
    assert "above the axis" in ax.get_ylabel()


def test_ttft_and_tpot_are_drawn_beside_it(drawn, tmp_path):
    paths = plots.latency_plots(summary(), tmp_path)
    assert [p.name for p in paths] == ["ttft.png", "tpot.png"]
    assert [ax.get_yscale() for ax in drawn] == ["log", "log"]
    assert {line.get_label() for line in drawn[0].lines} >= {"FasterTransformer", "vLLM"}


def test_a_system_below_the_axis_has_no_arrows(drawn, tmp_path):
    plots.normalized_latency_plot(summary(), tmp_path / "n.png", ylim=1.0)
    vllm_color = {line.get_label(): line for line in drawn[0].lines}["vLLM"].get_color()
    assert not [line for line in drawn[0].lines if line.get_label() == "_off axis" and line.get_color() == vllm_color]


def test_seeds_are_averaged_where_measured_and_a_rate_saturates_if_any_seed_did():
    rows = [{"system": "B", "rate": 2.0, "m": 4.0, "saturated": False},
            {"system": "A", "rate": 1.0, "m": math.nan, "saturated": False},
            {"system": "B", "rate": 1.0, "m": 1.0, "saturated": False},
            {"system": "B", "rate": 2.0, "m": 6.0, "saturated": True},
            {"system": "A", "rate": 1.0, "m": math.nan, "saturated": False}]
    means = plots.seed_means(rows, "m")
    assert list(means) == ["B", "A"]  # the order the systems first appear in
    assert means["B"] == [(1.0, 1.0, False), (2.0, 5.0, True)]  # by rate
    assert len(means["A"]) == 1 and math.isnan(means["A"][0][1])  # no seed measured it


@pytest.mark.parametrize("top", [1000.0, 0.04])
def test_log_axes_are_labelled_in_plain_numbers_between_decades_where_they_span_few(drawn, tmp_path, top):
    plots.ttft_plot([{"system": "vLLM", "rate": 1.0, "ttft_p90_s": 0.015, "saturated": False},
                     {"system": "vLLM", "rate": 2.0, "ttft_p90_s": top, "saturated": False}], tmp_path / "t.png")
    ax = drawn[0]
    ax.figure.canvas.draw()
    major = [label.get_text() for label in ax.yaxis.get_majorticklabels() if label.get_text()]
    minor = [label.get_text() for label in ax.yaxis.get_minorticklabels() if label.get_text()]
    assert "0.01" in major and "$" not in "".join(major + minor)
    if top > 1:  # five decades: the decades alone
        assert "1000" in major and minor == []
    else:  # under one: some ticks between them too, as matplotlib picks them
        assert "0.02" in minor and all(0.01 < float(label) < 0.1 for label in minor)


def test_the_kv_bars_stack_each_systems_shares_at_the_rate_asked(monkeypatch, tmp_path):
    figures = []
    monkeypatch.setattr(plots, "write_png", lambda fig, path: figures.append(fig) or path)
    parts = [part for part, _ in plots.KV_PARTS]
    runs = (("vLLM", 1.0, (0.9, 0, 0, 0, 0.1)), ("vLLM", 2.0, (0.5, 0, 0.1, 0, 0.4)),
            ("vLLM", 2.0, (0.7, 0, 0.1, 0, 0.2)), ("Orca", 2.0, (0.2, 0.4, 0.1, 0.1, 0.2)))
    rows = [{"system": system, "rate": rate, **dict(zip(parts, shares))} for system, rate, shares in runs]
    plots.kv_usage_plot(rows, tmp_path / "kv.png", rate=2.0)
    ax = figures[0].axes[0]
    bars = [(patch.get_x(), patch.get_width()) for patch in ax.patches]  # part by part, system by system
    assert [label.get_text() for label in ax.get_yticklabels()] == ["vLLM", "Orca"]
    assert bars[:2] == [(0.0, pytest.approx(60.0)), (0.0, pytest.approx(20.0))]  # token states: seeds averaged
    assert bars[-2][0] + bars[-2][1] == pytest.approx(100.0) and bars[-1][0] + bars[-1][1] == pytest.approx(100.0)
