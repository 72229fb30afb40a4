r"""What notebook 06 draws: which logged metrics its views offer, in which words, and which runs each view shows.

Notebook 06 (the papers' phenomena on the committed sums runs, :mod:`qae_lab.analysis.phenomena`) shows curves over
training steps, pass@k against k and a K sweep, drawn by :mod:`qae_lab.lab.run_figures`.
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


def runs_of(runs: Iterable[Run], methods: Iterable[str]) -> list[Run]:
    r"""The runs whose method is one of ``methods``, in their order.

    >>> runs = [Run(f"{m}-seed0", m, 0, {}, [], None, None) for m in ("mean", "qae", "sa_ah")]
    >>> [r.method for r in runs_of(runs, SAAH_METHODS)]
    ['mean', 'sa_ah']
    """
    wanted = set(methods)
    return [r for r in runs if r.method in wanted]
