r"""The method vocabulary: a method's parts (a baseline, a token weighting, partners), the rules that combine them, and
the one home of every default of the method's settings (``DEFAULT_*``). It imports no TRL, transformers or torch.

Implementer's notes: docs/implementation.md, section ``qae_lab.methods``.
"""

from __future__ import annotations

from collections.abc import Mapping


__all__ = [
    "BASELINES",
    "QUANTILE_METHODS",
    "TOKEN_WEIGHTINGS",
    "DEFAULT_K",
    "DEFAULT_ALPHA",
    "DEFAULT_BASELINE",
    "DEFAULT_TOKEN_WEIGHTING",
    "DEFAULT_QUANTILE_METHOD",
    "DEFAULT_SCALE",
    "DEFAULT_SUCCESS_THRESHOLD",
    "DEFAULT_COV_PENALTY",
    "DEFAULT_CLIP_COV_RATIO",
    "DEFAULT_KL_COV_RATIO",
    "DEFAULT_CLIP_COV_LB",
    "DEFAULT_CLIP_COV_UB",
    "DEFAULT_KL_COV_COEF",
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
]


BASELINES = ("mean", "quantile")
QUANTILE_METHODS = ("paper", "linear")  # the paper's inverse CDF; the official code's linear interpolation
# the entropy ledger's parts: the total, by sign of A, by regime, and the four cells
LEDGER_PARTS = tuple("dh dh_pos dh_neg dh_hard dh_easy dh_hard_pos dh_hard_neg dh_easy_pos dh_easy_neg".split())
TOKEN_WEIGHTINGS = ("none", "ah", "sa_ah")
# the defaults of the method's settings, each written here once (tests/test_defaults.py)
DEFAULT_K = 0.4  # QAE's K (arXiv 2509.22611, the paper's setting)
DEFAULT_ALPHA = 0.5  # SA-AH's alpha (arXiv 2606.05434, the paper's setting)
DEFAULT_BASELINE = "quantile"  # QAE
DEFAULT_TOKEN_WEIGHTING = "none"
DEFAULT_QUANTILE_METHOD = "paper"  # the paper's inverse CDF
DEFAULT_SCALE = "group"  # of qae_lab.advantages.SCALES: the group's std, TRL's scale_rewards default
DEFAULT_SUCCESS_THRESHOLD = 0.5  # a 0/1 reward's success
# Clip-Cov and KL-Cov's (Cui et al. 2025, arXiv 2505.22617: the paper's settings), off by default
DEFAULT_COV_PENALTY = "none"
DEFAULT_CLIP_COV_RATIO = DEFAULT_KL_COV_RATIO = 2e-4
DEFAULT_CLIP_COV_LB, DEFAULT_CLIP_COV_UB = 1.0, 5.0
DEFAULT_KL_COV_COEF = 1.0
# the loss types qae_lab.loss.grpo_loss reduces (TRL's names)
LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo")
# TRL 1.16's other loss types: QAETrainer hands QAE's advantages to TRL's own loss for them (no token weighting there)
TRL_LOSS_TYPES = ("cispo", "sapo", "vespo", "luspo")
# loss types whose token normaliser can become the effective token count sum(w) (SA-AH)
WEIGHTED_LOSS_TYPES = ("bnpo", "dapo", "grpo")

# baseline and token weighting of each method (QAE arXiv 2509.22611 sec. 2-4; SA-AH-GRPO arXiv 2606.05434)
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

# ---------------------------------------------------------------- rules and names


def can_weight_tokens(loss_type: str) -> bool:
    r"""Whether QAETrainer can apply horizon weights under ``loss_type``: whether its token normaliser can become the
    effective token count sum(w) (arXiv 2606.05434), :data:`WEIGHTED_LOSS_TYPES`.

    >>> can_weight_tokens("bnpo"), can_weight_tokens("dr_grpo")
    (True, False)
    """
    return loss_type in WEIGHTED_LOSS_TYPES


def check_weighting_loss_type(token_weighting: str, loss_type: str) -> str:
    r"""``token_weighting``, refused where it is not ``"none"`` and ``loss_type`` cannot weight tokens: the one
    statement of :func:`can_weight_tokens`' rule, for ``QAEConfig``, ``QAETrainer.set_knobs`` and the live controls.

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

    >>> method_of("quantile", "sa_ah"), method_of("mean", "ah")
    ('qae_sa_ah', 'mean+ah')
    """
    knobs = {"baseline": baseline, "token_weighting": token_weighting}
    return next((name for name, m in METHODS.items() if m == knobs), f"{baseline}+{token_weighting}")


def method_name(config) -> str:
    r"""The method of a trainer configuration (with ``baseline`` and ``token_weighting``) or of a run's ``config.json``
    mapping (whose ``run.method`` wins when set): :func:`method_of`'s name, then ``+partner`` for each of
    :data:`PARTNERS` whose settings it holds.

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
    r"""The trainer settings of a method name: a :data:`METHODS` name's, then each ``+partner``'s (``"qae_sa_ah+gspo"``);
    an unknown name, a partner named twice, or two partners setting one setting differently are refused.

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
    r"""Refuse a method whose :data:`RATIO_PARTNERS` would do nothing: every ratio is 1 unless a generation feeds more
    than one optimizer step.

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
