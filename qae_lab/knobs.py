r"""The live knobs: K, alpha, the baseline and the token weighting, checked, and held as one frozen value.

A knob is a setting the trainer reads at every step, so it may change while training runs (docs/glossary.md).
:func:`validate_knobs` checks them wherever they are set; :class:`Knobs` is their value, swapped whole between steps
by ``QAETrainer.set_knobs`` and the live controls, never edited; :func:`knob_changes` reads from a run's log where the
knobs in force changed; :func:`resumed_knobs` decides which knobs a resumed run trains with.
"""

from __future__ import annotations

import dataclasses

from qae_lab._checks import check_choice, check_finite_scalar, check_k
from qae_lab.methods import BASELINES, TOKEN_WEIGHTINGS
from qae_lab.metric_names import KNOB_METRICS

__all__ = [
    "KNOBS",
    "validate_knobs",
    "Knobs",
    "knob_changes",
    "resumed_knobs",
]


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


def resumed_knobs(saved: dict, configured: dict, config: Knobs) -> Knobs:
    r"""The knobs a resumed run trains with, knob by knob: the value in force when its checkpoint was saved, unless
    the resume's config gives that knob another value than the config of the run that saved it did (the resume
    command changed it: that is how "explicitly" is known), then the resume's.

    Args:
        saved: the knobs in force at the checkpoint (:meth:`Knobs.as_dict`, as the checkpoint records them).
        configured: the knobs of the config the saving run was started with (as recorded beside ``saved``).
        config: the knobs of the resumed run's config.

    Returns:
        the :class:`Knobs` to put in force from the first resumed step.

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
