"""The figures show every system that ran: a system past its knee at every rate still has its points on the axes."""
from __future__ import annotations

import pandas as pd
import pytest

pytest.importorskip("matplotlib")

from sim.experiment import plots  # noqa: E402


def summary() -> pd.DataFrame:
    rows = []
    for system, latencies in (("FasterTransformer", [0.7, 3.0, 9.0]), ("vLLM", [0.03, 0.05, 0.3])):
        for rate, value in zip([0.5, 1.0, 2.0], latencies):
            rows.append({"system": system, "rate": rate, "normalized_latency": value, "saturated": value > 0.5,
                         "ttft_p90_s": value * 10, "tpot_p90_s": value / 2})
    return pd.DataFrame(rows)


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
