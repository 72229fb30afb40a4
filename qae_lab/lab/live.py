r"""The live lab: a trainer run in a background thread, its knobs as widgets handed to it at every step, and a
dashboard a participant reads while it trains.

Why a thread: a notebook kernel handles widget events only between cells, so a cell that runs
``trainer.train()`` would leave every slider dead until training ends. :meth:`LiveRun.start`
returns at once; the training loop runs in a daemon thread and reads the controls at every step.

Implementer's notes: docs/implementation.md, section ``qae_lab.lab.live``.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
import traceback
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import ipywidgets as widgets
import torch
from IPython.display import display
from traitlets import TraitError, validate
from transformers import TrainerCallback
from transformers.trainer_callback import PrinterCallback, ProgressCallback
from transformers.utils.notebook import NotebookProgressCallback

from qae_lab._checks import check_finite_scalar, check_positive
from qae_lab.lab.panels import run_curves_figure
from qae_lab.lab.widgets import FigureView
from qae_lab.labels import BASELINE_NAMES, LIVE_PANELS, REWARD_PANEL, SHARES_PANEL, WEIGHTING_NAMES, WEIGHTS_PANEL
from qae_lab.methods import DEFAULT_ALPHA, DEFAULT_BASELINE, DEFAULT_K, DEFAULT_TOKEN_WEIGHTING, TOKEN_WEIGHTINGS
from qae_lab.methods import can_weight_tokens
from qae_lab.metric_names import QAE_K, QAE_QUANTILE_BASELINE, QAE_SUCCESS_RATE, SAAH_ALPHA, TOKEN_WEIGHTING
from qae_lab.knobs import KNOBS, Knobs, validate_knobs
from qae_lab.runs.presets import device_preset
from qae_lab.storage.folder import LOG_NAME, read_log_lines, step_rows
from qae_lab.train.callbacks import TrainOutcome, pending_plan, run_logger, steps_asked

__all__ = [
    "LIVE_PANELS",
    "Dashboard",
    "DashboardFeed",
    "LiveRun",
    "auto_preset",
    "K_RANGE",
    "ALPHA_RANGE",
    "KnobSlider",
    "Controls",
    "LiveKnobs",
    "inactive_knobs",
    "KNOB_COLUMNS",
    "knob_number",
    "knobs_row",
    "knob_ranges",
    "knob_changes_table",
    "knob_title",
    "knobs_html",
    "panel_notes",
    "live_panels",
]


TOKEN_WEIGHTING_OPTIONS = tuple((WEIGHTING_NAMES[w], w) for w in TOKEN_WEIGHTINGS)  # (label, value)
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


def inactive_knobs(knobs: Knobs) -> dict[str, str]:
    r"""The knobs that change no update under ``knobs``' other settings, each with why: alpha without token weighting,
    K under the mean baseline (there it only sorts the logged prompts into hard and easy).

    >>> inactive_knobs(Knobs(baseline="mean"))["alpha"]
    'alpha does nothing while token weighting is none: choose AH or SA-AH to use it'
    >>> inactive_knobs(Knobs(baseline="mean"))["quantile_k"]
    'K does not change the update while the baseline is the mean (GRPO): choose K-quantile (QAE) to use it'
    >>> inactive_knobs(Knobs(token_weighting="sa_ah"))
    {}
    """
    why = {}
    if knobs.baseline == "mean":
        why["quantile_k"] = (
            f"K does not change the update while the baseline is the {BASELINE_NAMES['mean']}: "
            f"choose {BASELINE_NAMES['quantile']} to use it"
        )
    if knobs.token_weighting == "none":
        why["alpha"] = "alpha does nothing while token weighting is none: choose AH or SA-AH to use it"
    return why


def _set_tooltip(widget, text: str) -> None:
    """Set the hover text: ``tooltip`` in ipywidgets 8, ``description_tooltip`` in 7.7."""
    if widget.has_trait("tooltip"):
        widget.tooltip = text or None
    else:
        widget.description_tooltip = text or None


class KnobSlider(widgets.FloatSlider):
    r"""A ``FloatSlider`` for one live knob that shows exactly the value the trainer gets.

    A plain ``FloatSlider`` silently clamps, and snaps its readout to ``min + n * step``. This one widens its range to
    take in the start value, refuses (``TraitError``) a value outside the range and a min or max that would move the
    value, rounds to 6 decimals, and refines its step until the value sits on the grid. It overrides
    ``_BoundedFloat``'s validators (the same names in ipywidgets 7.7, Colab's, and 8).

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
        """``value`` as the slider would hold it, else ``ValueError``."""
        value = round(float(value), 6)
        if not self.min <= value <= self.max:
            raise ValueError(
                f"{self.knob} must be in [{self.min}, {self.max}] (the range of the slider "
                f"{self.description!r}), got {value}"
            )
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

    def _bound(self, name: str, bound: float, moves: bool) -> float:  # replaces ipywidgets' moving the value
        if moves:
            raise TraitError(
                f"{self.knob}: {name} {bound} would move the value {self.value} of the slider "
                f"{self.description!r}; set the value first"
            )
        return bound

    @validate("min")
    def _validate_min(self, proposal):
        lo = self._bound("min", proposal["value"], proposal["value"] > self.value)
        self._fit_grid(self.value, lo, self.max)
        return lo

    @validate("max")
    def _validate_max(self, proposal):
        return self._bound("max", proposal["value"], proposal["value"] < self.value)


