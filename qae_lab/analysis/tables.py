r"""Results as tables: rows of numbers rendered for a notebook, the README or a docs page, never as sentences.

A row is a mapping of column name to value. :func:`markdown_table` renders rows as a Markdown table
(``IPython.display.Markdown`` shows it in a notebook; the README and docs pages embed it): a float with
``digits`` digits, a :class:`~qae_lab.analysis.stats.Stat` as mean±std, None as a dash, a bar escaped.
Tests compare the numbers in the rows with the committed data, not the rendered text.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from qae_lab._checks import check_int
from qae_lab.analysis.stats import Stat

__all__ = ["cell", "markdown_table"]


def cell(value, digits: int = 3) -> str:
    r"""One value as a table shows it: a float rounded to ``digits``, a Stat as mean±std, None as a dash.

    >>> cell(0.12345), cell(7), cell(None), cell(Stat(0.6, 0.1, 0.5, 0.7, 2)), cell("a | b")
    ('0.123', '7', '—', '0.600±0.100', 'a \\| b')
    """
    if isinstance(value, Stat):
        text = f"{value.mean:.{digits}f}±{value.std:.{digits}f}"
    elif isinstance(value, float):
        text = f"{value:.{digits}f}"
    else:
        text = "—" if value is None else str(value)
    return text.replace("|", "\\|")


def markdown_table(
    rows: Sequence[Mapping], columns: Sequence[str] | None = None, *, digits: int | Mapping[str, int] = 3
) -> str:
    r"""``rows`` as a Markdown table, in the order of ``columns`` (default: the first row's keys).

    ``digits``: for every float, or per column (columns it does not name get 3).

    >>> print(markdown_table([{"method": "qae", "pass@1": 0.5791, "seeds": 3}], digits={"pass@1": 2}))
    | method | pass@1 | seeds |
    | --- | --- | --- |
    | qae | 0.58 | 3 |
    """
    if not rows and columns is None:
        raise ValueError("rows must hold at least one row, or columns must name the columns")
    columns = list(columns if columns is not None else rows[0])
    places = {c: digits.get(c, 3) if isinstance(digits, Mapping) else digits for c in columns}
    for c, d in places.items():
        check_int(d, f"digits[{c!r}]", 0, 12)
    lines = ["| " + " | ".join(cell(c) for c in columns) + " |", "| " + " | ".join("---" for _ in columns) + " |"]
    lines += ["| " + " | ".join(cell(row.get(c), places[c]) for c in columns) + " |" for row in rows]
    return "\n".join(lines)
