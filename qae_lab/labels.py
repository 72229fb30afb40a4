"""Every name a participant reads on screen, written once: the baselines' and token weightings' names, the logged
metrics' plain names, units and colours, the panels and menus that show them, and the regime groups' words.

Pure data, the standard library only. Nothing here imports plotly or ipywidgets.
"""

from qae_lab.metric_names import (
    LEDGER_PREFIX,
    QAE_EASY_FRAC,
    QAE_HARD_FRAC,
    QAE_K,
    QAE_NEG_CORRECT,
    QAE_NEG_CORRECT_IF_MEAN,
    QAE_SUCCESS_RATE,
    QAE_ZERO_ADV_FRAC,
    SAAH_ALPHA,
    SAAH_W_MEAN_NEG,
)

# the baselines and token weightings (qae_lab.methods): full names, and short ones for side-by-side tables
BASELINE_NAMES = {"mean": "mean (GRPO)", "quantile": "K-quantile (QAE)"}
BASELINE_SHORT = {"mean": "mean", "quantile": "QAE"}
WEIGHTING_NAMES = {"none": "none", "ah": "AH", "sa_ah": "SA-AH"}
OPTIMIZER_NAMES = {"sgd": "SGD", "adam": "Adam", "adam_scalar": "Adam, one RMS per prompt"}

# a group's name in the sentences and the figure: the held-out set's "all" is the mixed one
GROUP_WORDS = {"hard": "hard", "easy": "easy", "all": "mixed"}

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#7f7f7f")

# metric -> (its name in plain words, the unit of its axis, its colour): one colour per metric, everywhere
CURVES = {
    "reward": ("mean reward", "reward", "#1f77b4"),
    QAE_SUCCESS_RATE: ("pass rate", "share correct", "#17becf"),
    "entropy": ("entropy", "nats per token", "#9467bd"),
    "entropy/updated_rows": ("updated rows", "nats per token", "#e377c2"),
    QAE_ZERO_ADV_FRAC: ("zero advantage", "share of completions", "#8c564b"),
    QAE_EASY_FRAC: ("easy share", "share of prompts", "#2ca02c"),
    QAE_HARD_FRAC: ("hard share", "share of prompts", "#d62728"),
    SAAH_W_MEAN_NEG: ("mean weight", "weight (1: full)", "#ff7f0e"),
    QAE_K: ("K", "K (quantile level)", "#000000"),
    SAAH_ALPHA: ("α", "α (exponent)", "#bcbd22"),
    LEDGER_PREFIX + "dh": ("all", "dH per unit step", "#393b79"),
    LEDGER_PREFIX + "dh_pos": ("A > 0", "dH per unit step", "#637939"),
    LEDGER_PREFIX + "dh_neg": ("A < 0", "dH per unit step", "#843c39"),
    LEDGER_PREFIX + "dh_hard": ("hard prompts", "dH per unit step", "#e7969c"),
    LEDGER_PREFIX + "dh_easy": ("easy prompts", "dH per unit step", "#6b6ecf"),
    "completions/mean_length": ("mean length", "tokens", "#7f7f7f"),
}

# a logged metric's words on an axis, in a menu or as a panel's title
AXIS_WORDS = {
    "entropy": "entropy (nats per token)",
    "completions/mean_length": "completion length (tokens)",
    SAAH_W_MEAN_NEG: "SA-AH mean weight, negative rollouts",
    QAE_ZERO_ADV_FRAC: "zero-advantage fraction",
}

# panel title -> the logged metrics it draws (TRL's names and qae_lab's qae/*, saah/*)
RUN_CURVES = {
    "reward": ("reward",),
    "entropy": ("entropy", "entropy/updated_rows"),
    AXIS_WORDS[QAE_ZERO_ADV_FRAC]: (QAE_ZERO_ADV_FRAC,),
    "hard / easy prompt fractions": (QAE_HARD_FRAC, QAE_EASY_FRAC),
    "K": (QAE_K,),
    "alpha": (SAAH_ALPHA,),
    AXIS_WORDS[SAAH_W_MEAN_NEG]: (SAAH_W_MEAN_NEG,),
    AXIS_WORDS["completions/mean_length"]: ("completions/mean_length",),
}

