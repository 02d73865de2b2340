"""A figure written as PNG in one drawing: drawn on a canvas with room around its axes, then cropped to what it
drew and a margin.

matplotlib's `savefig(bbox_inches="tight")` draws a figure twice, once without rendering to find its extent and
once to render it: about a quarter of each of `servesim run`'s figures. Here the figure is drawn once on a canvas with
room for its labels, title and legend around the axes (new_figure), and the pixels tell its extent. Where what it
drew reaches the canvas's edge (a legend wider than the room), the figure is written by savefig instead, so that
nothing is ever cut off. Either way the same figure gives the same bytes (no Software or time in the metadata).
The cropped image is packed as RGB at zlib level 3: half the time of RGBA at level 6, and no larger (53 kB).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from PIL import Image  # matplotlib's own dependency

from engine.atomic import write_atomic

DPI = 120
MARGIN_IN = 0.1  # around what was drawn, as savefig's pad_inches
ROOM_IN = (2.0, 1.4, 3.2, 0.8)  # left, bottom, right, top of the axes: for tick labels, titles and legends
METADATA = {"Software": None}


def new_figure(axes_in: tuple[float, float]):
    """A figure whose one axes is axes_in inches (width, height), with ROOM_IN around it; outside pyplot, so
    nothing keeps it once it is dropped."""
    width, height = axes_in
    left, bottom, right, top = ROOM_IN
    fig_width, fig_height = left + width + right, bottom + height + top
    fig = Figure(figsize=(fig_width, fig_height), dpi=DPI)
    ax = fig.add_axes((left / fig_width, bottom / fig_height, width / fig_width, height / fig_height))
    return fig, ax


def write_png(fig: Figure, path: Path) -> Path:
    """The figure written atomically to path, cropped to what it drew and MARGIN_IN around it."""
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    pixels = np.asarray(canvas.buffer_rgba())
    crop = drawn_part(pixels, round(MARGIN_IN * DPI))
    if crop is None:  # it reaches the edge: savefig finds its whole extent
        return write_atomic(Path(path), lambda f: fig.savefig(f, format="png", dpi=DPI, bbox_inches="tight",
                                                              pad_inches=MARGIN_IN, metadata=METADATA))
    image = Image.fromarray(np.ascontiguousarray(crop[:, :, :3]))  # opaque: RGB, a quarter fewer bytes to pack
    return write_atomic(Path(path), lambda f: image.save(f, format="png", dpi=(DPI, DPI), compress_level=3))


def drawn_part(pixels: np.ndarray, margin: int) -> np.ndarray | None:
    """The rows and columns of an RGBA image holding anything but its background (its corner's colour), with
    `margin` pixels of background around them; None where they touch the image's edge (the drawing may go on
    past it) or nothing was drawn."""
    colours = pixels.view(np.uint32)[:, :, 0]  # a pixel's four bytes as one number: a hundredth of the time
    ink = colours != colours[0, 0]
    rows, cols = np.flatnonzero(ink.any(axis=1)), np.flatnonzero(ink.any(axis=0))
    if not len(rows):
        return None
    top, bottom, left, right = rows[0], rows[-1], cols[0], cols[-1]
    height, width = ink.shape
    if top == 0 or left == 0 or bottom == height - 1 or right == width - 1:
        return None
    return pixels[max(top - margin, 0):bottom + margin + 1, max(left - margin, 0):right + margin + 1]
