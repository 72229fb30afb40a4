"""Checks shared by the notebooks' figure specs (tests/testkit/figures_theory.py, tests/testkit/figures_runs.py).

A notebook's spec (:class:`NotebookSpec`) lists its figures by title (a regular expression that the
whole title, line breaks read as spaces, must match): how many the notebook shows with that title
and a check of what such a figure must contain (trace names and counts, axis titles, non-empty
finite data, and what the notebook's text says the figure shows). Every figure a notebook shows
must match one entry, and every entry must be shown: a new figure needs an entry. The spec's
``probe`` runs in the notebook's kernel after its last cell: controls moved as a person moves them,
and the figures they re-draw asserted. Used by tests/notebooks/test_notebook_runs.py.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass

from testkit.nbexec import Figure


def finite(values, what: str = "values") -> list[float]:
    """``values`` as floats, each a real finite number, and at least one of them."""
    out = [float(v) for v in values]
    assert out, f"no {what}"
    assert all(math.isfinite(v) for v in out), f"{what}: not all finite: {out[:10]}"
    return out


def within(values, lo: float, hi: float, what: str = "values") -> list[float]:
    out = finite(values, what)
    assert all(lo - 1e-9 <= v <= hi + 1e-9 for v in out), f"{what} outside [{lo}, {hi}]: {out[:10]}"
    return out


def axes(fig: Figure, x: str, y: str) -> None:
    assert (fig.axis_title("xaxis"), fig.axis_title("yaxis")) == (x, y), (
        f"{fig.title!r}: axis titles {fig.axis_title('xaxis')!r}, {fig.axis_title('yaxis')!r}"
    )


def lines(fig: Figure, names: list[str], n: int | None = None) -> dict[str, dict]:
    """The figure's legend entries are exactly ``names`` (in order), each a line of ``n`` points (any
    number if None, but the same x for all) with finite values; returns them by name."""
    assert fig.names == names, f"{fig.title!r}: traces {fig.names}, expected {names}"
    for t in fig.lines:
        x, y = list(t["x"]), finite(t["y"], f"{t['name']} y")
        assert len(x) == len(y) and (n is None or len(y) == n), f"{t['name']}: {len(x)} x, {len(y)} y, want {n}"
    return {t["name"]: t for t in fig.lines}


def band_lines(
    fig: Figure, methods: list[str], runs: int, y: str, lo: float = -math.inf, hi: float = math.inf
) -> dict[str, dict]:
    """A :func:`qae_lab.lab.figures.band_figure` over training steps: one line per method, named with its
    number of runs, each with its seed-spread band (twice the points: up, then back down), steps
    increasing, values in [lo, hi]."""
    axes(fig, "step", y)
    found = lines(fig, [f"{m} ({runs} runs)" for m in methods])
    assert centred_bands(fig) == len(methods), f"{fig.title!r}: {len(fig.bands)} bands for {len(methods)} lines"
    for line in fig.lines:
        steps = list(line["x"])
        assert len(steps) >= 2, f"{line['name']}: {len(steps)} steps"
        assert steps == sorted(set(steps)) and steps[0] >= 0, f"{line['name']}: steps {steps[:5]}..."
        within(line["y"], lo, hi, line["name"])
    return found


def centred_bands(fig: Figure) -> int:
    """Each band (figures.add_band: the upper edge forwards, the lower edge back) is the spread around the line
    drawn right after it: same steps, the line halfway between its edges. Returns how many bands there are."""
    pairs = [(a, b) for a, b in zip(fig.traces, fig.traces[1:]) if a.get("fill") == "toself" and b in fig.lines]
    assert len(pairs) == len(fig.bands), f"{fig.title!r}: a band not followed by its line"
    for band, line in pairs:
        n, y = len(line["x"]), finite(line["y"], line["name"])
        upper, lower = finite(band["y"][:n]), finite(band["y"][n:][::-1])
        assert list(band["x"][:n]) == list(line["x"]) and len(band["y"]) == 2 * n, f"{line['name']}: band x"
        assert all(
            u >= lo and math.isclose((u + lo) / 2, v, rel_tol=1e-6, abs_tol=1e-9) for u, lo, v in zip(upper, lower, y)
        ), f"{line['name']}: the line is not the centre of its band"
    return len(pairs)


def heatmap(fig: Figure, rows: int, cols: int, lo: float = -math.inf, hi: float = math.inf) -> dict:
    """The figure's one heatmap, ``rows`` x ``cols`` with unique labels; cells a number in [lo, hi] or
    empty (None: padding)."""
    hm = fig.heatmap
    assert (len(hm["y"]), len(hm["x"])) == (rows, cols), f"{fig.title!r}: {len(hm['y'])} x {len(hm['x'])}"
    assert len(set(map(str, hm["y"]))) == rows and len(set(map(str, hm["x"]))) == cols, "labels repeat"
    assert len(hm["z"]) == rows and all(len(r) == cols for r in hm["z"]), f"{fig.title!r}: z is not {rows} x {cols}"
    cells = [v for r in hm["z"] for v in r if v is not None and not (isinstance(v, float) and math.isnan(v))]
    within(cells, lo, hi, f"{fig.title!r} cells")
    return hm


def vlines(fig: Figure, xs: list[float]) -> None:
    got = sorted(s["x0"] for s in fig.layout.get("shapes", []) if s.get("x0") == s.get("x1"))
    assert got == sorted(xs), f"{fig.title!r}: vertical lines at {got}, expected {sorted(xs)}"


def nonincreasing(ys: list[float], what: str) -> None:
    assert all(b <= a + 1e-9 for a, b in zip(ys, ys[1:])), f"{what} rises: {ys}"


def title_number(fig: Figure, pattern: str, group: int = 1) -> float:
    return float(re.search(pattern, fig.title).group(group))


@dataclass
class Shown:
    """Figures with a title matching ``title``: ``count`` of them (None: one or more), each passing ``check``."""

    title: str
    check: Callable[[Figure], None]
    count: int | None = 1


@dataclass
class NotebookSpec:
    """A notebook's figures, and the code that moves its controls (run in its kernel after its last cell)."""

    figures: list[Shown]
    probe: str = ""
