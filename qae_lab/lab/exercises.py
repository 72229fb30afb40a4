r"""Checkers for the notebooks' exercises, in the style of Spinning Up's ``# YOUR CODE HERE``.

Each ``check_*`` runs the learner's function on fixed random cases against qae_lab's own, a float within
:data:`ATOL`. A stub returning ``None`` is not attempted rather than failed, so notebooks run top to bottom; a wrong
answer or an exception inside the learner's function gives ``"Not yet: "``, the likely mistake, then the case, never
a traceback. A predict-then-run verdict (:func:`check_prediction`, :func:`check_direction`, :func:`check_estimate`)
compares what the learner wrote down before running with what was measured.
"""

from __future__ import annotations

import functools
import math
import textwrap
from collections.abc import Callable
from dataclasses import dataclass

import torch

from qae_lab.advantages import group_advantages, quantile_baseline
from qae_lab.analysis.stats import detrended_variance
from qae_lab.horizon import horizon_weights
from qae_lab.knobs import knob_changes
from qae_lab.task.rewards import soft_format_reward
from qae_lab.toys.bandit import entropy_change_first_order, knob_slope
from qae_lab.toys.seqpolicy import n_prefixes, sequence_entropy
from qae_lab.toys.sparsity import gate_zero_counts

__all__ = [
    "check_quantile_baseline",
    "check_knob_slope",
    "check_zero_count",
    "check_training_variance",
    "check_horizon_weights",
    "check_k_changes",
    "check_neg_correct",
    "check_mean_advantages",
    "check_format_reward",
    "check_prediction",
    "check_direction",
    "check_estimate",
    "check_entropy_change",
    "check_sequence_entropy",
]


NOT_ATTEMPTED = "Not attempted yet: replace the stub's `return None` and run this cell again."
PREDICTIONS = ("up", "down")
_BREAK = "\n"  # a verdict's lines stay within a notebook's column
NO_PREDICTION = (
    'No prediction yet: set PREDICTION = "up" or "down" in the cell above the update, '
    "run it, then run the update and this cell again."
)


# How far a float answer may sit from qae_lab's: the answers are below 10, a float32 answer lands within 2e-7 of the
# float64 reference (tests/lab/test_exercises.py), and an error of 1e-5 (a wrong eps, a term left out) is refused.
# No relative part: allclose's rtol = 1e-5 would let such an error through on every value above 1.
ATOL = 1e-6


class _NotYet(Exception):
    """A wrong answer: the case that shows it (``case``) and, when the checker recognises the mistake, ``hint``."""

    def __init__(self, case: str, hint: str = ""):
        super().__init__(case)
        self.case, self.hint = case, hint


class _TheirError(Exception):
    """The learner's function raised (the exception is ``__cause__``) when called with the arguments in ``args[0]``."""


# the three kinds of completion an update treats differently, by the sign of the advantage
SIGNS = {"A > 0": 1, "A = 0": 0, "A < 0": -1}


