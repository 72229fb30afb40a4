r"""The live controls: the knobs as widgets, and their value as one frozen :class:`~qae_lab.knobs.Knobs`.

:class:`Controls` holds K, alpha, baseline (mean | quantile), token weighting (none | ah | sa_ah)
and a Stop button. A widget callback (the kernel thread) builds a new frozen value and swaps it in
as one reference; the training thread reads that reference (:meth:`Controls.snapshot`), so K and
alpha never come from two different moments (no torn reads) and no lock is needed.
:class:`~qae_lab.callbacks.LiveKnobs` hands the value to the trainer at every step;
:class:`~qae_lab.live.LiveRun` wires the two to a running trainer.

K and alpha are :class:`KnobSlider` widgets: a slider shows exactly the value the trainer gets
(no silent clamping, no snapping to a coarser step than the value needs). The knobs' names and
checks are :mod:`qae_lab.knobs`'s (:func:`~qae_lab.knobs.validate_knobs`).
"""

from __future__ import annotations

import threading

import ipywidgets as widgets
from traitlets import TraitError, validate

from qae_lab.knobs import Knobs, validate_knobs
from qae_lab.methods import TOKEN_WEIGHTINGS, can_weight_tokens

__all__ = ["K_RANGE", "ALPHA_RANGE", "KnobSlider", "Controls"]

_WEIGHTING_LABELS = {"none": "none", "ah": "AH", "sa_ah": "SA-AH"}
TOKEN_WEIGHTING_OPTIONS = tuple((_WEIGHTING_LABELS[w], w) for w in TOKEN_WEIGHTINGS)  # (label, value)
# the K and alpha sliders' ranges, widened to take in a start value outside them
K_RANGE, ALPHA_RANGE = (0.05, 0.95), (-0.5, 2.0)


def _decimals(x: float) -> int:
    """Digits after the point of ``x`` written with 6 decimals (0.99 -> 2, 3.0 -> 0)."""
    return len(f"{x:.6f}".rstrip("0").split(".")[1])


def _grid_step(*values: float) -> float:
    """The coarsest step of 0.05, 0.01, 0.001, ... whose grid holds every one of ``values``.

    >>> _grid_step(0.4, 0.05, 0.95), _grid_step(0.99, 0.05, 0.99), _grid_step(0.123, 0.05, 0.95)
    (0.05, 0.01, 0.001)
    """
    if all(abs(v * 20 - round(v * 20)) < 1e-9 for v in values):
        return 0.05
    return 10.0 ** -max(2, *(_decimals(v) for v in values))


