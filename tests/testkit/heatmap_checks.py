"""What a heatmap's reader needs, checked on a figure as shown (tests/testkit/figures_theory.py, tests/testkit/figures_runs.py): a
colour bar with a title (and a fixed range where the figure is compared across a control's settings), row labels set
off from the cells with the room they need, and cell labels that fit their cells and read on them.

A label fits when its characters, at :data:`CHAR_EM` em each, take no more than its cell's width in a plot area of
:data:`PLOT_PX` (a notebook column less its margins) over the columns shown at first. It reads when its colour's WCAG
contrast ratio with the cell is at least 4 (computed here from the figure's own colour scale, independently of the
lab's choice): dark or white text, whichever is better, always reaches 4.17.
"""

from __future__ import annotations

import math

from testkit.nbexec import Figure

CHAR_EM = 0.62  # a character's width in em in plotly's sans-serif (Open Sans, Arial), capitals and digits included
PLOT_PX = 640  # px: the narrowest plot area a notebook column leaves (JupyterLab, Colab)
TICK_SIZE = 12  # px: plotly's tick labels
MIN_CONTRAST = 4.0


def _rgb(colour: str) -> tuple[float, ...]:
    if colour.startswith("#"):
        return tuple(int(colour[i : i + 2], 16) for i in (1, 3, 5))
    return tuple(float(v) for v in colour[colour.index("(") + 1 : -1].split(",")[:3])


def luminance(rgb) -> float:
    """WCAG 2's relative luminance of an (r, g, b) colour, 0..255 each."""
    lin = [c / 255 / 12.92 if c / 255 <= 0.04045 else ((c / 255 + 0.055) / 1.055) ** 2.4 for c in rgb]
    return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]


def contrast(a, b) -> float:
    lo, hi = sorted((luminance(a), luminance(b)))
    return (hi + 0.05) / (lo + 0.05)


def cell_rgb(colorscale, z: float, zmin: float, zmax: float) -> tuple[float, ...]:
    """The colour plotly paints ``z`` with: the scale's stops interpolated at (z - zmin) / (zmax - zmin), clipped."""
    at = min(max((z - zmin) / (zmax - zmin), 0.0), 1.0)
    stops = [(float(p), _rgb(c)) for p, c in colorscale]
    for (p0, c0), (p1, c1) in zip(stops, stops[1:]):
        if p0 <= at <= p1:
            f = (at - p0) / (p1 - p0) if p1 > p0 else 0.0
            return tuple(a + f * (b - a) for a, b in zip(c0, c1))
    return stops[-1][1]


def readable_heatmap(fig: Figure, colorbar: str, zrange: tuple[float, float] | None = None) -> None:
    """The figure's heatmap: its colour bar titled ``colorbar`` (over ``zrange`` if given), its row labels clear of
    the cells, and its cell labels (a text trace over it) drawn whole in their cells, readable on them."""
    hm = fig.heatmap
    title = ((hm.get("colorbar") or {}).get("title") or {}).get("text")
    assert title == colorbar, f"{fig.title!r}: colour bar titled {title!r}, expected {colorbar!r}"
    if zrange is not None:
        assert (hm.get("zmin"), hm.get("zmax")) == zrange, (
            f"{fig.title!r}: colour range {hm.get('zmin')}..{hm.get('zmax')}"
        )
    yaxis = fig.layout.get("yaxis") or {}
    standoff, longest = yaxis.get("ticklabelstandoff", 0), max(len(str(s)) for s in hm["y"])
    assert standoff >= 4, f"{fig.title!r}: row labels touch the cells (standoff {standoff} px)"
    need = longest * CHAR_EM * TICK_SIZE + standoff
    assert fig.layout["margin"]["l"] >= need, f"{fig.title!r}: left margin {fig.layout['margin']['l']} < {need:.0f} px"
    texts = [t for t in fig.traces if t.get("mode") == "text"]
    if hm.get("text") is None:
        assert not texts, f"{fig.title!r}: labels drawn without the heatmap's text"
        return
    assert len(texts) == 1, f"{fig.title!r}: {len(texts)} label traces"
    (labels,) = texts
    x_range = (fig.layout.get("xaxis") or {}).get("range")
    cols = round(x_range[1] - x_range[0]) if x_range else len(hm["x"])
    room, size = PLOT_PX / cols, labels["textfont"]["size"]
    col, row = {x: j for j, x in enumerate(hm["x"])}, {y: i for i, y in enumerate(hm["y"])}
    for text, colour, x, y in zip(labels["text"], labels["textfont"]["color"], labels["x"], labels["y"]):
        assert len(text) * CHAR_EM * size <= room, f"{fig.title!r}: {text!r} is wider than its {room:.0f} px cell"
        z = hm["z"][row[y]][col[x]]
        bg = cell_rgb(hm["colorscale"], z, hm["zmin"], hm["zmax"]) if z is not None and math.isfinite(z) else (255,) * 3
        ratio = contrast(bg, _rgb(colour))
        assert ratio >= MIN_CONTRAST, f"{fig.title!r}: {text!r} in {colour} on {bg}: contrast {ratio:.2f}"
    drawn = sorted(labels["text"])
    assert drawn == sorted(s for r in hm["text"] for s in r if s), f"{fig.title!r}: the drawn labels are not the cells'"