class Controls:
    r"""The knobs as widgets, and their value as one frozen :class:`~qae_lab.knobs.Knobs`.

    The sliders span :data:`K_RANGE` and :data:`ALPHA_RANGE`, widened to take in their start value.

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

    def __init__(
        self,
        quantile_k: float = DEFAULT_K,
        alpha: float = DEFAULT_ALPHA,
        baseline: str = DEFAULT_BASELINE,
        token_weighting: str = DEFAULT_TOKEN_WEIGHTING,
    ):
        self._stop = threading.Event()
        self._finished = False
        self._locked: dict[str, str] = {}  # knob -> why its control is locked for the whole run
        clean = validate_knobs(quantile_k=quantile_k, alpha=alpha, baseline=baseline, token_weighting=token_weighting)
        style = {"description_width": "110px"}
        self.k = KnobSlider(
            "quantile_k", clean["quantile_k"], *K_RANGE, description="K (QAE)", continuous_update=False, style=style
        )
        self.alpha = KnobSlider(
            "alpha", clean["alpha"], *ALPHA_RANGE, description="alpha (SA-AH)", continuous_update=False, style=style
        )
        # (version, value): swapped whole by the kernel thread, read whole by the training thread
        self._current = (0, Knobs(**{**clean, "quantile_k": self.k.value, "alpha": self.alpha.value}))
        self._received: list[tuple[int, str, object]] = []  # (version it made, knob, value)
        self._begun: list[tuple[int, int]] = []  # (step, version it took)
        self.baseline = widgets.ToggleButtons(
            options=[(BASELINE_NAMES[b], b) for b in ("mean", "quantile")],
            value=baseline,
            description="baseline",
            style={**style, "button_width": "130px"},
        )
        self.token_weighting = widgets.ToggleButtons(
            options=list(TOKEN_WEIGHTING_OPTIONS),
            value=token_weighting,
            description="token weighting",
            style={**style, "button_width": "80px"},
        )
        self.stop_button = widgets.Button(
            description="Stop",
            button_style="danger",
            icon="stop",
            tooltip="end training after the current step (log and checkpoint kept)",
        )
        self.note = widgets.HTML()  # why a control is disabled
        for name, w in self._boxes().items():
            w.observe(lambda change, name=name: self._set(name, change["new"]), names="value")
            w.observe(lambda _change: self._sync(), names="value")
        self.stop_button.on_click(lambda _button: self.request_stop())
        wrap = {"flex_flow": "row wrap"}
        self.widget = widgets.VBox(
            [
                widgets.HBox([self.k, self.alpha], layout=wrap),
                widgets.HBox([self.baseline, self.token_weighting], layout=wrap),
                widgets.HBox([self.stop_button, self.note], layout=wrap),
            ]
        )
        self._sync()

    def _boxes(self) -> dict[str, widgets.ValueWidget]:
        return {
            "quantile_k": self.k,
            "alpha": self.alpha,
            "baseline": self.baseline,
            "token_weighting": self.token_weighting,
        }

    def lock(self, knob: str, why: str) -> None:
        """Disable the control of ``knob`` for the whole run (a trainer that cannot use it), saying ``why``."""
        self._locked[knob] = why
        self._sync()

    def _sync(self) -> None:
        """Disable each control that changes nothing now; its tooltip and the note beside Stop say why."""
        why = {**inactive_knobs(self.snapshot()), **self._locked}
        if self._finished:
            why = dict.fromkeys(KNOBS, "training has ended: the controls no longer reach a run")
        for name, w in self._boxes().items():
            w.disabled = name in why
            _set_tooltip(w, why.get(name, ""))
        self.note.value = "<br>".join(dict.fromkeys(why.values()))

    @classmethod
    def for_trainer(cls, trainer) -> Controls:
        """Controls at the trainer's knobs; token weighting locked where its loss type cannot weight tokens."""
        controls = cls(**trainer.knobs.as_dict())
        if not can_weight_tokens(trainer.loss_type):
            controls.lock("token_weighting", f"token weighting: loss type {trainer.loss_type!r} cannot weight tokens")
        return controls

    def _set(self, name: str, value) -> None:
        # the widget callback (kernel thread, one at a time): a new value, swapped in as one reference
        version, knobs = self._current
        self._current = (version + 1, knobs.replace(**{name: value}))
        self._received.append((version + 1, name, value))

    @property
    def changes(self) -> list[tuple[int, str, object]]:
        """Every change received, as ``(step, knob, value)``: in force from ``step + 1`` (:meth:`begin_step`)."""
        begun = list(self._begun)
        return [
            (max((s for s, v in begun if v < version), default=0), name, value)
            for version, name, value in list(self._received)
        ]

    def set(self, **values) -> None:
        """Move several controls at once, as one change: no snapshot sees some moved and others not."""
        clean = validate_knobs(**values)
        boxes = self._boxes()
        for name in ("quantile_k", "alpha"):  # checked before any control moves
            if name in clean:
                clean[name] = boxes[name].check(clean[name])
        version, knobs = self._current
        self._current = (version, knobs.replace(**clean))
        for name, value in clean.items():
            boxes[name].value = value  # its observer records the change (the value is already in force)

    def snapshot(self) -> Knobs:
        """The four knob values, one frozen :class:`~qae_lab.knobs.Knobs`."""
        return self._current[1]

    def begin_step(self, step: int) -> Knobs:
        """The knobs for ``step``, remembered so that :attr:`changes` can say from which step each is in force."""
        version, knobs = self._current
        self._begun.append((int(step), version))
        return knobs

    def finish(self, failed: bool = False) -> None:
        """Training has ended: the Stop button is disabled and says how ("Stopped", "Failed", "Finished")."""
        self._finished = True
        self.stop_button.disabled = True
        self.stop_button.description = "Failed" if failed else "Stopped" if self.stop_requested else "Finished"
        self._sync()

    def request_stop(self) -> None:
        """Ask the run to end after the current step (after :meth:`finish`: nothing left to stop)."""
        if self._finished:
            return
        self._stop.set()
        self.stop_button.disabled, self.stop_button.description = True, "Stopping..."

    @property
    def stop_requested(self) -> bool:
        return self._stop.is_set()