@dataclass(frozen=True)
class UpdateChange:
    r"""What one update did to each completion of a group: log pi(y_i) before and after, beside A_i.

    Tensors are (N,); ``clipped``: each completion's tokens where PPO's clip would stop the gradient on a second pass.

    >>> c = UpdateChange(["y0 ✓", "y1 ✗", "y2 ✗"], torch.tensor([-1., -2, -3]), torch.tensor([-0.9, -2.5, -2.8]),
    ...                  torch.tensor([1., -0.5, -0.5]), torch.tensor([1, 0, 0]), torch.tensor([3, 3, 3]))
    >>> c.delta.tolist(), c.moved("A < 0"), c.direction("A < 0"), c.direction("A > 0"), c.direction("A = 0")
    ([0.1..., -0.5, 0.2...], (1, 1, 2), 'mixed', 'up', None)
    """

    labels: list[str]
    before: torch.Tensor
    after: torch.Tensor
    advantages: torch.Tensor
    clipped: torch.Tensor
    lengths: torch.Tensor

    @property
    def delta(self) -> torch.Tensor:
        r"""(N,) log pi_after(y_i) - log pi_before(y_i): > 0 where the completion became more likely."""
        return self.after - self.before

    def rows(self, sign: str) -> torch.Tensor:
        r"""(N,) bool: the completions whose advantage has ``sign``, a key of :data:`SIGNS`."""
        if sign not in SIGNS:
            raise ValueError(f"sign must be one of {list(SIGNS)}, got {sign!r}")
        return torch.sign(self.advantages) == SIGNS[sign]

    def moved(self, sign: str) -> tuple[int, int, int]:
        r"""(how many became more likely, how many less likely, how many there are) among the ``sign`` rows."""
        d = self.delta[self.rows(sign)]
        return int((d > 0).sum()), int((d < 0).sum()), d.numel()

    def direction(self, sign: str) -> str | None:
        r"""How the ``sign`` rows moved: ``"up"``, ``"down"`` (all), ``"mixed"``, ``"unchanged"``; None: no row."""
        up, down, n = self.moved(sign)
        if n == 0:
            return None
        return "up" if up == n else "down" if down == n else "unchanged" if up == down == 0 else "mixed"

    @property
    def title(self) -> str:
        r"""The figure's title."""
        (up, _, n_pos), (_, down, n_neg) = self.moved("A > 0"), self.moved("A < 0")
        return (
            f"One GRPO step: change of log π(y_i) per completion · A > 0: {up} of {n_pos} up · "
            f"A < 0: {down} of {n_neg} down"
        )

    def summary_rows(self) -> list[dict]:
        r"""A table row per advantage sign present: completions, how many moved each way, their mean change, tokens.

        >>> c = UpdateChange(["y0 ✓", "y1 ✗", "y2 ✗"], torch.tensor([-1., -2, -3]), torch.tensor([-0.5, -2.5, -2.8]),
        ...                  torch.tensor([1., -0.5, -0.5]), torch.tensor([2, 0, 1]), torch.tensor([3, 4, 5]))
        >>> for row in c.summary_rows():
        ...     print([round(v, 3) if isinstance(v, float) else v for v in row.values()])
        ['A > 0', 1, 1, 0, 0.5, 3, 2]
        ['A < 0', 2, 1, 1, -0.15, 9, 1]
        """
        out = []
        for sign in SIGNS:
            up, down, n = self.moved(sign)
            if n == 0:
                continue
            on = self.rows(sign)
            out.append(
                {
                    "advantage": sign,
                    "completions": n,
                    "more likely": up,
                    "less likely": down,
                    "mean change": self.delta[on].mean().item(),
                    "tokens": int(self.lengths[on].sum()),
                    "clipped": int(self.clipped[on].sum()),
                }
            )
        return out


