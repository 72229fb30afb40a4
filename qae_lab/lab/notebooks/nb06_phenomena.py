r"""What notebook 06 (the papers' phenomena on the committed sums runs) draws: which logged metrics its views offer,
in which words, and which runs each view shows; the figures are :mod:`qae_lab.lab.run_figures`'.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from qae_lab.analysis.compare import Run
from qae_lab.metric_names import (
    LEDGER_PREFIX,
    QAE_NEG_CORRECT,
    QAE_NEG_CORRECT_IF_MEAN,
    QAE_ZERO_ADV_FRAC,
    SAAH_W_MEAN_NEG,
)
from qae_lab.labels import ENTROPY_CURVES, LEDGER_CELLS, LEDGER_CURVES, NEG_CORRECT_CURVES, SAAH_CURVES
from qae_lab.lab.run_figures import BEFORE, K_SWEEP_QUANTITIES, Lines, k_sweep_lines, pass_at_k_lines

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

# SA-AH against GRPO under the composite reward (sec. 6): the two methods compared, the curves offered
SAAH_METHODS: tuple[str, ...] = ("mean", "sa_ah")
# the columns of qae_lab.analysis.phenomena.k_sweep_rows drawn against K


def runs_of(runs: Iterable[Run], methods: Iterable[str]) -> list[Run]:
    r"""The runs whose method is one of ``methods``, in their order.

    >>> runs = [Run(f"{m}-seed0", m, 0, {}, [], None, None) for m in ("mean", "qae", "sa_ah")]
    >>> [r.method for r in runs_of(runs, SAAH_METHODS)]
    ['mean', 'sa_ah']
    """
    wanted = set(methods)
    return [r for r in runs if r.method in wanted]
