r"""What notebook 06 draws, as numbers: which logged metrics its views offer, and the series of its line figures.

Notebook 06 (the papers' phenomena on the committed sums runs, :mod:`qae_lab.analysis.phenomena`) shows
curves over training steps, pass@k against k and a K sweep. The figures themselves are
:mod:`qae_lab.lab.run_figures` (the lab layer: plotly, ipywidgets); this module only says which
metrics each view offers, in which words, and turns :func:`qae_lab.analysis.phenomena.pass_at_k_table`
and :func:`qae_lab.analysis.phenomena.k_sweep_rows` into the x values, mean lines and +- std bands the
figures draw. Nothing here imports plotly or ipywidgets.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import NamedTuple

from qae_lab.analysis.compare import Run
from qae_lab.metric_names import (
    LEDGER_PREFIX,
    QAE_NEG_CORRECT,
    QAE_NEG_CORRECT_IF_MEAN,
    QAE_ZERO_ADV_FRAC,
    SAAH_W_MEAN_NEG,
)
from qae_lab.analysis.stats import Stat

__all__ = [
    "ENTROPY_CURVES",
    "LEDGER_CELLS",
    "LEDGER_CURVES",
    "NEG_CORRECT_CURVES",
    "SAAH_CURVES",
    "SAAH_METHODS",
    "K_SWEEP_QUANTITIES",
    "BEFORE",
    "runs_of",
    "Lines",
    "pass_at_k_lines",
    "k_sweep_lines",
]

# logged metric -> its words on the axis and in the menu: the entropy experiment's curves (notebook 06, sec. 2)
ENTROPY_CURVES: dict[str, str] = {
    "entropy": "entropy (nats per token)",
    "reward": "mean reward per step",
    QAE_ZERO_ADV_FRAC: "zero-advantage fraction",
    "clip_ratio/region_mean": "share of tokens clipped (both passes)",
    "behaviour/distinct_correct": "distinct correct texts per group of 8",
    "completions/mean_length": "completion length (tokens)",
}

# the ledger's parts notebook 06 shows (of qae_lab.ledger.LEDGER_PARTS): the whole update and the four cells of
# Prop. 4.2 (regime x sign of the advantage), and their logged metrics ``ledger/<part>`` with their words
LEDGER_CELLS: tuple[str, ...] = ("dh", "dh_hard_pos", "dh_hard_neg", "dh_easy_pos", "dh_easy_neg")
LEDGER_CURVES: dict[str, str] = {
    LEDGER_PREFIX + part: label
    for part, label in zip(
        LEDGER_CELLS,
        ("whole update", "hard prompts, A > 0", "hard prompts, A < 0", "easy prompts, A > 0", "easy prompts, A < 0"),
    )
}

# correct answers given a negative advantage: under the run's baseline, and under the mean baseline on the same
# rewards (named by the metric itself: the notebook's text explains both)
NEG_CORRECT_CURVES: dict[str, str] = {
    QAE_NEG_CORRECT: QAE_NEG_CORRECT,
    QAE_NEG_CORRECT_IF_MEAN: QAE_NEG_CORRECT_IF_MEAN,
}

# SA-AH against GRPO under the composite reward (sec. 6): the two methods compared, the curves offered
SAAH_METHODS: tuple[str, ...] = ("mean", "sa_ah")
SAAH_CURVES: dict[str, str] = {
    "completions/mean_length": "completion length (tokens)",
    SAAH_W_MEAN_NEG: "SA-AH mean weight, negative rollouts",
    "reward": "mean composite reward per step",
    "entropy": "entropy (nats per token)",
}

# the columns of qae_lab.analysis.phenomena.k_sweep_rows drawn against K
K_SWEEP_QUANTITIES: tuple[str, ...] = ("final entropy", "final easy fraction", "pass@1", "pass@32")

BEFORE = "before (every method)"  # the one pass@k line before training: every method starts from the same model


def runs_of(runs: Iterable[Run], methods: Iterable[str]) -> list[Run]:
    r"""The runs whose method is one of ``methods``, in their order.

    >>> runs = [Run(f"{m}-seed0", m, 0, {}, [], None, None) for m in ("mean", "qae", "sa_ah")]
    >>> [r.method for r in runs_of(runs, SAAH_METHODS)]
    ['mean', 'sa_ah']
    """
    wanted = set(methods)
    return [r for r in runs if r.method in wanted]


class Lines(NamedTuple):
    r"""Lines over one x axis: ``x`` (n values), ``y`` (name -> n means) and ``bands`` (name -> n stds; the lines
    without a band are left out), as :func:`qae_lab.lab.plots.line_figure` takes them.

    >>> Lines([1, 2], {"a": [0.5, 0.6]}, {}).y["a"]
    [0.5, 0.6]
    """

    x: list
    y: dict[str, list[float]]
    bands: dict[str, list[float]]


def pass_at_k_lines(table: Mapping[str, Mapping[str, Mapping[int, Stat]]]) -> Lines:
    r"""pass@k against k: one line per method after training (``"<method>, after"``, mean over seeds with a +- std
    band), then one line before training (:data:`BEFORE`, no band), all at the k of the first method's after-training
    evaluation.

    Every method starts from the same model, evaluated on the same problems with the same sampling seeds, so the
    before line is the first method's; a method whose before-training pass@k differs from it is an error.

    Args:
        table: :func:`qae_lab.analysis.phenomena.pass_at_k_table`: ``{method: {"before" | "after": {k: Stat}}}``.

    Raises:
        ValueError: an empty table, or methods whose pass@k before training differ.

    >>> from qae_lab.analysis.stats import stat
    >>> before = {1: stat([0.4, 0.4]), 2: stat([0.6, 0.6])}
    >>> table = {"mean": {"before": before, "after": {1: stat([0.5, 0.7]), 2: stat([0.8, 0.8])}},
    ...          "qae": {"before": before, "after": {1: stat([0.5, 0.5]), 2: stat([0.5, 1.0])}}}
    >>> lines = pass_at_k_lines(table)
    >>> lines.x, lines.y["mean, after"], lines.y["before (every method)"], lines.bands["qae, after"]
    ([1, 2], [0.6, 0.8], [0.4, 0.6], [0.0, 0.25])
    """
    if not table:
        raise ValueError("no methods in the pass@k table (qae_lab.analysis.phenomena.pass_at_k_table of no runs?)")
    first = next(iter(table.values()))
    ks = sorted(first["after"])
    for method, t in table.items():
        if any(k in t["before"] and abs(t["before"][k].mean - first["before"][k].mean) > 1e-12 for k in ks):
            raise ValueError(
                f"{method}'s pass@k before training differs from {next(iter(table))}'s: the runs do "
                "not start from one model, so there is no single before line"
            )
    y = {f"{m}, after": [t["after"][k].mean for k in ks] for m, t in table.items()}
    y[BEFORE] = [first["before"][k].mean for k in ks]
    bands = {f"{m}, after": [t["after"][k].std for k in ks] for m, t in table.items()}
    return Lines(ks, y, bands)


def k_sweep_lines(rows: Sequence[Mapping], quantity: str) -> Lines:
    r"""One quantity of a K sweep against K: the mean over seeds at each K with a +- std band.

    Args:
        rows: :func:`qae_lab.analysis.phenomena.k_sweep_rows` (one row per K, sorted by K).
        quantity: one of :data:`K_SWEEP_QUANTITIES`.

    >>> from qae_lab.analysis.stats import stat
    >>> rows = [{"k": 0.2, "pass@1": stat([0.25, 0.75])}, {"k": 0.4, "pass@1": stat([0.5, 0.5])}]
    >>> k_sweep_lines(rows, "pass@1")
    Lines(x=[0.2, 0.4], y={'pass@1': [0.5, 0.5]}, bands={'pass@1': [0.25, 0.0]})
    """
    if quantity not in K_SWEEP_QUANTITIES:
        raise ValueError(f"quantity must be one of {K_SWEEP_QUANTITIES}, got {quantity!r}")
    missing = [r["k"] for r in rows if r.get(quantity) is None]
    if missing:
        raise ValueError(f"no {quantity} at K = {', '.join(map(str, missing))} (runs without it?)")
    return Lines(
        [r["k"] for r in rows],
        {quantity: [r[quantity].mean for r in rows]},
        {quantity: [r[quantity].std for r in rows]},
    )
