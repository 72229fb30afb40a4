r"""The live knobs: K, alpha, the baseline and the token weighting, checked, and held as one frozen value.

A knob is a setting the trainer reads at every step, so it may change while training runs (docs/glossary.md).
:class:`Knobs`' fields say each knob's meaning (``QAEConfig``'s are :func:`knob_field` copies), :func:`validate_knobs`
its range, :mod:`qae_lab.methods`' ``DEFAULT_*`` its default; :class:`Knobs` is their value, swapped whole between
steps, never edited.
"""

from __future__ import annotations

import dataclasses
from dataclasses import field

from qae_lab._checks import check_choice, check_finite_scalar, check_k
from qae_lab.methods import (
    BASELINES,
    DEFAULT_ALPHA,
    DEFAULT_BASELINE,
    DEFAULT_K,
    DEFAULT_TOKEN_WEIGHTING,
    TOKEN_WEIGHTINGS,
)
from qae_lab.metric_names import KNOB_METRICS

__all__ = ["KNOBS", "validate_knobs", "help_field", "Knobs", "knob_field", "knob_changes", "resumed_knobs"]


# the live knobs: read by QAETrainer at every step, set with QAETrainer.set_knobs
KNOBS = ("quantile_k", "alpha", "baseline", "token_weighting")


def validate_knobs(**knobs) -> dict:
    r"""Any of :data:`KNOBS`, checked (numbers as floats); an unknown knob or a value out of its range is refused.

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


def help_field(help: str, **kw):
    """A dataclass field with ``help``: what ``--help`` prints (transformers' parser reads ``metadata["help"]``).

    >>> help_field("K", default=0.4).metadata["help"]
    'K'
    """
    return field(metadata={"help": help}, **kw)


@dataclasses.dataclass(frozen=True)
class Knobs:
    r"""The live knobs' values, validated. A change is a new value (:meth:`replace`): ``QAETrainer.set_knobs`` and the
    live controls swap one reference, so a step reads either the old knobs or the new ones, never a mix.

    >>> k = Knobs(quantile_k=0.4)
    >>> k.replace(alpha=1.5).as_dict()
    {'quantile_k': 0.4, 'alpha': 1.5, 'baseline': 'quantile', 'token_weighting': 'none'}
    >>> k.replace(quantile_k=1.0)
    Traceback (most recent call last):
    ValueError: quantile_k must lie in the open interval (0, 1), got 1.0
    """

    quantile_k: float = help_field(
        "QAE's K in (0, 1), paper 0.4: prompts with success rate p <= 1-K are 'hard'.", default=DEFAULT_K
    )
    alpha: float = help_field(
        "SA-AH's alpha in w_t = exp(-alpha * cumulative normalised entropy); 0 is plain GRPO, the paper uses 0.5.",
        default=DEFAULT_ALPHA,
    )
    baseline: str = help_field(
        "'mean' (GRPO) or 'quantile' (QAE, arXiv 2509.22611: the group's K-quantile).", default=DEFAULT_BASELINE
    )
    token_weighting: str = help_field(
        "'none', 'ah' (AH-GRPO: every rollout) or 'sa_ah' (SA-AH-GRPO, arXiv 2606.05434: negative-advantage rollouts "
        "only).",
        default=DEFAULT_TOKEN_WEIGHTING,
    )

    def __post_init__(self):
        for name, value in validate_knobs(**self.as_dict()).items():
            object.__setattr__(self, name, value)  # numbers as floats

    def replace(self, **changes) -> Knobs:
        """A new value with ``changes`` (any of :data:`KNOBS`, validated; unknown names refused)."""
        return dataclasses.replace(self, **validate_knobs(**changes))

    def as_dict(self) -> dict:
        return {name: getattr(self, name) for name in KNOBS}


def knob_field(name: str):
    """A dataclass field with knob ``name``'s default and help, for a config that holds it (``QAEConfig``).

    >>> knob_field("quantile_k").default
    0.4
    """
    return field(default=getattr(Knobs, name), metadata=Knobs.__dataclass_fields__[name].metadata)


def knob_changes(rows) -> list[dict]:
    r"""``{"step", each of :data:`KNOB_METRICS`}`` for the first log row (in step order), then for each whose knobs in
    force differ from the row before's (None where unlogged: ``saah/alpha`` without token weighting).

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


def resumed_knobs(saved: dict, configured: dict, config: Knobs) -> Knobs:
    r"""The knobs a resumed run trains with, knob by knob: ``saved`` (in force at the checkpoint), unless the resume's
    ``config`` gives that knob another value than ``configured`` (the saving run's config's), then the resume's.

    >>> launched = Knobs(quantile_k=0.4).as_dict()
    >>> live = Knobs(quantile_k=0.8, token_weighting="sa_ah").as_dict()       # set while the run trained
    >>> resumed_knobs(live, launched, Knobs(quantile_k=0.4))                   # resumed with the same config
    Knobs(quantile_k=0.8, alpha=0.5, baseline='quantile', token_weighting='sa_ah')
    >>> resumed_knobs(live, launched, Knobs(quantile_k=0.6))                   # the resume names a new K
    Knobs(quantile_k=0.6, alpha=0.5, baseline='quantile', token_weighting='sa_ah')
    """
    now = config.as_dict()
    return Knobs(
        **{
            name: now[name] if name not in saved or now[name] != configured.get(name, now[name]) else saved[name]
            for name in KNOBS
        }
    )
