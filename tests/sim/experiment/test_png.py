"""A figure written in one drawing is cropped to what it drew; one that reaches past its canvas is never cut off."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("matplotlib")
from PIL import Image  # noqa: E402  matplotlib's own dependency

from sim.experiment import png  # noqa: E402


def white(height: int, width: int) -> np.ndarray:
    return np.full((height, width, 4), 255, dtype=np.uint8)


def test_the_drawn_part_is_what_differs_from_the_background_with_a_margin():
    pixels = white(50, 60)
    pixels[10:20, 30:35, :3] = 0
    crop = png.drawn_part(pixels, margin=3)
    assert crop.shape[:2] == (10 + 6, 5 + 6)
    assert (crop[3:-3, 3:-3, :3] == 0).all() and (crop[:3] == 255).all()


@pytest.mark.parametrize("where", [(0, 5), (49, 5), (5, 0), (5, 59)])
def test_a_drawing_at_the_edge_or_none_has_no_drawn_part(where):
    pixels = white(50, 60)
    pixels[10, 10, :3] = 0
    pixels[where[0], where[1], :3] = 0
    assert png.drawn_part(pixels, margin=3) is None
    assert png.drawn_part(white(50, 60), margin=3) is None


def drawn(tmp_path, label: str, name: str):
    fig, ax = png.new_figure((3.0, 2.0))
    ax.plot([0, 1], [0, 1], label=label)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0))
    path = png.write_png(fig, tmp_path / name)
    with Image.open(path) as image:
        assert "Software" not in image.info and round(image.info["dpi"][0]) == png.DPI
        return path.read_bytes(), image.size, fig.get_size_inches() * png.DPI


def test_a_figure_is_cropped_to_what_it_drew_and_written_the_same_each_time(tmp_path):
    first, (width, height), canvas = drawn(tmp_path, "vLLM", "a.png")
    again, _, _ = drawn(tmp_path, "vLLM", "b.png")
    assert width < canvas[0] - png.ROOM_IN[2] * png.DPI / 2 and height < canvas[1]
    assert first == again
    with Image.open(tmp_path / "a.png") as image:
        assert image.mode == "RGB"  # opaque: no alpha channel to pack


def test_a_legend_wider_than_the_room_is_written_whole(tmp_path):
    _, (width, _), canvas = drawn(tmp_path, "a system with a very long name " * 6, "wide.png")
    assert width > canvas[0]  # savefig found the whole extent, past the canvas's right edge