WAITING = "waiting for the first step..."


def panel_notes(rows: list[dict]) -> dict[str, str]:
    r"""Why a panel of :data:`LIVE_PANELS` is empty: before the first step; the token weights without a weighting.

    >>> panel_notes([])["entropy"]
    'waiting for the first step...'
    >>> panel_notes([{"step": 1, "qae/k": 0.4}])
    {'token weight, failed completions': 'SA-AH off: token weighting is none'}
    >>> panel_notes([{"step": 1, "qae/k": 0.4, "saah/alpha": 0.5}])
    {}
    """
    if not rows:
        return dict.fromkeys(LIVE_PANELS, WAITING)
    return {} if rows[-1].get(SAAH_ALPHA) is not None else {WEIGHTS_PANEL: "SA-AH off: token weighting is none"}


# a step of this few prompts gives shares in steps of 1 / prompts (one prompt: 0 or 1): the panel's title says so
FEW_PROMPTS = 4


def live_panels(rows: list[dict], prompts_per_step: int | None = None) -> dict[str, tuple[str, ...]]:
    r""":data:`LIVE_PANELS` as the rows can honestly be drawn: the shares' title names a step's few prompts; a mean
    reward equal to the pass rate at every step (a 0/1 reward) is one line.

    >>> panels = live_panels([{"step": 1, "reward": 0.5, "qae/success_rate": 0.5}], prompts_per_step=1)
    >>> list(panels)[:1], panels["mean reward = pass rate (a 0/1 reward)"]
    (['easy and hard prompts (QAE): 1 prompt a step, so each share is 0 or 1'], ('reward',))
    >>> live_panels([{"step": 1, "reward": 4.5, "qae/success_rate": 0.5}], prompts_per_step=8) == LIVE_PANELS
    True
    """
    names = {}
    if prompts_per_step is not None and prompts_per_step <= FEW_PROMPTS:
        n = prompts_per_step
        names[SHARES_PANEL] = (
            f"{SHARES_PANEL}: 1 prompt a step, so each share is 0 or 1"
            if n == 1
            else f"{SHARES_PANEL}: {n} prompts a step, shares in steps of 1/{n}"
        )
    pairs = [(r.get("reward"), r.get(QAE_SUCCESS_RATE)) for r in rows]
    pairs = [(a, b) for a, b in pairs if a is not None and b is not None]
    one_line = bool(pairs) and all(abs(a - b) <= 1e-9 for a, b in pairs)
    panels = {}
    for name, keys in LIVE_PANELS.items():
        if name == REWARD_PANEL and one_line:
            panels["mean reward = pass rate (a 0/1 reward)"] = ("reward",)
        else:
            panels[names.get(name, name)] = keys
    return panels


_TABLE = "border-collapse:collapse;font-size:13px;margin:4px 0"
_TD = "border:1px solid #ccc;padding:2px 10px;text-align:left"


WEIGHTING_UNNAMED = "AH or SA-AH"  # a step of an older log that weighted tokens, whose weighting nobody named
KNOB_COLUMNS = ("steps", "K", "baseline", "token weighting", "α")