# the live dashboard's panel title -> logged metrics, first what notebook 04 asks people to watch
WEIGHTS_PANEL = "token weight, failed completions"
SHARES_PANEL, REWARD_PANEL = "easy and hard prompts (QAE)", "reward and pass rate"
LIVE_PANELS = {
    SHARES_PANEL: (QAE_EASY_FRAC, QAE_HARD_FRAC),
    "entropy": ("entropy", "entropy/updated_rows"),
    "zero-advantage completions": (QAE_ZERO_ADV_FRAC,),
    WEIGHTS_PANEL: (SAAH_W_MEAN_NEG,),
    REWARD_PANEL: ("reward", QAE_SUCCESS_RATE),
    "K and alpha in force": (QAE_K, SAAH_ALPHA),
    # the entropy ledger (qae_lab.ledger): the update's first-order entropy change, and which responses it comes from
    "entropy ledger: dH by sign of A": tuple(LEDGER_PREFIX + p for p in ("dh", "dh_pos", "dh_neg")),
    "entropy ledger: dH by QAE regime": tuple(LEDGER_PREFIX + p for p in ("dh_hard", "dh_easy")),
}

# logged metric -> its words on the axis and in the menu: the entropy experiment's curves (notebook 06, sec. 2)
ENTROPY_CURVES: dict[str, str] = {
    "entropy": AXIS_WORDS["entropy"],
    "reward": "mean reward per step",
    QAE_ZERO_ADV_FRAC: AXIS_WORDS[QAE_ZERO_ADV_FRAC],
    "clip_ratio/region_mean": "share of tokens clipped (both passes)",
    "behaviour/distinct_correct": "distinct correct texts per group of 8",
    "completions/mean_length": AXIS_WORDS["completions/mean_length"],
}

# the ledger's parts notebook 06 shows: the whole update and Prop. 4.2's four cells (regime x sign of A)
LEDGER_CELLS: tuple[str, ...] = ("dh", "dh_hard_pos", "dh_hard_neg", "dh_easy_pos", "dh_easy_neg")
LEDGER_CURVES: dict[str, str] = {
    LEDGER_PREFIX + part: label
    for part, label in zip(
        LEDGER_CELLS,
        ("whole update", "hard prompts, A > 0", "hard prompts, A < 0", "easy prompts, A > 0", "easy prompts, A < 0"),
    )
}

# correct answers given A < 0, under the run's baseline and under the mean on the same rewards
NEG_CORRECT_CURVES: dict[str, str] = {
    QAE_NEG_CORRECT: QAE_NEG_CORRECT,
    QAE_NEG_CORRECT_IF_MEAN: QAE_NEG_CORRECT_IF_MEAN,
}

# SA-AH against GRPO under the composite reward (notebook 06, sec. 6): the curves offered
SAAH_CURVES: dict[str, str] = {
    "completions/mean_length": AXIS_WORDS["completions/mean_length"],
    SAAH_W_MEAN_NEG: AXIS_WORDS[SAAH_W_MEAN_NEG],
    "reward": "mean composite reward per step",
    "entropy": AXIS_WORDS["entropy"],
}

# the ledger's cells in the live view's legend
CELL_NAMES = {
    "hard, A > 0": "dh_hard_pos",
    "hard, A < 0": "dh_hard_neg",
    "easy, A > 0": "dh_easy_pos",
    "easy, A < 0": "dh_easy_neg",
    "all": "dh",
}


# what the live view shows -> its axis
SHOW = {
    "cumulative ledger, exact": "first-order dH summed over steps (nats)",
    "cumulative ledger, trainer's npg": "npg ledger summed over steps (eta / N_tok units)",
    "entropy": "H(pi) (nats)",
    "success": "success rate",
}