def _theirs(fn: Callable) -> Callable:
    """``fn`` whose exceptions become :class:`_TheirError` (theirs, not the checker's)."""

    def call(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except Exception as err:  # anything their code raises is reported, never a traceback
            shown = ", ".join(textwrap.shorten(repr(a), 60) for a in args)
            raise _TheirError(shown) from err

    return call


def _not_yet(hint: str, case: str) -> str:
    """The verdict on a wrong answer: ``Not yet:``, the hint, then the case, wrapped to a notebook's column."""
    first = textwrap.fill(f"Not yet: {hint}", 100)  # every checker has a hint
    return f"{first}\n{case}"


def _checker(hint: str) -> Callable:
    """A ``check_*(fn)`` returning ``Correct: ...``, :data:`NOT_ATTEMPTED`, or :func:`_not_yet` with the case's hint
    or else ``hint``."""

    def wrap(check: Callable) -> Callable:
        @functools.wraps(check)
        def run(fn: Callable) -> str:
            try:
                return check(_theirs(fn))
            except _NotYet as wrong:
                return _not_yet(wrong.hint or hint, wrong.case)
            except _TheirError as err:
                cause = err.__cause__
                return _not_yet(
                    hint, f"your function raised {type(cause).__name__}: {cause} (called with {err.args[0]})"
                )

        return run

    return wrap


def _tensor(got) -> torch.Tensor | None:
    """``got`` as a float64 tensor, or None where it is not numbers (a string, a ragged list)."""
    try:
        return torch.as_tensor(got, dtype=torch.float64)
    except (TypeError, ValueError, RuntimeError):
        return None


def _close(got, want: torch.Tensor, atol: float = ATOL) -> bool:
    """Whether ``got`` has ``want``'s shape and every value within ``atol`` of it (absolute, float64)."""
    got = _tensor(got)
    return got is not None and got.shape == want.shape and bool(((got - want.double()).abs() <= atol).all())


def _compare(got, want: torch.Tensor, what: str, hint: str = "") -> None:
    if not _close(got, want):
        shown = _tensor(got)
        shown = repr(got) if shown is None else shown.tolist()
        raise _NotYet(f"{what}: expected {want.tolist()}, got {shown}", hint)


# (G, K) where floating point lands just above the integer K * G (0.28 * 25 = 7.000000000000001): a plain
# ceil(K G) - 1 takes the next order statistic there.
FLOAT_TRAPS = ((25, 0.28), (25, 0.56), (50, 0.14), (100, 0.07))


def _naive_quantile(rewards: torch.Tensor, g: int, k: float) -> torch.Tensor:
    """The K-quantile read at the unguarded index ceil(K G) - 1: the answer :data:`FLOAT_TRAPS` catch."""
    return rewards.view(-1, g).sort(dim=1).values[:, max(math.ceil(k * g), 1) - 1]


@_checker("the K-quantile of a group is its ceil(K G)-th smallest reward, read per group of G (sorted).")
def check_quantile_baseline(fn: Callable) -> str:
    r"""Check ``fn(rewards, group_size, k) -> (B,)`` against the paper's K-quantile, the ceil(K G)-th smallest reward.

    >>> check_quantile_baseline(lambda r, g, k: None) == NOT_ATTEMPTED
    True
    >>> check_quantile_baseline(quantile_baseline)
    'Correct: your baseline matches qae_lab.advantages.quantile_baseline on 34 cases.'
    >>> print(check_quantile_baseline(_naive_quantile))  # doctest: +ELLIPSIS
    Not yet: that is the index ceil(K G) - 1: in floating point K * G = 7.000000000000001, so ceil gives
    8, not 7; round K G when it lies within 1e-9 of an integer.
    G=25, K=0.28, the ceil(K G) = 7-th smallest of ...
    """
    gen = torch.Generator().manual_seed(0)
    if fn(torch.tensor([1.0, 0, 0, 0]), 4, 0.4) is None:
        return NOT_ATTEMPTED
    cases = 0
    for g in (2, 4, 5, 8, 16):
        for k in (0.2, 0.4, 0.6, 0.28, 0.75, 0.9):
            r = (torch.rand(3 * g, generator=gen) < 0.5).float() if cases % 2 else torch.randn(3 * g, generator=gen)
            _compare(fn(r.clone(), g, k), quantile_baseline(r, g, k), f"G={g}, K={k}, rewards={r.tolist()}")
            cases += 1
    for g, k in FLOAT_TRAPS:
        r = torch.randn(2 * g, generator=gen)  # distinct rewards: neighbouring order statistics differ
        got, want = fn(r.clone(), g, k), quantile_baseline(r, g, k)
        hint = ""
        if _close(got, _naive_quantile(r, g, k)):
            hint = (
                f"that is the index ceil(K G) - 1: in floating point K * G = {k * g!r}, so ceil gives "
                f"{math.ceil(k * g)}, not {round(k * g)}; round K G when it lies within 1e-9 of an integer."
            )
        _compare(got, want, f"G={g}, K={k}, the ceil(K G) = {round(k * g)}-th smallest of {r.tolist()}", hint)
        cases += 1
    return f"Correct: your baseline matches qae_lab.advantages.quantile_baseline on {cases} cases."


@_checker(
    "the slope is eta times the covariance, under pi = softmax(z), of log pi and pi (a weighted covariance, not a plain one)."
)
def check_knob_slope(fn: Callable) -> str:
    r"""Check ``fn(z, eta) -> float``, the knob's slope eta * Cov_pi(log pi, pi).

    >>> check_knob_slope(lambda z, eta: float(knob_slope(z, eta)))
    'Correct: your slope matches qae_lab.toys.bandit.knob_slope on 10 policies.'
    """
    gen = torch.Generator().manual_seed(1)
    if fn(torch.zeros(3, dtype=torch.float64), 1.0) is None:
        return NOT_ATTEMPTED
    for i in range(10):
        z = 2.0 * torch.randn(5 + i, generator=gen, dtype=torch.float64)
        eta = 0.1 * (i + 1)
        _compare(fn(z.clone(), eta), knob_slope(z, eta), f"z={z.tolist()}, eta={eta}")
    return "Correct: your slope matches qae_lab.toys.bandit.knob_slope on 10 policies."


@_checker("below the gate (c / G <= 1 - K) only the c successes move; above it only the G - c failures.")
def check_zero_count(fn: Callable) -> str:
    r"""Check ``fn(c, group_size, k) -> int``: responses with A = 0 when c of G are correct.

    >>> check_zero_count(lambda c, g, k: int(gate_zero_counts(g, k)[c]))
    'Correct: your count matches the two-regime gate for every c, G in {4, 8, 16}, K in {0.2, 0.4, 0.6, 0.8}.'
    """
    if fn(1, 4, 0.4) is None:
        return NOT_ATTEMPTED
    for g in (4, 8, 16):
        for k in (0.2, 0.4, 0.6, 0.8):
            want = gate_zero_counts(g, k).tolist()
            got = [fn(c, g, k) for c in range(g + 1)]
            if got != want:  # counts: compared exactly (2 == 2.0, but not 2.00001)
                raise _NotYet(f"zero counts for c = 0..{g}, G={g}, K={k}: expected {want}, got {got}")
    return "Correct: your count matches the two-regime gate for every c, G in {4, 8, 16}, K in {0.2, 0.4, 0.6, 0.8}."


@_checker(
    "subtract each step's trailing mean of the last `window` values, keep only full windows, then take the population variance."
)
def check_training_variance(fn: Callable) -> str:
    r"""Check ``fn(values, window) -> float``: the population variance of x_t minus its trailing mean of w values.

    >>> check_training_variance(lambda values, window: None) == NOT_ATTEMPTED
    True
    >>> check_training_variance(detrended_variance)
    'Correct: your training variance matches qae_lab.analysis.stats.detrended_variance on 12 reward curves.'
    """
    gen = torch.Generator().manual_seed(2)
    if fn([0.0, 0.5, 0.0, 0.5], 2) is None:
        return NOT_ATTEMPTED
    cases = 0
    for n in (6, 40, 120):
        for w in (2, 3, 5, 20):
            w = min(w, n - 1)
            t = torch.arange(n, dtype=torch.float64)
            x = (0.3 + 0.4 * t / n + 0.1 * torch.randn(n, generator=gen, dtype=torch.float64)).tolist()  # trend + noise
            _compare(fn(list(x), w), torch.tensor(detrended_variance(x, w)), f"window={w}, values={x}")
            cases += 1
    return (
        f"Correct: your training variance matches qae_lab.analysis.stats.detrended_variance on {cases} reward curves."
    )


@_checker(
    "sum H~ over real tokens only (multiply by the mask first), cumulatively along each row, and set padding to 0."
)
def check_horizon_weights(fn: Callable) -> str:
    r"""Check ``fn(h_norm, mask, alpha) -> (N, T)``, SA-AH's w_t = exp(-alpha * sum_{s<=t} H~_s), 0 on padding.

    >>> check_horizon_weights(lambda h, m, alpha: None) == NOT_ATTEMPTED
    True
    >>> check_horizon_weights(horizon_weights)
    'Correct: your weights match qae_lab.horizon.horizon_weights on 15 cases.'
    """
    gen = torch.Generator().manual_seed(2)
    if fn(torch.full((1, 2), 0.5), torch.ones(1, 2), 1.0) is None:
        return NOT_ATTEMPTED
    cases = 0
    for n, t in ((1, 1), (2, 5), (4, 9)):
        for alpha in (-0.25, 0.0, 0.1, 0.5, 2.0):
            h = torch.rand(n, t, generator=gen, dtype=torch.float64)  # H~ in [0, 1]
            lengths = torch.randint(1, t + 1, (n,), generator=gen)
            mask = (torch.arange(t)[None, :] < lengths[:, None]).double()  # (N, T) right-padded
            _compare(
                fn(h.clone(), mask.clone(), alpha),
                horizon_weights(h, mask, alpha),
                f"alpha={alpha}, h_norm={h.tolist()}, mask={mask.tolist()}",
            )
            cases += 1
    return f"Correct: your weights match qae_lab.horizon.horizon_weights on {cases} cases."


@_checker("the first step always counts; after it, a step counts when its qae/k differs from the step just before.")
def check_k_changes(fn: Callable) -> str:
    r"""Check ``fn(rows) -> list[int]``: the steps whose ``qae/k`` differs from the step before, the first included.

    >>> check_k_changes(lambda rows: None) == NOT_ATTEMPTED
    True
    >>> check_k_changes(lambda rows: [r["step"] for i, r in enumerate(rows)
    ...                               if i == 0 or r["qae/k"] != rows[i - 1]["qae/k"]])
    'Correct: your change points match qae_lab.knobs.knob_changes on 20 logs.'
    """
    gen = torch.Generator().manual_seed(4)
    if fn([{"step": 1, "qae/k": 0.4}]) is None:
        return NOT_ATTEMPTED
    for case in range(20):
        n = int(torch.randint(1, 30, (1,), generator=gen))
        ks = torch.tensor([0.2, 0.4, 0.6])[torch.randint(0, 3, (n,), generator=gen)]
        ks[torch.rand(n, generator=gen) < 0.7] = 0.4 if case % 2 else 0.6  # long runs of one value
        rows = [{"step": i + 1, "qae/k": float(k), "reward": 0.5} for i, k in enumerate(ks)]
        want = [c["step"] for c in knob_changes(rows)]
        got = fn([dict(r) for r in rows])
        got = list(got) if isinstance(got, (list, tuple)) else got
        if got != want:
            raise _NotYet(f"K values {[r['qae/k'] for r in rows]}: expected steps {want}, got {got}")
    return "Correct: your change points match qae_lab.knobs.knob_changes on 20 logs."


@_checker(
    "a correct answer has a reward of at least `threshold`; only those strictly below their own group's mean get A < 0."
)
def check_neg_correct(fn: Callable) -> str:
    r"""Check ``fn(rewards, group_size, threshold) -> int``: the correct responses (reward >= threshold) that GRPO's
    mean baseline gives A < 0; hand-made edge cases (at the threshold, at the mean) first.

    >>> check_neg_correct(lambda r, g, t: None) == NOT_ATTEMPTED
    True
    >>> def count(r, g, t):
    ...     groups = [r[i:i + g] for i in range(0, len(r), g)]
    ...     return sum(x >= t and x < sum(grp) / g for grp in groups for x in grp)
    >>> check_neg_correct(count)
    'Correct: your count matches the mean baseline on 35 batches of composite rewards.'
    >>> print(check_neg_correct(lambda r, g, t: sum(x > t and x < sum(r) / len(r) for x in r)))
    Not yet: a reward equal to the threshold is correct too: count reward >= threshold.
    rewards [5.0, 7.5, 7.5, 2.0] in groups of 4, threshold 5.0: expected 1, got 0
    """
    gen = torch.Generator().manual_seed(6)
    if fn([7.5, 5.5], 2, 5.0) is None:
        return NOT_ATTEMPTED
    levels = torch.tensor([0.0, 1.75, 2.0, 5.5, 6.75, 7.0, 7.5])  # composite rewards: wrong <= 2, correct >= 5.5
    by_hand = [  # (rewards, G, threshold): the count by hand
        ([5.0, 7.5, 7.5, 2.0], 4, 5.0),  # mean 5.5: the 5.0 is correct (= threshold) and below it -> 1
        ([7.5, 5.5, 5.5, 3.5], 4, 5.0),  # mean 5.5: both 5.5 sit at it, A = 0 -> 0
        ([5.5, 5.5, 5.5, 5.5], 4, 5.5),  # one value, at the threshold and at the mean -> 0
        ([7.5, 0.0, 0.0, 0.0, 5.5, 7.5, 7.5, 7.5], 4, 5.0),  # means 1.875 and 6.875 (the batch's 4.4375): 5.5 -> 1
        ([5.5, 7.5, 0.0, 0.0, 7.5, 7.5, 5.5, 7.5], 4, 5.5),  # means 3.25 and 7.0: the second group's 5.5 -> 1
    ]
    cases = [(torch.tensor(r), g, t) for r, g, t in by_hand]
    for case in range(30):
        g = (4, 8)[case % 2]
        cases.append((levels[torch.randint(0, len(levels), (3 * g,), generator=gen)], g, 5.0))
    for rewards, g, threshold in cases:
        correct = rewards >= threshold
        want = int((correct & (group_advantages(rewards, g, baseline="mean") < 0)).sum())
        got = fn(rewards.tolist(), g, threshold)
        if got != want:
            means = rewards.view(-1, g).mean(dim=1).repeat_interleave(g)
            hint = ""
            if got == int(((rewards > threshold) & (rewards < means)).sum()):
                hint = "a reward equal to the threshold is correct too: count reward >= threshold."
            elif got == int((correct & (rewards <= means)).sum()):
                hint = (
                    "an answer exactly at its group's mean gets A = 0, not a negative advantage: count reward < mean."
                )
            elif got == int((correct & (rewards < rewards.mean())).sum()):
                hint = "that compares with the whole batch's mean: each group (G side by side) has its own mean."
            raise _NotYet(
                f"rewards {rewards.tolist()} in groups of {g}, threshold {threshold}: expected {want}, got {got}", hint
            )
    return f"Correct: your count matches the mean baseline on {len(cases)} batches of composite rewards."


@_checker("subtract the group's mean, then divide by its std (torch.std, which divides by G - 1).")
def check_mean_advantages(fn: Callable) -> str:
    r"""Check ``fn(rewards) -> (G,)``: GRPO's advantages A_i = (R_i - mean R) / (std R + eps) of one group.

    std is Bessel-corrected (``torch.std``); eps = 1e-6 or 0 both pass (they differ by up to 1.5e-5 on a lone
    success of 16).

    >>> check_mean_advantages(lambda r: None) == NOT_ATTEMPTED
    True
    >>> check_mean_advantages(lambda r: (r - r.mean()) / (r.std() + 1e-6))
    'Correct: your advantages match group_advantages(baseline="mean") on 25 groups.'
    """
    if fn(torch.tensor([1.0, 0.0, 0.0, 0.0])) is None:
        return NOT_ATTEMPTED
    gen = torch.Generator().manual_seed(7)
    groups = [torch.tensor([1.0, 0.0, 0.0, 0.0])]  # by hand: mean 0.25, std 0.5, A = 1.5, -0.5, -0.5, -0.5
    for i in range(24):
        g = (2, 4, 8, 16)[i % 4]
        r = (torch.rand(g, generator=gen) < 0.4).float() if i % 2 else torch.randn(g, generator=gen)
        groups.append(r if bool(r.max() > r.min()) else torch.arange(g).float())  # each group mixed
    for r in groups:
        r64 = r.double()
        want = group_advantages(r64, r.numel(), baseline="mean")  # eps = 1e-6
        got = fn(r.clone())
        if _close(got, want) or _close(got, (r64 - r64.mean()) / r64.std()):  # or eps = 0
            continue
        hint = ""
        if _close(got, r64 - r64.mean()):
            hint = "that is R - mean R: divide by the group's std too."
        elif _close(got, (r64 - r64.mean()) / r64.std(unbiased=False)):
            hint = "that divides by the population std: torch.std divides by G - 1."
        _compare(got, want, f"rewards {r.tolist()}", hint)
    return f'Correct: your advantages match group_advantages(baseline="mean") on {len(groups)} groups.'


FORMAT_CASES = (  # completions as TRL hands them to a reward: a list of messages, the assistant's text in the first
    "<reasoning>\n7 + 5 = 12\n</reasoning>\n<answer>\n12\n</answer>",
    "Sure. <reasoning>a\nb</reasoning>\n\n<answer> 7 </answer> bye",
    "<reasoning>x</reasoning><answer>7</answer>",
    "<answer>7</answer><reasoning>a</reasoning>",
    "<reasoning>a</reasoning> and then <answer>7</answer>",
    "<reasoning>a</reasoning>\n<answer>7",
    "<reasoning>a</reasoning> x </reasoning>\n<answer>7</answer>",
    "reasoning: 7 + 5 = 12. answer: 12",
    "",
    "<REASONING>a</REASONING><ANSWER>7</ANSWER>",
)


@_checker(
    "1.0 only where a <reasoning>...</reasoning> block is followed, after nothing but whitespace, by an <answer>...</answer> block."
)
def check_format_reward(fn: Callable) -> str:
    r"""Check ``fn(completions, **kwargs) -> list[float]``, a format reward in TRL's signature (conversational
    completions), against :func:`qae_lab.task.rewards.soft_format_reward`.

    >>> check_format_reward(lambda completions, **kwargs: None) == NOT_ATTEMPTED
    True
    >>> check_format_reward(soft_format_reward)
    'Correct: your reward matches qae_lab.task.rewards.soft_format_reward on 10 completions.'
    """
    completions = [[{"role": "assistant", "content": text}] for text in FORMAT_CASES]
    got = fn(completions, prompts=[[{"role": "user", "content": "q"}]] * len(completions))
    if got is None:
        return NOT_ATTEMPTED
    want = soft_format_reward(completions)
    if not isinstance(got, (list, tuple)) or len(got) != len(want):
        raise _NotYet(f"a reward returns one float per completion: expected {len(want)}, got {got!r}")
    wrong = [(text, g, w) for text, g, w in zip(FORMAT_CASES, got, want) if g != w]
    if wrong:
        text, g, w = wrong[0]
        raise _NotYet(f"{len(wrong)} of {len(want)} differ; for {text!r} expected {w}, got {g}")
    return f"Correct: your reward matches qae_lab.task.rewards.soft_format_reward on {len(want)} completions."


def check_prediction(prediction, change: UpdateChange, *, sign: str = "A > 0") -> str:
    r"""Compare a prediction (``"up"``, ``"down"``, None) with what one update did to the rows of advantage ``sign``.

    >>> c = UpdateChange(["y0 ✓", "y1 ✗", "y2 ✗"], torch.tensor([-1., -2, -3]), torch.tensor([-1.5, -2.5, -3.5]),
    ...                  torch.tensor([1., -0.5, -0.5]), torch.tensor([0, 0, 0]), torch.tensor([3, 3, 3]))
    >>> print(check_prediction("down", c))
    Right: you predicted "down", and all 1 completions with A > 0 became less likely
    (change of log π(y) from -0.500 to -0.500).
    >>> check_prediction("up", c, sign="A < 0")[:60]
    'Wrong: you predicted "up", but all 2 completions with A < 0 '
    >>> check_prediction(None, c) == NO_PREDICTION
    True
    """
    if prediction is None:
        return NO_PREDICTION
    if not isinstance(prediction, str) or prediction.strip().lower() not in PREDICTIONS:
        return f'Not yet: write PREDICTION = "up" or "down" (you wrote {prediction!r}), then run the cells again.'
    if not isinstance(change, UpdateChange):
        raise ValueError(f"change must be a qae_lab.lab.exercises.UpdateChange, got {type(change).__name__}")
    guess = prediction.strip().lower()
    measured = change.direction(sign)  # checks sign
    if measured is None:
        return f"This group has no completion with {sign}: nothing to compare."
    up, down, n = change.moved(sign)
    rows = change.rows(sign)
    d = change.delta[rows]
    spread = f"(change of log π(y) from {d.min().item():+.3f} to {d.max().item():+.3f})"
    if measured in ("up", "down"):
        moved = "less" if measured == "down" else "more"
        verdict = "Right" if measured == guess else "Wrong"
        joint = "and" if measured == guess else "but"
        return (
            f'{verdict}: you predicted "{guess}", {joint} all {n} completions with {sign} became {moved} likely'
            f"{_BREAK}{spread}."
        )
    against = [
        label
        for label, delta, on in zip(change.labels, change.delta.tolist(), rows.tolist())
        if on and (delta > 0 if guess == "down" else delta < 0)
    ]
    return (
        f'Partly: you predicted "{guess}"; {down} of {n} completions with {sign} became less likely and {up} '
        f"more likely{_BREAK}{spread}.{_BREAK}Against your prediction: {', '.join(against)}. One step moves "
        "weights every completion shares, so a completion can move with the others rather than with its own "
        "advantage."
    )


def _check_numbers(**values) -> None:
    """``ValueError`` unless every value is a finite number and ``tolerance`` >= 0."""
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ValueError(f"{name} must be a finite number, got {value!r}")
    if values["tolerance"] < 0:
        raise ValueError(f"tolerance must be >= 0, got {values['tolerance']}")


def check_direction(
    prediction,
    before: float,
    after: float,
    *,
    quantity: str,
    change: str,
    tolerance: float = 0.0,
    interval: tuple[float, float] | None = None,
) -> str:
    r"""A predict-then-run verdict: did ``quantity`` move the way the participant predicted when ``change`` was made?

    A move within ``tolerance`` counts as "same"; over seeds, ``interval`` (the 95% interval of after - before,
    :func:`qae_lab.analysis.claims.verdict`'s) decides instead: "same" where it includes zero, as the tables' rule.

    >>> check_direction("same", 0.50, 0.52, quantity="x", change="y", interval=(-0.01, 0.05))[:6]
    'Right:'

    >>> print(check_direction("up", 0.41, 0.63, quantity="the mean entropy", change="K rose from 0.2 to 0.8"))
    Right: you predicted "up", and the mean entropy went up when K rose from 0.2 to 0.8
    (measured 0.41 -> 0.63).
    >>> check_direction("down", 0.41, 0.63, quantity="the mean entropy", change="K rose")[:52]
    'Wrong: you predicted "down", but the mean entropy we'
    >>> check_direction(None, 1, 2, quantity="x", change="y")[:14]
    'No prediction '
    """
    words = ("up", "down", "same")
    if prediction is None:
        return textwrap.fill(
            f'No prediction yet: set PREDICTION to "up", "down" or "same" (how will {quantity} move when '
            f"{change}?), run that cell, then this one.",
            100,
        )
    if not isinstance(prediction, str) or prediction.strip().lower() not in words:
        return f'Not yet: write PREDICTION = "up", "down" or "same" (you wrote {prediction!r}), then run this again.'
    _check_numbers(before=before, after=after, tolerance=tolerance)
    if interval is not None:
        lo, hi = interval
        if not (math.isfinite(lo) and math.isfinite(hi) and lo <= hi) or tolerance:
            raise ValueError(f"interval must be a finite (lo, hi) with lo <= hi, without a tolerance, got {interval}")
    guess = prediction.strip().lower()
    if interval is not None:  # the tables' rule: an interval that includes zero is no difference
        measured = "same" if interval[0] <= 0 <= interval[1] else "up" if interval[0] > 0 else "down"
    else:
        measured = "same" if abs(after - before) <= tolerance else "up" if after > before else "down"
    moved = "stayed the same" if measured == "same" else f"went {measured}"
    verdict, joint = ("Right", "and") if measured == guess else ("Wrong", "but")
    spread = f", 95% interval of the change [{interval[0]:+.2g}, {interval[1]:+.2g}]" if interval is not None else ""
    return (
        f'{verdict}: you predicted "{guess}", {joint} {quantity} {moved} when {change}{_BREAK}'
        f"(measured {before:.4g} -> {after:.4g}" + (f", tolerance {tolerance:.2g}" if tolerance else "") + spread + ")."
    )


def check_estimate(prediction, measured: float, *, quantity: str, tolerance: float, unit: str = "") -> str:
    r"""A predict-then-run verdict on a number: is ``prediction`` within ``tolerance`` of what was ``measured``?

    The verdict says how far off and in which direction, so that a wrong guess still teaches the effect's size.

    >>> print(check_estimate(60, 79.4, quantity="the zero-advantage share", tolerance=10, unit="%"))
    Off: you guessed 60%, the zero-advantage share measured 79.4% (19.4% higher than your guess;
    within 10% counts as right).
    >>> check_estimate(75, 79.4, quantity="x", tolerance=10)[:6], check_estimate(None, 1, quantity="x", tolerance=1)[:12]
    ('Right:', 'No guess yet')
    """
    if prediction is None:
        return f"No guess yet: set PREDICTION to a number ({quantity}), run that cell, then this one."
    if isinstance(prediction, bool) or not isinstance(prediction, (int, float)) or not math.isfinite(prediction):
        return f"Not yet: write PREDICTION as a number, such as 50 (you wrote {prediction!r}), then run this again."
    if unit == "%" and 0 < prediction <= 1 < measured:  # a share written as a fraction
        return (
            f"Not yet: PREDICTION is in percent: {prediction:g} means {prediction:g}%; did you mean "
            f"{100 * prediction:g}? Write it in percent and run this again."
        )
    _check_numbers(measured=measured, tolerance=tolerance)
    gap = measured - prediction
    if abs(gap) <= tolerance:
        return (
            f"Right: you guessed {prediction:.4g}{unit}, {quantity} measured {measured:.4g}{unit}"
            f" (within {tolerance:.2g}{unit})."
        )
    side = "higher" if gap > 0 else "lower"
    return (
        f"Off: you guessed {prediction:.4g}{unit}, {quantity} measured {measured:.4g}{unit}"
        f" ({abs(gap):.3g}{unit} {side} than your guess;{_BREAK}within {tolerance:.2g}{unit} counts as right)."
    )


@_checker("dH ~= -Cov under pi of (log pi_a, dz_a): a covariance weighted by pi = softmax(z), over the last axis.")
def check_entropy_change(fn: Callable) -> str:
    r"""Check ``fn(z, dz) -> dH``, (..., V) -> (...): the first-order entropy change of pi = softmax(z) when its logits
    move by dz, dH ~= -Cov_{a~pi}(log pi_a, dz_a) (Cui et al. 2025). The steps are large, so the exact change fails.

    >>> check_entropy_change(lambda z, dz: None) == NOT_ATTEMPTED
    True
    >>> check_entropy_change(entropy_change_first_order)
    'Correct: your dH matches qae_lab.toys.bandit.entropy_change_first_order on 6 states and batches of states.'
    """
    if fn(torch.zeros(3, dtype=torch.float64), torch.zeros(3, dtype=torch.float64)) is None:
        return NOT_ATTEMPTED
    gen = torch.Generator().manual_seed(0)
    cases = 0
    for shape in ((2,), (5,), (4, 6)):  # one state of 2 or 5 tokens, a batch of 4 states of 6
        for scale in (0.5, 2.0):  # nearly flat and peaked states
            z = scale * torch.randn(shape, generator=gen, dtype=torch.float64)
            dz = torch.randn(shape, generator=gen, dtype=torch.float64)
            _compare(
                fn(z.clone(), dz.clone()),
                entropy_change_first_order(z, dz),
                f"dH for z = {[round(v, 3) for v in z.flatten().tolist()[:6]]}, dz = "
                f"{[round(v, 3) for v in dz.flatten().tolist()[:6]]}",
            )
            cases += 1
    return (
        f"Correct: your dH matches qae_lab.toys.bandit.entropy_change_first_order on {cases} states and batches of "
        "states."
    )


@_checker("the sequence entropy sums, over every prefix, the prefix's probability times its next-token entropy.")
def check_sequence_entropy(fn: Callable) -> str:
    r"""Check ``fn(z) -> H`` for logit tables z of shape (n, V): the sequence entropy in nats.

    >>> check_sequence_entropy(lambda z: None) == NOT_ATTEMPTED
    True
    >>> check_sequence_entropy(sequence_entropy)
    'Correct: your entropy matches qae_lab.toys.seqpolicy.sequence_entropy on 12 policies.'
    """
    gen = torch.Generator().manual_seed(0)
    if fn(torch.zeros(3, 2, dtype=torch.float64)) is None:
        return NOT_ATTEMPTED
    cases = 0
    for vocab, length in ((2, 1), (2, 3), (3, 2), (4, 3)):
        for scale in (0.0, 1.0, 3.0):
            z = scale * torch.randn(n_prefixes(vocab, length), vocab, generator=gen, dtype=torch.float64)
            _compare(fn(z.clone()), sequence_entropy(z), f"V={vocab}, L={length}, logits {z.tolist()}: the entropy")
            cases += 1
    return f"Correct: your entropy matches qae_lab.toys.seqpolicy.sequence_entropy on {cases} policies."