def knob_number(x: float | None) -> str:
    r"""A knob's value for people: two decimals, more where the value has them (up to 6), "—" for None.

    >>> knob_number(0.4), knob_number(0.123), knob_number(1.25), knob_number(0.30000000000000004), knob_number(None)
    ('0.40', '0.123', '1.25', '0.30', '—')
    """
    if x is None:
        return "—"
    return f"{float(x):.{max(2, _decimals(float(x)))}f}"


def knobs_row(knobs) -> dict:
    r"""A :class:`~qae_lab.knobs.Knobs` (the controls' setting) as :func:`knob_ranges` writes a logged step's knobs.

    >>> from qae_lab.knobs import Knobs
    >>> knobs_row(Knobs(quantile_k=0.6, alpha=1.25, token_weighting="sa_ah"))
    {'K': '0.60', 'baseline': 'K-quantile (QAE)', 'token weighting': 'SA-AH', 'α': '1.25'}
    """
    weighted = knobs.token_weighting != "none"
    return {
        "K": knob_number(knobs.quantile_k),
        "baseline": BASELINE_NAMES[knobs.baseline],
        "token weighting": WEIGHTING_NAMES[knobs.token_weighting],
        "α": knob_number(knobs.alpha) if weighted else "—",
    }


def _knobs_of(row: Mapping, weighting: str | None) -> dict:
    """The knobs a log row records, as the tables write them (``weighting``: for an older log that names none)."""
    alpha, quantile, logged = row.get(SAAH_ALPHA), row.get(QAE_QUANTILE_BASELINE), row.get(TOKEN_WEIGHTING)
    if isinstance(logged, str):
        named = " + ".join(WEIGHTING_NAMES.get(w, w) for w in logged.split("+"))
    elif alpha is None:
        named = "none"
    else:
        named = WEIGHTING_NAMES[weighting] if weighting in ("ah", "sa_ah") else WEIGHTING_UNNAMED
    return {
        "K": knob_number(row.get(QAE_K)),
        "baseline": "—" if quantile is None else BASELINE_NAMES["quantile" if quantile >= 0.5 else "mean"],
        "token weighting": named,
        "α": knob_number(alpha),
    }


def _ranges(rows: Sequence[Mapping], weightings: Mapping[int, str] | None) -> list[tuple[int, int, dict]]:
    """``(first step, last step, knobs)`` of each run of consecutive logged steps with the same knobs."""
    ranges: list[tuple[int, int, dict]] = []
    for row in rows:
        if "step" not in row:
            raise ValueError(f"rows must be log rows with a 'step', got keys {sorted(row)}")
        step = int(row["step"])
        knobs = _knobs_of(row, (weightings or {}).get(step))
        if ranges and ranges[-1][2] == knobs and ranges[-1][1] + 1 == step:
            ranges[-1] = (ranges[-1][0], step, knobs)
        else:
            ranges.append((step, step, knobs))
    return ranges


def knob_ranges(rows: Sequence[Mapping], weightings: Mapping[int, str] | None = None) -> list[dict]:
    r"""The knobs in force by step range (:data:`KNOB_COLUMNS`), from log rows in step order; ``weightings`` (step ->
    weighting) names a weighting that a log older than ``knobs/token_weighting`` does not (else "AH or SA-AH").

    >>> rows = [{"step": s, "qae/k": 0.4 if s < 3 else 0.6, "qae/quantile_baseline": 1.0,
    ...          "knobs/token_weighting": "none"} for s in (1, 2, 3)]
    >>> rows.append({"step": 4, "qae/k": 0.6, "qae/quantile_baseline": 1.0, "saah/alpha": 1.25,
    ...              "knobs/token_weighting": "sa_ah"})
    >>> for r in knob_ranges(rows):
    ...     print(r)
    {'steps': '1-2', 'K': '0.40', 'baseline': 'K-quantile (QAE)', 'token weighting': 'none', 'α': '—'}
    {'steps': '3', 'K': '0.60', 'baseline': 'K-quantile (QAE)', 'token weighting': 'none', 'α': '—'}
    {'steps': '4', 'K': '0.60', 'baseline': 'K-quantile (QAE)', 'token weighting': 'SA-AH', 'α': '1.25'}
    """
    return [{"steps": f"{a}-{b}" if b > a else f"{a}", **knobs} for a, b, knobs in _ranges(rows, weightings)]


def knob_changes_table(rows: Sequence[Mapping], weightings: Mapping[int, str] | None = None) -> list[dict]:
    r"""One row per knob that moved: the first step that used the new value, the knob, its value before and after.

    >>> rows = [{"step": 1, "qae/k": 0.4, "qae/quantile_baseline": 1.0, "knobs/token_weighting": "none"},
    ...         {"step": 2, "qae/k": 0.4, "qae/quantile_baseline": 0.0, "saah/alpha": 0.5, "knobs/token_weighting": "sa_ah"}]
    >>> for r in knob_changes_table(rows):
    ...     print(r)
    {'step': 2, 'knob': 'baseline', 'before': 'K-quantile (QAE)', 'after': 'mean (GRPO)'}
    {'step': 2, 'knob': 'token weighting', 'before': 'none', 'after': 'SA-AH'}
    {'step': 2, 'knob': 'α', 'before': '—', 'after': '0.50'}
    """
    ranges = _ranges(rows, weightings)
    return [
        {"step": now[0], "knob": knob, "before": was[2][knob], "after": now[2][knob]}
        for was, now in itertools.pairwise(ranges)
        for knob in KNOB_COLUMNS[1:]
        if was[2][knob] != now[2][knob]
    ]


