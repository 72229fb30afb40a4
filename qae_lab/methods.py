r"""The method vocabulary: what a method is made of, its knobs and their one frozen value, and the metric names it logs.

The method vocabulary: what a method is made of, which knobs it has, and the metric names it logs.

One home for the words every layer above the maths shares (the trainer, the presets, the
command line, the live lab, the run comparison, the docs). Pure: it imports no TRL,
transformers or torch of its own, so a notebook or an analysis script can use it anywhere.

* Baselines: :data:`BASELINES` (``mean``: GRPO; ``quantile``: QAE, arXiv 2509.22611) and
  :data:`QUANTILE_METHODS` (:mod:`qae_lab.advantages` checks against them); the entropy
  ledger's parts, :data:`LEDGER_PARTS` (:mod:`qae_lab.ledger` computes them). This module
  imports nothing of qae_lab: it is the lowest floor, below the maths.
* Token weightings: :data:`TOKEN_WEIGHTINGS` (``none``; ``ah``: AH-GRPO, every rollout;
  ``sa_ah``: SA-AH-GRPO, arXiv 2606.05434, negative-advantage rollouts only) and the loss types
  that can apply them, :data:`WEIGHTED_LOSS_TYPES`: :func:`can_weight_tokens` and
  :func:`check_weighting_loss_type` are the one statement of that rule.
* Methods: :data:`METHODS` names each (baseline, token weighting) pair the papers compare;
  :func:`method_of` names a pair and :func:`method_name` a configuration or a run's
  ``config.json``.
* Partners: :data:`PARTNERS` are the token-level and loss-level settings QAE is combined with
  (Clip-Higher, GSPO, Clip-Cov, KL-Cov) and the sign ablations (POS-MASK, NEG-MASK); a method
  with partners is written ``"qae+clip_higher"`` and :func:`method_settings` turns it into
  trainer settings.
* Live knobs: :mod:`qae_lab.methods` (their checks and their one frozen value).
* Metric names: one constant per metric the trainer logs, named after it
  (``"qae/zero_adv_frac"`` is :data:`QAE_ZERO_ADV_FRAC`), grouped in :data:`QAE_METRICS` and
  :data:`SAAH_METRICS`; ``docs/metrics.md`` says what each measures. :data:`KNOB_METRICS` are those
  that record the knobs in force (:func:`qae_lab.methods.knob_changes` reads from a log where they changed).

The former ``knobs`` module: the live knobs: K, alpha, baseline and token weighting, checked, and held as one frozen value.

A knob is a setting the trainer reads at every step, so it may change while training runs
(``docs/glossary.md``). :func:`validate_knobs` checks them wherever they are set;
:class:`Knobs` is their value, swapped whole between steps by ``QAETrainer.set_knobs`` and the
live controls (:class:`qae_lab.lab.live.Controls`), never edited; :func:`knob_changes` reads from
a run's log where the knobs in force changed. Pure: no TRL, transformers or torch of its own.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from qae_lab._checks import check_choice, check_finite_scalar, check_k

__all__ = [
    "BASELINES",
    "QUANTILE_METHODS",
    "TOKEN_WEIGHTINGS",
    "WEIGHTED_LOSS_TYPES",
    "METHODS",
    "PARTNERS",
    "LOSS_TYPES",
    "TRL_LOSS_TYPES",
    "method_settings",
    "RATIO_PARTNERS",
    "check_ratio_partners",
    "can_weight_tokens",
    "check_weighting_loss_type",
    "method_of",
    "method_name",
    "QAE_K",
    "QAE_QUANTILE_BASELINE",
    "QAE_ZERO_ADV_FRAC",
    "QAE_POS_FRAC",
    "QAE_NEG_FRAC",
    "QAE_HARD_FRAC",
    "QAE_EASY_FRAC",
    "QAE_ALL_EQUAL_FRAC",
    "QAE_SUCCESS_RATE",
    "QAE_NEG_CORRECT",
    "QAE_NEG_CORRECT_FRAC",
    "QAE_NEG_CORRECT_IF_MEAN",
    "BEHAVIOUR_PREFIX",
    "COV_SELECTED_FRAC",
    "COV_TOKEN_COV",
    "COV_METRICS",
    "DYNAMIC_SAMPLING_ROUNDS",
    "DYNAMIC_SAMPLING_GENERATIONS",
    "DYNAMIC_SAMPLING_GROUPS_DROPPED",
    "DYNAMIC_SAMPLING_GROUPS_WITHOUT_SIGNAL",
    "DYNAMIC_SAMPLING_ZERO_ADV_FRAC",
    "DYNAMIC_SAMPLING_METRICS",
    "SAAH_ALPHA",
    "SAAH_W_MEAN_NEG",
    "SAAH_EFFECTIVE_TOKENS_FRAC",
    "ADVANTAGE_STAT_METRICS",
    "QAE_METRICS",
    "SAAH_METRICS",
    "LEDGER_PREFIX",
    "LEDGER_METRICS",
    "KNOB_METRICS",
    "ENTROPY_HARD",
    "ENTROPY_EASY",
    "ENTROPY_UPDATED_HARD",
    "ENTROPY_UPDATED_EASY",
    "ENTROPY_REGIME_METRICS",
    "REGIME_GROUPS",
    "REGIME_EVAL_PREFIX",
    "regime_eval_metric",
    "REGIME_EVAL_METRICS",
    "KNOBS",
    "validate_knobs",
    "Knobs",
    "knob_changes",
]


BASELINES = ("mean", "quantile")
QUANTILE_METHODS = ("paper", "linear")  # the paper's inverse CDF; the official code's linear interpolation
# the entropy ledger's parts: the total, by sign of A, by regime, and the four cells
LEDGER_PARTS = (
    "dh",
    "dh_pos",
    "dh_neg",
    "dh_hard",
    "dh_easy",
    "dh_hard_pos",
    "dh_hard_neg",
    "dh_easy_pos",
    "dh_easy_neg",
)
TOKEN_WEIGHTINGS = ("none", "ah", "sa_ah")
# the loss types qae_lab.loss.grpo_loss reduces (TRL's names)
LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo")
# TRL 1.16's other loss types: QAETrainer hands QAE's advantages to TRL's own loss for them (no token weighting there)
TRL_LOSS_TYPES = ("cispo", "sapo", "vespo", "luspo")
# loss types whose token normaliser can become the effective token count sum(w) (SA-AH)
WEIGHTED_LOSS_TYPES = ("bnpo", "dapo", "grpo")

# baseline and token weighting of each method (SPEC sec. 2-4)
METHODS = {
    "mean": {"baseline": "mean", "token_weighting": "none"},  # GRPO
    "qae": {"baseline": "quantile", "token_weighting": "none"},  # QAE, arXiv 2509.22611
    "sa_ah": {"baseline": "mean", "token_weighting": "sa_ah"},  # SA-AH-GRPO, arXiv 2606.05434
    "qae_sa_ah": {"baseline": "quantile", "token_weighting": "sa_ah"},  # both
}

# settings each partner adds to a method ("qae+clip_higher"); see qae_lab.entropy_controls for the token-level maths
PARTNERS = {
    "clip_higher": {"epsilon": 0.2, "epsilon_high": 0.28},  # DAPO's Clip-Higher (Yu et al. 2025)
    # GSPO (Zheng et al. 2025): sequence-level importance ratio, its clipping range, per-sequence loss
    "gspo": {"importance_sampling_level": "sequence", "epsilon": 3e-4, "epsilon_high": 4e-4, "loss_type": "grpo"},
    "clip_cov": {"cov_penalty": "clip_cov"},  # Cui et al. 2025 (arXiv 2505.22617)
    "kl_cov": {"cov_penalty": "kl_cov"},  # Cui et al. 2025 (arXiv 2505.22617)
    "pos_mask": {"advantage_mask": "pos"},  # POS-MASK: only positive-advantage responses train
    "neg_mask": {"advantage_mask": "neg"},  # NEG-MASK: only negative-advantage responses train
    "dynamic_sampling": {"dynamic_sampling": True},  # DAPO's dynamic sampling (Yu et al. 2025, sec. 3.2)
}

# partners that act only through the importance ratio r = pi_theta / pi_old: on a generation's single on-policy pass
# r = 1 on every token, so Clip-Higher's wider range clips nothing and GSPO's sequence ratio reduces to loss_type="grpo"
RATIO_PARTNERS = ("clip_higher", "gspo")

# ---------------------------------------------------------------- metric names (docs/metrics.md)

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
DYNAMIC_SAMPLING_GROUPS_WITHOUT_SIGNAL = (
    "dynamic_sampling/groups_without_signal"  # trained anyway: the cap on rounds came first
)
DYNAMIC_SAMPLING_ZERO_ADV_FRAC = "dynamic_sampling/zero_adv_frac"  # zero advantages in the batch trained
# cov/*: with cov_penalty only, by qae_lab.loss.grpo_loss
COV_SELECTED_FRAC = "cov/selected_frac"
COV_TOKEN_COV = "cov/token_cov"
# saah/*: with token weighting only, by qae_lab.loss.grpo_loss
SAAH_ALPHA = "saah/alpha"
SAAH_W_MEAN_NEG = "saah/w_mean_neg"
SAAH_EFFECTIVE_TOKENS_FRAC = "saah/effective_tokens_frac"
# ledger/*: every loss forward, by qae_lab.loss.grpo_loss: the update's first-order entropy change and its parts
LEDGER_PREFIX = "ledger/"  # + each name of LEDGER_PARTS
# entropy/hard, entropy/easy: every loss forward, by QAETrainer._log_loss: TRL's `entropy` over the responses of
# prompts in QAE's hard (p <= 1-K, K in force) / easy regime; with sparse updates leaving rows out, the updated
# rows' only, under entropy/updated_rows/hard and entropy/updated_rows/easy (as `entropy/updated_rows`)
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
KNOB_METRICS = (QAE_K, QAE_QUANTILE_BASELINE, SAAH_ALPHA)
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


# ---------------------------------------------------------------- rules and names


def can_weight_tokens(loss_type: str) -> bool:
    r"""Whether QAETrainer can apply horizon weights under TRL's ``loss_type``.

    The weighted loss divides by the effective token count sum(w) (arXiv 2606.05434); the trainer
    rescales the loss type's own token normaliser into it, which it can do for
    :data:`WEIGHTED_LOSS_TYPES` only.

    Args:
        loss_type: a TRL ``GRPOConfig.loss_type`` (``"bnpo"``, ``"grpo"``, ``"dr_grpo"``, ...).

    >>> can_weight_tokens("bnpo"), can_weight_tokens("dr_grpo")
    (True, False)
    """
    return loss_type in WEIGHTED_LOSS_TYPES


def check_weighting_loss_type(token_weighting: str, loss_type: str) -> str:
    r"""Refuse a token weighting other than ``"none"`` under a loss type that cannot weight tokens.

    The one statement of the rule (:func:`can_weight_tokens`) that ``QAEConfig``,
    ``QAETrainer.set_knobs`` and the live controls apply.

    Args:
        token_weighting: one of :data:`TOKEN_WEIGHTINGS`.
        loss_type: TRL's ``loss_type`` of the trainer.

    Returns:
        ``token_weighting``, unchanged.

    Raises:
        ValueError: naming both and the allowed loss types.

    >>> check_weighting_loss_type("sa_ah", "dapo"), check_weighting_loss_type("none", "dr_grpo")
    ('sa_ah', 'none')
    >>> check_weighting_loss_type("ah", "dr_grpo")
    Traceback (most recent call last):
    ...
    ValueError: token_weighting='ah' needs loss_type in ('bnpo', 'dapo', 'grpo'), got 'dr_grpo'
    """
    if token_weighting != "none" and not can_weight_tokens(loss_type):
        raise ValueError(
            f"token_weighting={token_weighting!r} needs loss_type in {WEIGHTED_LOSS_TYPES}, got {loss_type!r}"
        )
    return token_weighting


def method_of(baseline: str, token_weighting: str) -> str:
    r"""The :data:`METHODS` name of a baseline and token weighting, else ``"<baseline>+<token_weighting>"``.

    Args:
        baseline: one of :data:`BASELINES`.
        token_weighting: one of :data:`TOKEN_WEIGHTINGS`.

    >>> method_of("quantile", "sa_ah"), method_of("mean", "ah")
    ('qae_sa_ah', 'mean+ah')
    """
    knobs = {"baseline": baseline, "token_weighting": token_weighting}
    return next((name for name, m in METHODS.items() if m == knobs), f"{baseline}+{token_weighting}")


def method_name(config) -> str:
    r"""The method of a trainer configuration or of a run's ``config.json``.

    Args:
        config: an object with ``baseline`` and ``token_weighting`` attributes (a
            :class:`~qae_lab.train.config.QAEConfig`), or a run's ``config.json`` as a mapping
            ``{"run": {"method": ...}, "trainer": {"baseline": ..., "token_weighting": ...}}``,
            whose ``run.method`` wins when set (the name the run recorded).

    Returns:
        the :data:`METHODS` name, else ``"<baseline>+<token_weighting>"`` (:func:`method_of`), followed
        by ``+partner`` for each of :data:`PARTNERS` whose settings the configuration holds.

    Raises:
        ValueError: a mapping with neither ``run.method`` nor both trainer fields.
        TypeError: an object without ``baseline`` and ``token_weighting``.

    >>> method_name({"run": {}, "trainer": {"baseline": "quantile", "token_weighting": "sa_ah"}})
    'qae_sa_ah'
    >>> method_name({"run": {"method": "sa_ah"}, "trainer": {}})
    'sa_ah'
    >>> from types import SimpleNamespace
    >>> method_name(SimpleNamespace(baseline="mean", token_weighting="ah"))
    'mean+ah'
    >>> method_name({"run": {}, "trainer": {"baseline": "quantile", "token_weighting": "none", "epsilon": 0.2,
    ...                                     "epsilon_high": 0.28, "cov_penalty": "kl_cov"}})
    'qae+clip_higher+kl_cov'
    """
    if isinstance(config, Mapping):
        method = (config.get("run") or {}).get("method")
        if method:
            return str(method)
        trainer = config.get("trainer") or {}
        if "baseline" not in trainer or "token_weighting" not in trainer:
            raise ValueError("config must hold run.method or trainer.baseline and trainer.token_weighting")
        return _with_partners(method_of(trainer["baseline"], trainer["token_weighting"]), trainer.get)
    if not (hasattr(config, "baseline") and hasattr(config, "token_weighting")):
        raise TypeError(
            f"config must be a config.json mapping or have baseline and token_weighting attributes, "
            f"got {type(config).__name__}"
        )
    return _with_partners(method_of(config.baseline, config.token_weighting), lambda k: getattr(config, k, None))


def _with_partners(base: str, get) -> str:
    """``base`` plus ``+partner`` for each of :data:`PARTNERS` whose every setting ``get`` returns."""
    found = [name for name, settings in PARTNERS.items() if all(get(k) == v for k, v in settings.items())]
    return "+".join([base, *found])


def method_settings(method: str) -> dict:
    r"""The trainer settings of a method name: a :data:`METHODS` name, optionally with ``+partner``s.

    Args:
        method: e.g. ``"qae"``, ``"mean+clip_higher"``, ``"qae_sa_ah+gspo"``, ``"qae+clip_higher+kl_cov"``.

    Returns:
        ``{setting: value}``: the method's baseline and token weighting, then each partner's settings.

    Raises:
        ValueError: an unknown method or partner, a partner named twice, or two partners that set
            one setting to different values (``gspo`` and ``clip_higher`` both set the clip range).

    >>> method_settings("qae+clip_higher")
    {'baseline': 'quantile', 'token_weighting': 'none', 'epsilon': 0.2, 'epsilon_high': 0.28}
    >>> method_settings("mean+pos_mask+neg_mask")
    Traceback (most recent call last):
    ...
    ValueError: method 'mean+pos_mask+neg_mask': pos_mask and neg_mask both set advantage_mask; use one
    """
    if not isinstance(method, str):
        raise ValueError(f"method must be a string such as 'qae+clip_higher', got {method!r}")
    base, *partners = method.split("+")
    if base not in METHODS:
        raise ValueError(
            f"unknown method {base!r} in {method!r}; methods: {sorted(METHODS)}, "
            f"each optionally followed by +partner from {sorted(PARTNERS)}"
        )
    out, owner = dict(METHODS[base]), {}
    for partner in partners:
        if partner not in PARTNERS:
            raise ValueError(f"unknown partner {partner!r} in method {method!r}; partners: {sorted(PARTNERS)}")
        if partner in owner.values():
            raise ValueError(f"method {method!r} names {partner!r} twice")
        for key, value in PARTNERS[partner].items():
            if key in owner and out[key] != value:
                raise ValueError(f"method {method!r}: {owner[key]} and {partner} both set {key}; use one")
            out[key], owner[key] = value, partner
    return out


def check_ratio_partners(
    method: str, num_iterations: int, steps_per_generation: int, gradient_accumulation_steps: int
) -> None:
    r"""Refuse a method whose :data:`RATIO_PARTNERS` would do nothing: every ratio is 1 on a single on-policy pass.

    The ratio leaves 1 only when a generation feeds more than one optimizer step: ``num_iterations`` >= 2
    (several passes over each generation) or ``steps_per_generation`` > ``gradient_accumulation_steps``
    (a generation split over several optimizer steps).

    >>> check_ratio_partners("qae+clip_higher", 2, 1, 1)   # two passes: the clip range matters
    >>> check_ratio_partners("qae+clip_higher", 1, 1, 1)
    Traceback (most recent call last):
    ...
    ValueError: method 'qae+clip_higher': clip_higher acts only through the importance ratio pi_theta / pi_old, which is 1 on every token when each generation feeds a single optimizer step (num_iterations=1, steps_per_generation=1 = gradient_accumulation_steps=1), so it would change nothing: set num_iterations >= 2, or steps_per_generation above gradient_accumulation_steps
    """
    inert = [p for p in method.split("+")[1:] if p in RATIO_PARTNERS]
    if inert and num_iterations == 1 and steps_per_generation <= gradient_accumulation_steps:
        raise ValueError(
            f"method {method!r}: {' and '.join(inert)} acts only through the importance ratio "
            f"pi_theta / pi_old, which is 1 on every token when each generation feeds a single optimizer "
            f"step (num_iterations={num_iterations}, steps_per_generation={steps_per_generation} = "
            f"gradient_accumulation_steps={gradient_accumulation_steps}), so it would change nothing: "
            f"set num_iterations >= 2, or steps_per_generation above gradient_accumulation_steps"
        )


# the live knobs: read by QAETrainer at every step, set with QAETrainer.set_knobs
KNOBS = ("quantile_k", "alpha", "baseline", "token_weighting")


def validate_knobs(**knobs) -> dict:
    r"""The live knobs checked and cleaned.

    Args:
        **knobs: any of :data:`KNOBS`: ``quantile_k`` (in (0, 1)), ``alpha`` (finite),
            ``baseline`` (:data:`BASELINES`), ``token_weighting`` (:data:`TOKEN_WEIGHTINGS`).

    Returns:
        the same keys with their checked values (numbers as floats).

    Raises:
        ValueError: an unknown knob, or a value out of its range, named.

    >>> validate_knobs(quantile_k=0.6, baseline="mean")
    {'quantile_k': 0.6, 'baseline': 'mean'}
    >>> validate_knobs(K=0.6)
    Traceback (most recent call last):
    ...
    ValueError: unknown knob(s) ['K']; allowed: ['alpha', 'baseline', 'quantile_k', 'token_weighting']
    """
    checks = {
        "quantile_k": lambda v: check_k(v, "quantile_k"),
        "alpha": lambda v: check_finite_scalar(v, "alpha"),
        "baseline": lambda v: check_choice(v, "baseline", BASELINES),
        "token_weighting": lambda v: check_choice(v, "token_weighting", TOKEN_WEIGHTINGS),
    }
    unknown = set(knobs) - set(checks)
    if unknown:
        raise ValueError(f"unknown knob(s) {sorted(unknown)}; allowed: {sorted(checks)}")
    return {name: checks[name](value) for name, value in knobs.items()}


@dataclasses.dataclass(frozen=True)
class Knobs:
    r"""The live knobs' values, one frozen value: K, alpha, baseline, token weighting (validated).

    A change is a new value (:meth:`replace`), handed over as a whole: the trainer
    (``QAETrainer.set_knobs``) and the live controls (:class:`qae_lab.lab.live.Controls`) swap
    one reference, so a step reads either the old knobs or the new ones, never a mix.

    >>> k = Knobs(quantile_k=0.4)
    >>> k.replace(alpha=1.5).as_dict()
    {'quantile_k': 0.4, 'alpha': 1.5, 'baseline': 'quantile', 'token_weighting': 'none'}
    >>> k.replace(quantile_k=1.0)
    Traceback (most recent call last):
    ValueError: quantile_k must lie in the open interval (0, 1), got 1.0
    """

    quantile_k: float = 0.4
    alpha: float = 0.5
    baseline: str = "quantile"
    token_weighting: str = "none"

    def __post_init__(self):
        for name, value in validate_knobs(**self.as_dict()).items():
            object.__setattr__(self, name, value)  # numbers as floats

    def replace(self, **changes) -> Knobs:
        """A new value with ``changes`` (any of :data:`KNOBS`, validated; unknown names refused)."""
        return dataclasses.replace(self, **validate_knobs(**changes))

    def as_dict(self) -> dict:
        return {name: getattr(self, name) for name in KNOBS}


def knob_changes(rows) -> list[dict]:
    r"""The log rows where the knobs in force (:data:`KNOB_METRICS`) changed: the first step's values,
    then one entry per step whose values differ from the step before. ``saah/alpha`` is None on
    steps without token weighting.

    Args:
        rows: training-step log rows (:func:`qae_lab.storage.folder.step_rows`), in step order.

    Returns:
        one dict per change: ``step`` and the value of each of :data:`KNOB_METRICS` (None where unlogged).

    Raises:
        ValueError: a row without a ``step``.

    >>> rows = [{"step": 1, "qae/k": 0.4}, {"step": 2, "qae/k": 0.4}, {"step": 3, "qae/k": 0.7}]
    >>> [(c["step"], c["qae/k"], c["saah/alpha"]) for c in knob_changes(rows)]
    [(1, 0.4, None), (3, 0.7, None)]
    """
    changes, last = [], None
    for row in rows:
        if "step" not in row:
            raise ValueError(f"rows must be log rows with a 'step', got keys {sorted(row)}")
        now = tuple(row.get(m) for m in KNOB_METRICS)
        if now != last:
            changes.append({"step": row["step"], **dict(zip(KNOB_METRICS, now))})
            last = now
    return changes
