r"""The run's report page, ``report.html``: a view of a run folder, beside the notebooks' other views.

One self-contained HTML file (plotly.js inlined: it opens offline). The only part of a command-line run that draws:
:mod:`qae_lab.runs.pipeline` imports it when the run ends, so that training loads no plotting module.
"""

from __future__ import annotations

import html
import os
from pathlib import Path
from typing import Any

from qae_lab.lab.panels import run_curves_figure
from qae_lab.storage.folder import REPORT_NAME, atomic_write_text, step_rows

__all__ = ["write_report"]


def _table_html(header: list[str], rows: list[list]) -> str:
    def cell(v):
        return f"{v:.3f}" if isinstance(v, float) else ("—" if v is None else html.escape(str(v)))

    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{cell(v)}</td>" for v in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def write_report(
    output_dir: str | os.PathLike,
    *,
    title: str,
    rows: list[dict],
    summary: dict[str, Any],
    evals: dict[str, dict] | None = None,
    notes: list[str] = (),
) -> Path:
    r"""Write ``report.html``: a summary table, the pass@1 table and the training curves.

    ``evals``: ``{"before" | "after": {"overall": metrics, "levels": {level: metrics}}}`` (``EvalResult.summary`` s).

    >>> import tempfile
    >>> rows = [{"step": s, "reward": 0.1 * s, "qae/k": 0.4} for s in (1, 2)]
    >>> page = write_report(tempfile.mkdtemp(), title="a run", rows=rows, summary={"method": "qae"}).read_text()
    >>> "<h1>a run</h1>" in page, "<td>method</td><td>qae</td>" in page, "plotly" in page
    (True, True, True)
    """
    title = html.escape(title)
    parts = [
        f"<h1>{title}</h1>",
        *(f"<p>{html.escape(n)}</p>" for n in notes),
        "<h2>Run</h2>",
        _table_html(["", ""], [[k, v] for k, v in summary.items()]),
    ]
    if evals:
        keys = ("greedy_pass@1", "pass@1", "pass@8", "extracted_frac")
        table = []
        for name, ev in evals.items():
            table.append([name, "all", *(ev["overall"].get(k) for k in keys)])
            table += [[name, f"level {lv}", *(m.get(k) for k in keys)] for lv, m in ev.get("levels", {}).items()]
        parts += ["<h2>Held-out evaluation</h2>", _table_html(["model", "problems", *keys], table)]
    fig = run_curves_figure(step_rows(rows))
    parts += ["<h2>Training curves</h2>", fig.to_html(include_plotlyjs=True, full_html=False)]
    style = (
        "body{font-family:sans-serif;max-width:1100px;margin:auto}table{border-collapse:collapse;margin:8px 0}"
        "td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}"
    )
    page = (
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{title}</title><style>{style}</style>"
        f"</head><body>{''.join(parts)}</body></html>"
    )
    return atomic_write_text(Path(output_dir) / REPORT_NAME, page)