def _range_text(r: Mapping) -> str:
    weighting = "no token weighting" if r["token weighting"] == "none" else f"{r['token weighting']}, α {r['α']}"
    steps = f"steps {r['steps']}" if "-" in r["steps"] else f"step {r['steps']}"
    return f"{steps}: K {r['K']} · {r['baseline']} baseline · {weighting}"


def knob_title(ranges: Sequence[Mapping], step: int, max_steps: int, last: int = 3) -> str:
    r"""The live dashboard's title: the step reached, then the ``last`` ranges of :func:`knob_ranges`, a line each.

    >>> ranges = [{"steps": "1-8", "K": "0.40", "baseline": "K-quantile (QAE)", "token weighting": "none", "α": "—"},
    ...           {"steps": "9-12", "K": "0.60", "baseline": "K-quantile (QAE)", "token weighting": "SA-AH", "α": "1.25"}]
    >>> print(knob_title(ranges, 12, 40).replace("<br>", "\n"))
    step 12 of 40 · knobs in force:
    steps 1-8: K 0.40 · K-quantile (QAE) baseline · no token weighting
    steps 9-12: K 0.60 · K-quantile (QAE) baseline · SA-AH, α 1.25
    >>> knob_title([], 0, 40)
    'waiting for the first step... (40 steps to train)'
    """
    if not ranges:
        return f"waiting for the first step... ({max_steps} steps to train)"
    shown = f", the last {last} of {len(ranges)} settings" if len(ranges) > last else ""
    lines = [f"step {step} of {max_steps} · knobs in force{shown}:"]
    return "<br>".join(lines + [_range_text(r) for r in ranges[-last:]])


def knobs_html(ranges: list[dict], pending: tuple[int, dict] | None = None, last: int = 4) -> str:
    r"""The table of the ``last`` ranges of :func:`knob_ranges`, and ``pending`` ``(step, knobs row)``, the controls'
    setting from ``step`` on, while no logged step has used it.

    >>> from qae_lab.knobs import Knobs
    >>> page = knobs_html([], (1, knobs_row(Knobs())))
    >>> "<td style" in page and "from step 1 (set; not in the log yet)" in page and "K-quantile (QAE)" in page
    True
    """
    rows = [(r["steps"], r) for r in ranges[-last:]]
    if pending is not None and (not ranges or {k: ranges[-1][k] for k in pending[1]} != pending[1]):
        rows.append((f"from step {pending[0]} (set; not in the log yet)", pending[1]))
    head = "".join(f"<th style='{_TD}'>{c}</th>" for c in KNOB_COLUMNS)
    body = "".join(
        "<tr>"
        + f"<td style='{_TD}'>{steps}</td>"
        + "".join(f"<td style='{_TD}'>{r[c]}</td>" for c in KNOB_COLUMNS[1:])
        + "</tr>"
        for steps, r in rows
    )
    n = len(ranges) - last
    earlier = f" ({n} earlier setting{'s' if n > 1 else ''} not shown)" if n > 0 else ""
    caption = f"<caption style='text-align:left;font-weight:bold'>Knobs in force, by step{earlier}</caption>"
    return f"<table style='{_TABLE}'>{caption}<tr>{head}</tr>{body}</table>"


def auto_preset(gpu_preset: str = "qwen2.5-1.5b-gsm8k") -> tuple[str, str]:
    r"""``(preset, reason)`` for this machine (:func:`qae_lab.runs.presets.device_preset` on this device).

    >>> auto_preset("qwen2.5-1.5b-gsm8k")[0] in ("qwen2.5-1.5b-gsm8k", "qwen2.5-0.5b-gsm8k-t4", "cpu-demo")
    True
    """
    if not torch.cuda.is_available():
        return device_preset(gpu_preset, name=None)
    return device_preset(
        gpu_preset,
        name=torch.cuda.get_device_name(0),
        total_memory=torch.cuda.get_device_properties(0).total_memory,
        bf16=torch.cuda.is_bf16_supported(),
    )


