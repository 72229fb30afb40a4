r"""Render the README's picture: notebook 07's three-panel figure of QAE's Proposition 4.2 in training.

The figure is :func:`qae_lab.lab.run_figures.regimes_figure` on the committed runs
(:func:`qae_lab.analysis.seqpolicy_runs.load_regimes`, ``data/seqpolicy/regimes.json``) with the notebook's default
controls (Adam, Clip-Higher on), written as a PNG to ``docs/images/regimes.png``::

    python tools/readme_figure.py                 # docs/images/regimes.png
    python tools/readme_figure.py --out fig.png

How the committed PNG was made: plotly writes PNG only through kaleido, which is not a dependency of
qae_lab, so it was installed beside the project for this one command
(``pip install --target /tmp/kaleido_pkgs kaleido``: kaleido 1.5.1) and run as
``PYTHONPATH=/tmp/kaleido_pkgs BROWSER_PATH=/usr/bin/chromium python tools/readme_figure.py``; kaleido 1.x
drives a local Chrome or Chromium to draw the figure. Where kaleido is not importable, the script writes the
figure's HTML (plotly.js inlined, nothing fetched) and takes a screenshot of it with headless Chromium
(``chromium --headless --screenshot``); the two renderings differ only in anti-aliasing.
"""

from __future__ import annotations

import argparse
import importlib.util
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import plotly.graph_objects as go

from qae_lab.lab.run_figures import regimes_figure
from qae_lab.analysis.seqpolicy_runs import load_regimes

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "images" / "regimes.png"
WIDTH, HEIGHT, SCALE = 1100, 500, 2  # CSS pixels of the page; SCALE: device pixels per CSS pixel


def figure() -> go.Figure:
    r"""Notebook 07's figure at its default controls, sized for a page: a fixed width, and a top margin and title
    position that keep the two-line title inside the picture (kaleido cuts the notebook's title, placed at the top
    edge, in half)."""
    fig = regimes_figure(load_regimes(), "adam", True)
    fig.update_layout(width=WIDTH, height=HEIGHT, margin={"t": 120}, title={"y": 0.95, "yanchor": "top"})
    return fig


def _chromium_screenshot(fig: go.Figure, out: Path) -> None:
    """The figure's HTML, drawn by headless Chromium into ``out`` (no network: plotly.js is inlined)."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if browser is None:
        raise SystemExit("neither kaleido nor a Chromium is available: pip install kaleido, or install chromium")
    with tempfile.TemporaryDirectory() as tmp:
        page = Path(tmp) / "figure.html"
        fig.write_html(page, include_plotlyjs=True, full_html=True, config={"displayModeBar": False})
        subprocess.run(
            [
                browser,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--hide-scrollbars",
                f"--force-device-scale-factor={SCALE}",
                f"--window-size={WIDTH},{HEIGHT}",
                "--virtual-time-budget=5000",
                f"--screenshot={out}",
                page.as_uri(),
            ],
            check=True,
            capture_output=True,
        )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=OUT, help=f"the PNG to write (default: {OUT.relative_to(ROOT)})")
    args = p.parse_args(argv)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fig = figure()
    if importlib.util.find_spec("kaleido") is not None:
        fig.write_image(args.out, scale=SCALE)  # kaleido: plotly's own static export
        how = "kaleido"
    else:
        _chromium_screenshot(fig, args.out)
        how = "headless Chromium"
    print(f"{args.out}: written ({how})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