class KnobSlider(widgets.FloatSlider):
    r"""A ``FloatSlider`` for one live knob that shows exactly the value the trainer gets.

    A plain ``FloatSlider`` clamps a value outside [min, max] silently, and its frontend snaps the
    handle and the readout to ``min + n * step``: either way it can show another number than the
    one the trainer uses. This one

    * widens its range to take in the start value (validated by :func:`~qae_lab.knobs.validate_knobs`);
    * refuses, with a ``TraitError`` naming the knob and the range, a value outside the range or
      invalid for the knob, and a min or max that would move the value;
    * rounds values to 6 decimals (a browser's float noise, 0.30000000000000004) and keeps its step
      and readout fine enough for the value to sit on the step grid (0.123: step 0.001).

    It overrides the validators of ipywidgets' ``_BoundedFloat`` (``_validate_value``,
    ``_validate_min``, ``_validate_max``: the same names in ipywidgets 7.7, Colab's, and 8).

    Args:
        knob: ``"quantile_k"`` or ``"alpha"``.
        value: the start value.
        lo, hi: the range to show, widened to take in ``value``.
        **kwargs: further ``FloatSlider`` options (description, style, ...).

    >>> s = KnobSlider("quantile_k", 0.99, *K_RANGE, description="K")   # K_RANGE is (0.05, 0.95)
    >>> s.value, (s.min, s.max), s.step, s.readout_format
    (0.99, (0.05, 0.99), 0.01, '.2f')
    >>> s.value = 1.5
    Traceback (most recent call last):
    ...
    traitlets.traitlets.TraitError: quantile_k must be in [0.05, 0.99] (the range of the slider 'K'), got 1.5
    """

    def __init__(self, knob: str, value: float, lo: float, hi: float, **kwargs):
        self.knob = knob  # read by the validators, which run inside super().__init__
        value = round(validate_knobs(**{knob: value})[knob], 6)
        lo, hi = min(lo, value), max(hi, value)
        step = _grid_step(value, lo, hi)
        super().__init__(value=value, min=lo, max=hi, step=step, readout_format=f".{_decimals(step)}f", **kwargs)

    def check(self, value) -> float:
        """``value`` as the slider would hold it; ``ValueError`` naming the knob where it cannot."""
        value = round(float(value), 6)
        if not self.min <= value <= self.max:
            raise ValueError(f"{self.knob} must be in [{self.min}, {self.max}] (the range of the slider "
                             f"{self.description!r}), got {value}")
        return validate_knobs(**{self.knob: value})[self.knob]

    def _fit_grid(self, value: float, lo: float, hi: float) -> None:
        # the frontend shows lo + n * step nearest to value: refine the step (and readout) until value is on it
        n = (value - lo) / self.step
        if abs(n - round(n)) > 1e-6:
            self.step = _grid_step(value, lo, hi)
            self.readout_format = f".{_decimals(self.step)}f"

    @validate("value")
    def _validate_value(self, proposal):  # replaces ipywidgets' clamping
        try:
            value = self.check(proposal["value"])
        except ValueError as err:
            raise TraitError(str(err)) from None
        self._fit_grid(value, self.min, self.max)
        return value

    @validate("min")
    def _validate_min(self, proposal):  # replaces ipywidgets' moving the value up to the new min
        lo = proposal["value"]
        if lo > self.value:
            raise TraitError(f"{self.knob}: min {lo} would move the value {self.value} of the slider "
                             f"{self.description!r}; set the value first")
        self._fit_grid(self.value, lo, self.max)
        return lo

    @validate("max")
    def _validate_max(self, proposal):  # replaces ipywidgets' moving the value down to the new max
        hi = proposal["value"]
        if hi < self.value:
            raise TraitError(f"{self.knob}: max {hi} would move the value {self.value} of the slider "
                             f"{self.description!r}; set the value first")
        return hi


