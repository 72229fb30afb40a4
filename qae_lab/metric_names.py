r"""The names of the metrics qae_lab logs, one constant per metric, named after it (``"qae/zero_adv_frac"`` is
:data:`QAE_ZERO_ADV_FRAC`), and their groups; docs/metrics.md says what each measures.

Pure strings: the trainer, the loss, the live lab and the analysis of logs all read these names from here.
"""

from __future__ import annotations

from qae_lab.methods import LEDGER_PARTS

# qae/*, behaviour/*: every step, by QAETrainer._score and QAETrainer._log_behaviour
QAE_K = "qae/k"
QAE_QUANTILE_BASELINE = "qae/quantile_baseline"
QAE_ZERO_ADV_FRAC = "qae/zero_adv_frac"
QAE_POS_FRAC = "qae/pos_frac"
QAE_NEG_FRAC = "qae/neg_frac"
QAE_HARD_FRAC = "qae/hard_frac"
QAE_EASY_FRAC = "qae/easy_frac"
QAE_ALL_EQUAL_FRAC = "qae/all_equal_frac"
QAE_SUCCESS_RATE = "qae/success_rate"
QAE_NEG_CORRECT = "qae/neg_correct"
QAE_NEG_CORRECT_FRAC = "qae/neg_correct_frac"
QAE_NEG_CORRECT_IF_MEAN = "qae/neg_correct_if_mean"  # the same rewards under the mean baseline
BEHAVIOUR_PREFIX = "behaviour/"  # + each key of qae_lab.task.behaviour.behaviour_stats
# dynamic_sampling/*: with dynamic_sampling only, by QAETrainer._dynamic_sampling, once per generation batch
DYNAMIC_SAMPLING_ROUNDS = "dynamic_sampling/rounds"  # generation rounds spent (1: the first held enough)
DYNAMIC_SAMPLING_GENERATIONS = "dynamic_sampling/generations"  # completions generated for the batch
DYNAMIC_SAMPLING_GROUPS_DROPPED = "dynamic_sampling/groups_dropped"  # groups generated without signal
# groups trained without signal anyway: the cap on rounds came first
DYNAMIC_SAMPLING_GROUPS_WITHOUT_SIGNAL = "dynamic_sampling/groups_without_signal"
DYNAMIC_SAMPLING_ZERO_ADV_FRAC = "dynamic_sampling/zero_adv_frac"  # zero advantages in the batch trained
# knobs/token_weighting: every training log row, by QAETrainer.log: the token weighting the row's steps trained with, a
# string ("none", "ah", "sa_ah"; "none+sa_ah" where it changed within a logging window: each in the order first used)
TOKEN_WEIGHTING = "knobs/token_weighting"
# cov/*: with cov_penalty only, by qae_lab.loss.grpo_loss
COV_SELECTED_FRAC = "cov/selected_frac"
COV_TOKEN_COV = "cov/token_cov"
# saah/*: with token weighting only, by qae_lab.loss.grpo_loss
SAAH_ALPHA = "saah/alpha"
SAAH_W_MEAN_NEG = "saah/w_mean_neg"
SAAH_EFFECTIVE_TOKENS_FRAC = "saah/effective_tokens_frac"
# ledger/*: every loss forward, by qae_lab.loss.grpo_loss: the update's first-order entropy change and its parts
LEDGER_PREFIX = "ledger/"  # + each name of LEDGER_PARTS
# entropy/updated_rows, entropy/hard, entropy/easy: every loss forward, by QAETrainer._log_entropy, beside TRL's
# `entropy` (every completion token, also under sparse updates): the rows with A_i != 0 (the rows the update moves);
# `entropy` over the responses of prompts in QAE's hard (p <= 1-K, K in force) / easy regime; and the updated rows'
# by regime
ENTROPY_UPDATED_ROWS = "entropy/updated_rows"
ENTROPY_HARD = "entropy/hard"
ENTROPY_EASY = "entropy/easy"
ENTROPY_UPDATED_HARD = "entropy/updated_rows/hard"
ENTROPY_UPDATED_EASY = "entropy/updated_rows/easy"
# regime_eval/*: every regime_eval_steps steps, by qae_lab.train.regime_eval.RegimeEval: a fixed held-out prompt set,
# grouped once by the start model's success rate (the hardest and the easiest quarter, and all of it)
REGIME_GROUPS = ("hard", "easy", "all")
REGIME_EVAL_PREFIX = "regime_eval/"

# key of qae_lab.advantages.advantage_stats -> the metric that logs it
ADVANTAGE_STAT_METRICS = {
    "zero_adv_frac": QAE_ZERO_ADV_FRAC,
    "pos_frac": QAE_POS_FRAC,
    "neg_frac": QAE_NEG_FRAC,
    "hard_frac": QAE_HARD_FRAC,
    "easy_frac": QAE_EASY_FRAC,
    "all_equal_frac": QAE_ALL_EQUAL_FRAC,
    "success_rate": QAE_SUCCESS_RATE,
    "neg_correct": QAE_NEG_CORRECT,
    "neg_correct_frac": QAE_NEG_CORRECT_FRAC,
}
QAE_METRICS = (QAE_K, QAE_QUANTILE_BASELINE, *ADVANTAGE_STAT_METRICS.values(), QAE_NEG_CORRECT_IF_MEAN)
COV_METRICS = (COV_SELECTED_FRAC, COV_TOKEN_COV)
DYNAMIC_SAMPLING_METRICS = (
    DYNAMIC_SAMPLING_ROUNDS,
    DYNAMIC_SAMPLING_GENERATIONS,
    DYNAMIC_SAMPLING_GROUPS_DROPPED,
    DYNAMIC_SAMPLING_GROUPS_WITHOUT_SIGNAL,
    DYNAMIC_SAMPLING_ZERO_ADV_FRAC,
)
SAAH_METRICS = (SAAH_ALPHA, SAAH_W_MEAN_NEG, SAAH_EFFECTIVE_TOKENS_FRAC)
LEDGER_METRICS = tuple(LEDGER_PREFIX + part for part in LEDGER_PARTS)
# the logged metrics that record the knobs in force at each step
KNOB_METRICS = (QAE_K, QAE_QUANTILE_BASELINE, SAAH_ALPHA, TOKEN_WEIGHTING)
ENTROPY_REGIME_METRICS = (ENTROPY_HARD, ENTROPY_EASY, ENTROPY_UPDATED_HARD, ENTROPY_UPDATED_EASY)


def regime_eval_metric(quantity: str, group: str) -> str:
    r"""The logged name of a held-out regime evaluation's ``quantity`` (``"entropy"``, ``"success"``) for ``group``
    (one of :data:`REGIME_GROUPS`).

    >>> regime_eval_metric("entropy", "hard"), regime_eval_metric("success", "all")
    ('regime_eval/entropy_hard', 'regime_eval/success_all')
    """
    if quantity not in ("entropy", "success") or group not in REGIME_GROUPS:
        raise ValueError(
            f"quantity must be 'entropy' or 'success' and group one of {REGIME_GROUPS}, got {quantity!r}, {group!r}"
        )
    return f"{REGIME_EVAL_PREFIX}{quantity}_{group}"


REGIME_EVAL_METRICS = tuple(regime_eval_metric(q, g) for q in ("entropy", "success") for g in REGIME_GROUPS)

# public: every name and group above (LEDGER_PARTS is qae_lab.methods'), and regime_eval_metric
__all__ = sorted(name for name in globals() if name.isupper() and name != "LEDGER_PARTS") + ["regime_eval_metric"]
