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


def mixtral_like(saturated_top: float | None = None) -> list[dict]:
    """A run far under the paper's 1 s/token: flat on the paper's axis; optionally a saturated last rate."""
    values = [0.030, 0.033, 0.036, 0.041]
    rows = [{"system": "vLLM", "rate": rate, "normalized_latency": value, "saturated": False}
            for rate, value in zip([2.0, 4.0, 6.0, 8.0], values)]
    if saturated_top is not None:
        rows.append({"system": "vLLM", "rate": 10.0, "normalized_latency": saturated_top, "saturated": True})
    return rows


def legend_texts(ax) -> list[str]:
    return [text.get_text() for text in ax.get_legend().get_texts()]


def test_the_hollow_marker_is_keyed_in_the_legend_only_where_one_is_drawn(drawn, tmp_path):
    plots.normalized_latency_plot(mixtral_like(), tmp_path / "n.png")
    plots.normalized_latency_plot(mixtral_like(saturated_top=0.2), tmp_path / "n.png")
    plots.ttft_plot(summary(), tmp_path / "t.png")
    unsaturated, saturated, log_axes = drawn
    assert plots.SATURATED not in legend_texts(unsaturated)
    assert legend_texts(saturated) == ["vLLM", plots.SATURATED]
    assert plots.SATURATED in legend_texts(log_axes)
    assert "lower bound" in plots.SATURATED and "saturated" in plots.SATURATED
    handle = saturated.get_legend().legend_handles[-1]
    assert handle.get_markerfacecolor() == "white" and handle.get_linestyle() == "None"  # drawn hollow


def test_the_y_axis_fits_the_runs_points_unless_told(drawn, tmp_path):
    plots.normalized_latency_plot(mixtral_like(), tmp_path / "n.png")
    plots.normalized_latency_plot(mixtral_like(saturated_top=0.2), tmp_path / "n.png")
    plots.normalized_latency_plot(summary(), tmp_path / "n.png")
    plots.normalized_latency_plot(mixtral_like(), tmp_path / "n.png", ylim=1.0)
    plots.normalized_latency_plot(mixtral_like(saturated_top=0.06), tmp_path / "n.png")
    fitted, with_saturated, past_the_knee, told, bending = drawn
    assert fitted.get_ylim() == (0.0, 0.05)  # a round number a little above 0.041
    assert with_saturated.get_ylim() == (0.0, 0.05)  # the lower bound at 0.2 is an arrow on the top edge
    assert bending.get_ylim() == (0.0, 0.08)  # one near the curve is drawn where it is (hollow)
    assert not [line for line in bending.lines if line.get_label() == "_off axis"]
    arrows = [line for line in with_saturated.lines if line.get_label() == "_off axis"]
    assert [list(line.get_xydata()[0]) for line in arrows] == [[10.0, 0.05]]
    assert past_the_knee.get_ylim() == (0.0, 1.0)  # a point reaches 0.5 s/token: the paper's axis, the line shown
    assert told.get_ylim() == (0.0, 1.0)
    knee = "0.5: capacity is read here"
    assert knee in legend_texts(past_the_knee) and knee in legend_texts(told)
    assert knee not in legend_texts(fitted)  # off the axis: neither the line nor its name


def test_servesim_run_fits_the_axis_unless_ylim_is_given():
    from servesim.cli import build_parser

    assert build_parser().parse_args(["run", "c.yaml"]).ylim is None
    assert build_parser().parse_args(["run", "c.yaml", "--ylim", "0.2"]).ylim == 0.2


@pytest.mark.parametrize(("value", "top"), [(0.0451, 0.05), (0.55, 0.6), (1.0, 1.0), (0.226, 0.25), (13.0, 15.0),
                                            (0.081, 0.1)])
def test_a_fitted_top_is_a_round_number(value, top):
    assert plots.nice_ceiling(value) == top


def test_reproduce_keeps_the_papers_axes_whatever_the_points():
    """`servesim reproduce` draws the paper's figures on the paper's axes: 1 s/token, however low the points."""
    pd = pytest.importorskip("pandas")
    from sim.reproduce.figures import FIG12
    from sim.reproduce.paper_plots import draw_figure

    low = pd.DataFrame({"system": ["vLLM"] * 3, "rate": [0.5, 1.0, 1.5], "normalized_latency": [0.03, 0.035, 0.04],
                        "saturated": [False, False, True]})
    fig = draw_figure(FIG12, {panel.id: low for panel in FIG12.panels}, [])
    tops = [ax.get_ylim() for ax in fig.axes if ax.get_ylabel()]
    assert len(tops) == len(FIG12.panels) and set(tops) == {(0.0, 1.0)}
    import matplotlib.pyplot as plt

    plt.close(fig)


def overlaps(fig) -> list[str]:
    """Each text drawn over a marker of the axes, as 'text / marker of line'."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.text import Text
    from matplotlib.transforms import Bbox

    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    renderer = canvas.get_renderer()
    texts = [t for t in fig.findobj(Text) if t.get_visible() and t.get_text()]
    found = []
    for ax in fig.axes:
        for line in ax.lines:
            if line.get_marker() in (None, "None", "", " "):
                continue
            half = (line.get_markersize() + line.get_markeredgewidth()) * fig.dpi / 72 / 2
            for x, y in line.get_transform().transform(line.get_xydata()):
                box = Bbox.from_extents(x - half, y - half, x + half, y + half)
                found += [f"{t.get_text()!r} / {line.get_label()}" for t in texts
                          if t.get_window_extent(renderer).overlaps(box)]
    return found


def test_no_label_is_drawn_over_a_marker(monkeypatch, tmp_path):
    """vLLM's point on the knee at the highest rate, where the knee's name was written; hollow markers and arrows
    on the top edge, under the title."""
    figures = []
    monkeypatch.setattr(plots, "write_png", lambda fig, path: figures.append(fig) or path)
    rows = summary() + [{"system": "vLLM", "rate": 2.5, "normalized_latency": 0.52, "saturated": True},
                        {"system": "FasterTransformer", "rate": 2.5, "normalized_latency": 9.5, "saturated": True}]
    title = "opt-13b, 1x a100-40gb, sharegpt-fig11-standin, poisson arrivals"
    plots.normalized_latency_plot(rows, tmp_path / "n.png", title=title, ylim=1.0)
    plots.normalized_latency_plot(rows, tmp_path / "n.png", title=title)
    plots.latency_plots(rows, tmp_path, title=title)
    assert len(figures) == 4
    for fig in figures:
        assert overlaps(fig) == []