class Controls:
    r"""The knobs as widgets, and their value as one frozen :class:`~qae_lab.knobs.Knobs`.

    Args:
        quantile_k, alpha, baseline, token_weighting: starting values (validated as in
            :class:`~qae_lab.config.QAEConfig`); the K and alpha sliders span :data:`K_RANGE` and
            :data:`ALPHA_RANGE`, widened to take in their start value.

    Attributes: ``k``, ``alpha`` (:class:`KnobSlider`), ``baseline``, ``token_weighting`` (the value
    widgets), ``stop_button``, ``widget`` (the box to display), ``changes``: every change the kernel
    received, as ``(step, knob, value)`` where ``step`` is the step whose knobs were already fixed
    when it arrived (:meth:`begin_step`; 0 before the first): the change applies from ``step + 1``.

    >>> c = Controls(quantile_k=0.4, alpha=0.5)
    >>> c.k.value = 0.7                      # what a slider move does
    >>> c.snapshot().quantile_k, c.stop_requested
    (0.7, False)
    >>> c.begin_step(3).quantile_k           # step 3 starts with K = 0.7 ...
    0.7
    >>> c.k.value = 0.5; c.changes           # ... a move while it runs applies from step 4
    [(0, 'quantile_k', 0.7), (3, 'quantile_k', 0.5)]
    >>> c = Controls(quantile_k=0.99, alpha=3.0)
    >>> (c.k.value, c.alpha.value) == (c.snapshot().quantile_k, c.snapshot().alpha) == (0.99, 3.0)
    True
    """

    def __init__(self, quantile_k: float = 0.4, alpha: float = 0.5, baseline: str = "quantile",
                 token_weighting: str = "none"):
        self._stop = threading.Event()
        self._finished = False
        clean = validate_knobs(quantile_k=quantile_k, alpha=alpha, baseline=baseline, token_weighting=token_weighting)
        style = {"description_width": "110px"}
        self.k = KnobSlider("quantile_k", clean["quantile_k"], *K_RANGE, description="K (QAE)",
                            continuous_update=False, style=style)
        self.alpha = KnobSlider("alpha", clean["alpha"], *ALPHA_RANGE, description="alpha (SA-AH)",
                                continuous_update=False, style=style)
        # (version, value): swapped whole by the kernel thread, read whole by the training thread
        self._current = (0, Knobs(**{**clean, "quantile_k": self.k.value, "alpha": self.alpha.value}))
        self._received: list[tuple[int, str, object]] = []  # (version it made, knob, value)
        self._begun: list[tuple[int, int]] = []  # (step, version it took)
        self.baseline = widgets.ToggleButtons(options=[("mean (GRPO)", "mean"), ("K-quantile (QAE)", "quantile")],
                                              value=baseline, description="baseline", style=style)
        self.token_weighting = widgets.ToggleButtons(options=list(TOKEN_WEIGHTING_OPTIONS), value=token_weighting,
                                                     description="token weighting", style=style)
        self.stop_button = widgets.Button(description="Stop", button_style="danger", icon="stop",
                                          tooltip="end training after the current step (log and checkpoint kept)")
        for name, w in (("quantile_k", self.k), ("alpha", self.alpha), ("baseline", self.baseline),
                        ("token_weighting", self.token_weighting)):
            w.observe(lambda change, name=name: self._set(name, change["new"]), names="value")
        self.stop_button.on_click(lambda _button: self.request_stop())
        self.widget = widgets.VBox([widgets.HBox([self.k, self.alpha]), self.baseline, self.token_weighting,
                                    self.stop_button])

    @classmethod
    def for_trainer(cls, trainer) -> Controls:
        """Controls starting at the trainer's current knobs; token weighting is locked where the
        trainer's loss type cannot weight tokens."""
        controls = cls(**trainer.knobs.as_dict())
        if not can_weight_tokens(trainer.loss_type):
            controls.token_weighting.disabled = True
        return controls

    def _set(self, name: str, value) -> None:
        # the widget callback (kernel thread, one at a time): a new value, swapped in as one reference
        version, knobs = self._current
        self._current = (version + 1, knobs.replace(**{name: value}))
        self._received.append((version + 1, name, value))

    @property
    def changes(self) -> list[tuple[int, str, object]]:
        """Every change received, as ``(step, knob, value)``: ``step`` is the last step that had already
        taken its knobs (:meth:`begin_step`) when the change arrived, 0 before the first; the change is
        in force from ``step + 1``."""
        begun = list(self._begun)
        return [(max((s for s, v in begun if v < version), default=0), name, value)
                for version, name, value in list(self._received)]

    def set(self, **values) -> None:
        """Move several controls at once, as one change: no snapshot sees some moved and others not.

        Keys: quantile_k, alpha, baseline, token_weighting (validated)."""
        clean = validate_knobs(**values)
        boxes = {"quantile_k": self.k, "alpha": self.alpha, "baseline": self.baseline,
                 "token_weighting": self.token_weighting}
        for name in ("quantile_k", "alpha"):  # checked before any control moves
            if name in clean:
                clean[name] = boxes[name].check(clean[name])
        version, knobs = self._current
        self._current = (version, knobs.replace(**clean))  # one swap: no snapshot sees some moved and others not
        for name, value in clean.items():
            boxes[name].value = value  # its observer records the change (the value is already in force)

    def snapshot(self) -> Knobs:
        """The four knob values, one frozen :class:`~qae_lab.knobs.Knobs`."""
        return self._current[1]

    def begin_step(self, step: int) -> Knobs:
        """The knobs for ``step`` (a :meth:`snapshot`), remembered with the version taken, so that
        :attr:`changes` can say from which step each change is in force."""
        version, knobs = self._current
        self._begun.append((int(step), version))
        return knobs

    def finish(self, failed: bool = False) -> None:
        """Training has ended: the Stop button is disabled and says how ("Stopped" after Stop, "Failed",
        "Finished"), instead of "Stopping..." or a live "Stop"."""
        self._finished = True
        self.stop_button.disabled = True
        self.stop_button.description = "Failed" if failed else "Stopped" if self.stop_requested else "Finished"

    def request_stop(self) -> None:
        """Ask the run to end after the current step (after :meth:`finish`: nothing left to stop)."""
        if self._finished:
            return
        self._stop.set()
        self.stop_button.disabled, self.stop_button.description = True, "Stopping..."

    @property
    def stop_requested(self) -> bool:
        return self._stop.is_set()