class Dashboard:
    r"""What a participant watches: progress, status, the knobs in force (:func:`knobs_html`) and the curves.

    Redraws are at least ``min_interval_s`` apart, and after a redraw of ``c`` seconds the next waits
    ``c / max_draw_share``: a redraw is ~0.15 s in the training thread, and drawing every CPU step (~0.6 s) made
    training 1.2x slower. :class:`LiveRun` puts its messages between ``header`` and ``view.widget``.

    >>> d = Dashboard(max_steps=4, mode="static")
    >>> d.view.figure.layout.title.text
    'waiting for the first step... (4 steps to train)'
    >>> d.add({"step": 1, "reward": 0.25, "qae/k": 0.4}); d.refresh()
    >>> d.progress.value, [t.name for t in d.view.figure.data if None not in t.x]   # the lines with a point
    (1, ['mean reward', 'K'])
    """

    def __init__(
        self,
        max_steps: int,
        *,
        mode: str = "auto",
        min_interval_s: float = 0.5,
        max_draw_share: float = 0.05,
        prompts_per_step: int | None = None,
    ):
        self.rows: list[dict] = []
        self.prompts_per_step = prompts_per_step
        self._pending: tuple[int, dict] | None = None
        self._lock = threading.Lock()
        self._last_draw, self._draw_cost = 0.0, 0.0
        self.min_interval_s = check_finite_scalar(min_interval_s, "min_interval_s")
        self.max_draw_share = check_positive(max_draw_share, "max_draw_share")
        if self.max_draw_share > 1:
            raise ValueError(f"max_draw_share must be in (0, 1], got {max_draw_share}")
        self.progress = widgets.IntProgress(value=0, min=0, max=max(int(max_steps), 1), description="step")
        self.status = widgets.HTML(value="not started")
        self.knob_table = widgets.HTML(value=knobs_html([]))
        self.view = FigureView(self._figure([]), mode=mode)
        self.header = widgets.VBox([widgets.HBox([self.progress, self.status]), self.knob_table])
        self.widget = widgets.VBox([self.header, self.view.widget])

    def _figure(self, rows: list[dict], ranges: list[dict] | None = None):
        ranges = knob_ranges(rows) if ranges is None else ranges
        title = knob_title(ranges, rows[-1]["step"] if rows else 0, self.progress.max)
        panels = live_panels(rows, self.prompts_per_step)  # the same order as LIVE_PANELS: the notes follow it
        said = panel_notes(rows)
        notes = {new: said[old] for old, new in zip(LIVE_PANELS, panels) if old in said}
        return run_curves_figure(rows, panels, title=title, notes=notes)

    def add(self, row: dict) -> None:
        """Record one step's metrics (``row["step"]``: the global step); redraw when due."""
        with self._lock:
            self.rows.append(dict(row))
            self.progress.value = min(int(row["step"]), self.progress.max)
            wait = max(self.min_interval_s, self._draw_cost / self.max_draw_share)
            due = time.monotonic() - self._last_draw >= wait
        if due:
            self.refresh()

    def show_next(self, step: int, knobs: Knobs | None) -> None:
        """Show ``knobs`` as applying from ``step`` on until a logged step has used them (None: nothing pending)."""
        with self._lock:
            self._pending = None if knobs is None else (int(step), knobs_row(knobs))
            self._show_knobs(list(self.rows))

    def _show_knobs(self, rows: list[dict]) -> list[dict]:
        """Redraw the knobs table from ``rows``; their :func:`knob_ranges`, which the figure's title reads too."""
        ranges = knob_ranges(rows)
        pending = self._pending
        if pending is not None and rows:  # a change applies from the step after the last logged one at the earliest
            pending = (max(pending[0], int(rows[-1]["step"]) + 1), pending[1])
        self.knob_table.value = knobs_html(ranges, pending)
        return ranges

    def refresh(self) -> None:
        """Redraw every recorded step now."""
        with self._lock:
            rows = list(self.rows)
            ranges = self._show_knobs(rows)  # computed once, for the table and the figure's title
        start = time.monotonic()
        self.view.update(self._figure(rows, ranges))
        self._last_draw = time.monotonic()
        self._draw_cost = self._last_draw - start

    def set_status(self, text: str) -> None:
        self.status.value = text


class DashboardFeed(TrainerCallback):
    r"""Sends every logged training step (a log with ``reward``) to a :class:`Dashboard`.

    >>> import types
    >>> feed, state = DashboardFeed(Dashboard(max_steps=4, mode="static")), types.SimpleNamespace(global_step=0)
    >>> feed.on_train_begin(None, state, None); state.global_step = 1
    >>> feed.on_log(None, state, None, logs={"reward": 0.5, "qae/k": 0.4})
    >>> feed.on_log(None, state, None, logs={"train_runtime": 9.0})       # no reward: not a training step
    >>> [row["step"] for row in feed.dashboard.rows], feed.dashboard.status.value.endswith(" s/step")
    ([1], True)
    """

    def __init__(self, dashboard: Dashboard, knobs: LiveKnobs | None = None):
        self.dashboard, self.knobs = dashboard, knobs
        self._t0 = None

    def on_train_begin(self, args, state, control, **kwargs):
        self._t0 = time.monotonic()
        self.dashboard.set_status("training")

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and logs.get("reward") is not None:
            self.dashboard.add({"step": state.global_step, **logs})
            per_step = (time.monotonic() - self._t0) / max(state.global_step, 1)
            self.dashboard.set_status(f"training: {per_step:.2f} s/step")

    def on_train_end(self, args, state, control, **kwargs):
        self.dashboard.refresh()


@contextlib.contextmanager
def _thread_warnings_to(output: widgets.Output):
    r"""Show the calling thread's warnings in ``output`` during the block; other threads' go where they went.

    ``warnings.catch_warnings`` swaps process-wide state (before Python 3.14), so this wraps ``warnings.showwarning``
    and dispatches on the thread; filters apply as before.
    """
    thread, before, active = threading.get_ident(), warnings.showwarning, [True]

    def show(message, category, filename, lineno, file=None, line=None):
        if active[0] and threading.get_ident() == thread:
            output.append_stderr(warnings.formatwarning(message, category, filename, lineno, line))
        else:  # another thread, or this hook left installed by someone's catch_warnings after the block
            before(message, category, filename, lineno, file, line)

    warnings.showwarning = show
    try:
        yield
    finally:
        active[0] = False
        if warnings.showwarning is show:
            warnings.showwarning = before


class LiveRun:
    r"""A trainer with live :class:`~qae_lab.lab.live.Controls` and a :class:`Dashboard`, trained in a background thread.

    ``resume_from_checkpoint`` None: the trainer's run plan's; a checkpoint that is not the plan's is refused.
    ``messages`` shows the training thread's warnings, errors and follow-up results. A stand-in trainer of one step:

    >>> import types
    >>> from qae_lab.knobs import Knobs
    >>> used, callbacks = [], []
    >>> def train(resume_from_checkpoint=None):      # one step, calling the callbacks as the Trainer does
    ...     for cb in callbacks:
    ...         cb.on_step_begin(trainer.args, trainer.state, None)
    ...     trainer.state.global_step = 1
    >>> trainer = types.SimpleNamespace(
    ...     knobs=Knobs(), set_knobs=used.append, loss_type="dapo", train=train,
    ...     args=types.SimpleNamespace(max_steps=3, output_dir="runs/demo"), state=types.SimpleNamespace(global_step=0),
    ...     callback_handler=types.SimpleNamespace(callbacks=callbacks), add_callback=callbacks.append)
    >>> run = LiveRun(trainer, dashboard=Dashboard(max_steps=3, mode="static"))
    >>> run.controls.k.value = 0.7                   # a slider move before the step
    >>> run.then(lambda run: "evaluated").start().wait()
    TrainOutcome(interrupted=False, checkpoint=None, global_step=1, note='', asked=3)
    >>> used[-1].quantile_k, run.dashboard.status.value, run.messages.outputs[0]["text"]
    (0.7, 'ended after 1 of 3 steps (not finished)', 'evaluated\n')
    """

    def __init__(
        self,
        trainer,
        *,
        controls: Controls | None = None,
        dashboard: Dashboard | None = None,
        resume_from_checkpoint: str | None = None,
    ):
        self.trainer = trainer
        self.controls = controls or Controls.for_trainer(trainer)
        if dashboard is None:  # the prompts one optimizer step trains, over its micro-batches and processes
            a = trainer.args
            per_step = a.per_device_train_batch_size * a.gradient_accumulation_steps * a.world_size // a.num_generations
            dashboard = Dashboard(a.max_steps, prompts_per_step=per_step)
        self.dashboard = dashboard
        self.messages = widgets.Output()
        plan = pending_plan(trainer)
        if plan is not None:  # the trainer was made for a plan: follow it
            if resume_from_checkpoint is None:
                resume_from_checkpoint = plan.resume_from
            elif plan.resume_from is None or Path(resume_from_checkpoint).resolve() != Path(plan.resume_from).resolve():
                raise ValueError(
                    f"resume_from_checkpoint={resume_from_checkpoint}, but the trainer was made for "
                    f"{plan.summary}: make the trainer with make_trainer(..., resume=...) for that"
                )
        self.resume_from_checkpoint = resume_from_checkpoint
        self.knobs = LiveKnobs(self.controls, trainer)
        # progress bars or log printing from a thread would land in whichever cell runs: the dashboard replaces them
        for cls in (ProgressCallback, NotebookProgressCallback, PrinterCallback):
            while any(isinstance(cb, cls) for cb in trainer.callback_handler.callbacks):
                trainer.remove_callback(cls)
        trainer.add_callback(self.knobs)
        trainer.add_callback(DashboardFeed(self.dashboard, self.knobs))
        self.outcome = None
        self.error: BaseException | None = None
        self._after: list[Callable] = []
        self._thread: threading.Thread | None = None
        for w in self.controls._boxes().values():  # the dashboard shows a move at once, as applying from the next step
            w.observe(lambda _change: self._show_next(), names="value")
        self._show_next()
        # the controls, then status and knobs in force, then what the training thread says, then the curves
        self.widget = widgets.VBox(
            [self.controls.widget, self.dashboard.header, self.messages, self.dashboard.view.widget]
        )

    def _show_next(self) -> None:
        changes = self.controls.changes  # a change stamped s applies from step s + 1
        self.dashboard.show_next(changes[-1][0] + 1 if changes else 1, self.controls.snapshot())

    def _ipython_display_(self):
        display(self.widget)

    def then(self, fn: Callable) -> LiveRun:
        """Run ``fn(self)`` in the training thread after training ends (also after Stop, not after an error); a
        returned string is shown under the dashboard, another non-None value displayed."""
        self._after.append(fn)
        return self

    def start(self) -> LiveRun:
        """Start training in a background thread and return at once."""
        if self._thread is not None:
            raise RuntimeError("this LiveRun was already started; make a new one (resume_from_checkpoint) to go on")
        self._thread = threading.Thread(target=self._train, name="qae_lab-live-training", daemon=True)
        self._thread.start()
        return self

    def _train(self) -> None:
        with _thread_warnings_to(self.messages):
            self._train_and_follow_up()

    def _train_and_follow_up(self) -> None:
        try:
            self.trainer.train(resume_from_checkpoint=self.resume_from_checkpoint)
            step = self.trainer.state.global_step
            stopped = self.controls.stop_requested
            ckpt = Path(self.trainer.args.output_dir) / f"checkpoint-{step}"
            self.outcome = TrainOutcome(stopped, str(ckpt) if stopped else None, step, asked=steps_asked(self.trainer))
            asked = f"{step} of {self.outcome.asked} steps"
            self.dashboard.set_status(
                f"stopped after {asked} (not finished); checkpoint {ckpt}"
                if stopped
                else f"finished: {step} steps"
                if self.outcome.finished
                else f"ended after {asked} (not finished)"
            )
            self.controls.finish()  # before the follow-ups (an evaluation can take minutes)
            for fn in self._after:
                self._show(fn(self))
        except BaseException as err:  # shown in the notebook, re-raised by wait()
            self.error = err
            self.dashboard.set_status(f"<b style='color:#c00'>failed: {type(err).__name__}: {err}</b>")
            self.messages.append_stderr(traceback.format_exc())
        finally:
            self.controls.finish(failed=self.error is not None)
            self.dashboard.show_next(0, None)  # nothing is pending once training has ended
            logger = run_logger(self.trainer)
            if logger is not None:  # training that failed never reached on_train_end: let go of the folder's lock
                logger.release_lock()

    def _show(self, value) -> None:
        if isinstance(value, str):
            self.messages.append_stdout(value + "\n")
        elif value is not None:
            self.messages.append_display_data(value)

    def logged_steps(self) -> list[dict]:
        r"""The training-step rows of the run's ``log.jsonl`` so far; safe to call while training goes on."""
        return step_rows(read_log_lines(Path(self.trainer.args.output_dir) / LOG_NAME)[0])

    def token_weightings(self) -> dict[int, str]:
        r"""Step -> the token weighting it trained with, as its log row names it (steps before a resume too)."""
        return {row["step"]: row[TOKEN_WEIGHTING] for row in self.logged_steps() if TOKEN_WEIGHTING in row}

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def stop(self) -> None:
        """Same as pressing Stop: end after the current step, with a checkpoint."""
        self.controls.request_stop()

    def wait(self, timeout: float | None = None):
        """Block until the run ends; its TrainOutcome, or the training thread's error. Blocks the widgets too."""
        if self._thread is None:
            raise RuntimeError("not started: call start() first")
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise TimeoutError(f"training still running after {timeout} s")
        if self.error is not None:
            raise RuntimeError(f"training failed in the background thread: {self.error!r}") from self.error
        return self.outcome


class LiveKnobs(TrainerCallback):
    r"""Hands the controls' knobs to ``trainer.set_knobs`` before every step (``applied``: ``(step, knobs)``); after
    Stop, saves a checkpoint and stops at the step's end.

    >>> import types
    >>> from qae_lab.lab.live import Controls
    >>> controls, used = Controls(quantile_k=0.4), []
    >>> knobs = LiveKnobs(controls, types.SimpleNamespace(set_knobs=lambda k: used.append(k.quantile_k)))
    >>> control = types.SimpleNamespace(should_save=False, should_training_stop=False)
    >>> controls.k.value = 0.7                       # a slider move while step 3 runs
    >>> knobs.on_step_begin(None, types.SimpleNamespace(global_step=3), control)   # step 4 begins
    >>> used, knobs.applied[0][0]
    ([0.7], 4)
    >>> controls.request_stop(); knobs.on_step_end(None, None, control)
    >>> control.should_save, control.should_training_stop
    (True, True)
    """

    def __init__(self, controls: Controls, trainer):
        self.controls, self.trainer = controls, trainer
        self.applied: list[tuple[int, Knobs]] = []  # (global step about to run, knobs set)

    def on_step_begin(self, args, state, control, **kwargs):
        step = state.global_step + 1  # the step about to run
        knobs = self.controls.begin_step(step)
        self.trainer.set_knobs(knobs)
        self.applied.append((step, knobs))

    def on_step_end(self, args, state, control, **kwargs):
        if self.controls.stop_requested:
            control.should_save = True
            control.should_training_stop = True
