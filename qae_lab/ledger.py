r"""The entropy ledger: the first-order entropy change of one update, and which samples it comes from.

Cui et al. 2025, "The Entropy Mechanism of Reinforcement Learning for Reasoning Language Models"
(arXiv 2505.22617, Lemma 1): for a softmax policy pi(.|s) = softmax(z_s), a logit step dz_s changes
the entropy of the state by, to first order,

    dH(s) ~= -Cov_{a~pi(.|s)}( log pi(a|s), dz_{s,a} )                          (Cui et al.'s Lemma 1)

Each public function checks its input and calls a private core that :func:`qae_lab.loss.grpo_loss` calls directly.
Implementer's notes: docs/implementation.md, section ``qae_lab.ledger``.
"""

from __future__ import annotations

import torch

from qae_lab._checks import host_floats, as_real_tensor, check_choice, check_finite_scalar, check_mask, checking_values
from qae_lab.entropy_controls import _clip_active
from qae_lab.methods import LEDGER_PARTS

__all__ = [
    "LEDGER_FORMS",
    "LEDGER_PARTS",
    "square_sums",
    "entropy_change_terms",
    "update_advantages",
    "ledger_parts",
    "batch_ledger",
    "bandit_ledger",
]

LEDGER_FORMS = ("npg", "pg", "reinforce")


def _same_shape(x, shape, name: str) -> torch.Tensor:
    t = as_real_tensor(x.detach() if isinstance(x, torch.Tensor) else x, name)
    if t.dim() == 1 and len(shape) == 2 and t.shape[0] == shape[0]:
        return t[:, None].expand(shape)  # (N,) response-level -> (N, T)
    if tuple(t.shape) != tuple(shape):
        raise ValueError(f"{name} must have shape {tuple(shape)} (or ({shape[0]},) per response), got {tuple(t.shape)}")
    return t


def _logps(logps) -> torch.Tensor:
    return as_real_tensor(logps.detach() if isinstance(logps, torch.Tensor) else logps, "logps", ndim=2)


def _entropies(entropies, lp: torch.Tensor) -> torch.Tensor:
    h = _same_shape(entropies, lp.shape, "entropies").to(lp)
    if checking_values() and bool((h < 0).any()):
        raise ValueError("entropies must be >= 0 (nats)")
    return h


def square_sums(logits) -> tuple[torch.Tensor, torch.Tensor]:
    r"""sum_b pi_b^2 and sum_b pi_b^2 log pi_b of pi = softmax(logits): (..., V) -> two (...) (eq. L3's sums).

    >>> q, ql = square_sums(torch.zeros(1, 4))   # uniform over 4: 4 (1/4)^2 = 1/4, and 1/4 log(1/4)
    >>> round(float(q), 4), round(float(ql), 4)
    (0.25, -0.3466)
    """
    log_pi = torch.log_softmax(as_real_tensor(logits, "logits"), -1)
    pi_sq = (2 * log_pi).exp()  # pi^2
    return pi_sq.sum(-1), (pi_sq * log_pi).sum(-1)


def entropy_change_terms(logps, entropies, advantages, *, form: str = "npg", sums=None) -> torch.Tensor:
    r"""Each sampled token's share of the first-order entropy change, per unit step (eq. L1 / L2 / L3): (N, T).

    Cui et al. 2025 (arXiv 2505.22617, Lemma 1 and its NPG / PG propositions), with the state's exact
    centring E_{a~pi}[log pi] = -H(s):

        npg:        d_t = -(log pi_t + H_t) A_t                                   (logit step eta A)
        pg:         d_t = -(log pi_t + H_t) pi_t A_t                              (eta pi A)
        reinforce:  d_t = -A_t [pi_t (log pi_t + H_t) - sum_b pi_b^2 (log pi_b + H_t)]   (eta A (e_a - pi))

    ``logps``: (N, T) of the sampled tokens (detached); ``entropies``: (N, T) H(s_t) in nats; ``advantages``: (N,)
    or (N, T), as the loss applies them; ``sums``: ``"reinforce"`` only, :func:`square_sums` of the logits.
    Positive where the token's update raises the entropy. A likely token (log pi = -0.1 above -H = -0.5)
    rewarded lowers the entropy; punished, raises it:

    >>> entropy_change_terms(torch.tensor([[-0.1, -2.0]]), torch.tensor([[0.5, 0.5]]), torch.tensor([1.0]))
    tensor([[-0.4000,  1.5000]])
    >>> entropy_change_terms(torch.tensor([[-0.1]]), torch.tensor([[0.5]]), torch.tensor([-1.0]))
    tensor([[0.4000]])

    At a uniform state every form gives 0 (log pi + H = 0 for every token):

    >>> import math
    >>> z = torch.zeros(1, 1, 4); lp = torch.log_softmax(z, -1)[..., 0]; h = torch.full((1, 1), math.log(4))
    >>> float(entropy_change_terms(lp, h, torch.tensor([1.0]), form="reinforce", sums=square_sums(z))) == 0.0
    True
    """
    check_choice(form, "form", LEDGER_FORMS)
    lp = _logps(logps)
    h = _entropies(entropies, lp)
    a = _same_shape(advantages, lp.shape, "advantages").to(lp)
    if (sums is not None) != (form == "reinforce"):
        raise ValueError("sums must be given with form='reinforce' (square_sums of the logits), and only then")
    if sums is not None:
        sums = tuple(_same_shape(x, lp.shape, name).to(lp) for x, name in zip(sums, ("sums[0]", "sums[1]")))
    return _change_terms(lp, h, a, form, sums)


def _change_terms(lp, h, a, form: str = "npg", sums=None) -> torch.Tensor:
    """:func:`entropy_change_terms` of checked (N, T) tensors."""
    if form == "npg":  # L1: d_t = -(log pi_t + H_t) A_t
        return -(lp + h) * a
    d = -(lp + h) * lp.exp() * a  # L2: d_t = -(log pi_t + H_t) pi_t A_t
    if form == "pg":
        return d
    q, ql = sums  # L3: d_t = -A_t [pi_t (log pi_t + H_t) - (sum_b pi_b^2 log pi_b + H_t sum_b pi_b^2)]
    return d + a * (ql + h * q)


def update_advantages(advantages, log_ratio=None, clipped=None) -> torch.Tensor:
    r"""The advantage each token's gradient actually carries: A_t r_t, and 0 where PPO's clip stops it (eq. L4).

    The clipped surrogate min(r A, clip(r, 1 - eps_low, 1 + eps_high) A) has gradient r_t A_t grad log pi_t where
    the clip is inactive and 0 where it is active (:func:`qae_lab.entropy_controls.ppo_clip_active`); on a step's
    first pass over its own samples r_t = 1 and nothing is clipped. ``advantages``: (N, T) (horizon weights and
    normaliser included); ``log_ratio``: None (r = 1) or (N, T) / (N, 1) (GSPO); ``clipped``: None or (N, T) /
    (N, 1) bool. Returns (N, T).

    >>> update_advantages(torch.tensor([[1.0, -1.0]]), torch.tensor([[0.1, 0.0]]), torch.tensor([[False, True]]))
    tensor([[1.1052, -0.0000]])
    """
    a = as_real_tensor(
        advantages.detach() if isinstance(advantages, torch.Tensor) else advantages, "advantages", ndim=2
    )
    if log_ratio is not None:
        log_ratio = as_real_tensor(
            log_ratio.detach() if isinstance(log_ratio, torch.Tensor) else log_ratio, "log_ratio", ndim=2
        )
    if clipped is not None:
        clipped = torch.as_tensor(clipped, device=a.device)
        if clipped.dim() != 2 or clipped.shape[0] != a.shape[0] or clipped.shape[1] not in (1, a.shape[1]):
            raise ValueError(
                f"clipped must have shape {tuple(a.shape)} or ({a.shape[0]}, 1), got {tuple(clipped.shape)}"
            )
    return _update_advantages(a, log_ratio, clipped)


def _update_advantages(a, log_ratio, clipped) -> torch.Tensor:
    if log_ratio is not None:
        a = a * log_ratio.to(a).exp()  # (N, T) * (N, T) or (N, 1)
    return a if clipped is None else a * (~clipped.bool()).to(a)


def ledger_parts(
    terms, advantages, weights, hard_rows=None, *, normaliser: float | None = None, added: float = 0.0
) -> dict[str, float]:
    r"""The ledger: the weighted sum of (N, T) terms, split by the sign of A and by the prompt's regime (eq. L5).

    ``advantages``: (N,) or (N, T), those the terms were computed with (their sign splits); ``weights``: (N, T),
    non-negative (the completion mask of a batch, or pi for a bandit's expectation); ``hard_rows``: (N,) bool, the
    response's prompt hard for QAE (p <= 1-K), or None (the regime parts stay 0). The sum is divided by
    ``normaliser`` (> 0), or by the weights' sum plus ``added`` (tokens outside ``weights`` that count: the rows a
    sparse update left out). Returns Python floats over :data:`LEDGER_PARTS`: ``dh`` = ``dh_pos`` + ``dh_neg``
    (A > 0 / A < 0) = ``dh_hard`` + ``dh_easy`` (with ``hard_rows``), and the four cells ``dh_hard_pos`` ...

    >>> terms = torch.tensor([[-0.4], [1.5], [0.2]])
    >>> hard = torch.tensor([True, True, False])
    >>> parts = ledger_parts(terms, torch.tensor([1.0, -1.0, -1.0]), torch.ones(3, 1), hard)
    >>> {k: round(v, 4) for k, v in parts.items() if k in ("dh", "dh_pos", "dh_neg", "dh_easy", "dh_hard_neg")}
    {'dh': 0.4333, 'dh_pos': -0.1333, 'dh_neg': 0.5667, 'dh_easy': 0.0667, 'dh_hard_neg': 0.5}
    """
    d = as_real_tensor(terms, "terms", ndim=2)
    a = _same_shape(advantages, d.shape, "advantages").to(d)
    w = _same_shape(weights, d.shape, "weights").to(d)
    if checking_values() and bool((w < 0).any()):
        raise ValueError("weights must be >= 0")
    if normaliser is not None and check_finite_scalar(normaliser, "normaliser") <= 0:
        raise ValueError(f"normaliser must be > 0, got {normaliser}")
    hard = None if hard_rows is None else check_mask(hard_rows, (d.shape[0],), "hard_rows").to(d.device) > 0
    return _ledger_parts(d, a, w, hard, normaliser, added)


def _ledger_parts(d, a, w, hard, normaliser=None, added=0.0) -> dict[str, float]:
    """:func:`ledger_parts` of checked (N, T) tensors and (N,) bool ``hard`` (or None)."""
    wd = w * d  # (N, T)
    if hard is None:
        hard = easy = torch.zeros(d.shape[0], dtype=torch.bool, device=d.device)
    else:
        hard, easy = hard.bool(), ~hard.bool()
    names, sums = [], []
    for sign, sel in (("pos", a > 0), ("neg", a < 0)):
        names.append(f"dh_{sign}")
        sums.append((wd * sel).sum())
        for regime, rows in (("hard", hard), ("easy", easy)):
            names.append(f"dh_{regime}_{sign}")
            sums.append((wd * (sel & rows[:, None])).sum())
    *values, total = host_floats([*sums, w.sum()])  # one read back to the host, the weights' sum with the parts
    n = total + float(added) if normaliser is None else float(normaliser)
    if n <= 0:
        return dict.fromkeys(LEDGER_PARTS, 0.0)  # no token: no change
    out = {name: v / n for name, v in zip(names, values)}
    out["dh"] = out["dh_pos"] + out["dh_neg"]  # A = 0 contributes nothing
    out["dh_hard"] = out["dh_hard_pos"] + out["dh_hard_neg"]
    out["dh_easy"] = out["dh_easy_pos"] + out["dh_easy_neg"]
    return {k: out[k] for k in LEDGER_PARTS}


def batch_ledger(
    logps,
    entropies,
    advantages,
    mask,
    hard_rows=None,
    *,
    old_logps=None,
    sequence_level: bool = False,
    epsilon_low: float = 0.2,
    epsilon_high: float = 0.2,
    per_sequence: bool = False,
    skipped_tokens: float = 0.0,
    skipped_rows: int = 0,
) -> dict[str, float]:
    r"""The ledger of one micro-batch of the loss, as :class:`qae_lab.train.trainer.QAETrainer` logs it (``ledger/*``).

    The terms of eq. L1 (form "npg") with the advantages the update carries (eq. L4: the importance ratio against
    ``old_logps``, per token or per sequence as GSPO, 0 where the clip [1 - eps_low, 1 + eps_high] is active),
    split by :func:`ledger_parts` (eq. L5) and normalised as the loss type normalises its tokens: by the token count
    (``bnpo``, ``dapo``), or per sequence and then over the rows (``per_sequence``: ``grpo``). Rows left out of the
    forward (sparse updates: A = 0, no share) still count through ``skipped_tokens`` / ``skipped_rows``.
    ``logps``, ``entropies``, ``mask``: (N, T); ``advantages``: (N,) or (N, T), as the loss applies them;
    ``old_logps``: (N, T), or None (the first pass: ratio 1, no clip).

    >>> lp, h = torch.tensor([[-0.1, -2.0]]), torch.tensor([[0.5, 0.5]])
    >>> round(batch_ledger(lp, h, torch.tensor([1.0]), torch.ones(1, 2), torch.tensor([True]))["dh"], 6)
    0.55
    >>> far = lp - 1.0   # sampled when these tokens were e times less likely: the ratio e is clipped
    >>> batch_ledger(lp, h, torch.tensor([1.0]), torch.ones(1, 2), old_logps=far)["dh"]
    0.0
    """
    lp = _logps(logps)
    m = check_mask(mask, lp.shape).to(lp.device)
    a = _same_shape(advantages, lp.shape, "advantages").to(lp)
    old = None if old_logps is None else _same_shape(old_logps, lp.shape, "old_logps").to(lp)
    lo, hi = check_finite_scalar(epsilon_low, "epsilon_low"), check_finite_scalar(epsilon_high, "epsilon_high")
    if lo < 0 or hi < 0:
        raise ValueError(f"epsilon_low and epsilon_high must be >= 0, got {epsilon_low}, {epsilon_high}")
    hard = None if hard_rows is None else check_mask(hard_rows, (lp.shape[0],), "hard_rows").to(lp.device) > 0
    h = _entropies(entropies, lp)
    return _batch_ledger(lp, h, a, m, hard, old, sequence_level, lo, hi, per_sequence, skipped_tokens, skipped_rows)


def _batch_ledger(lp, h, a, m, hard, old, sequence_level, lo, hi, per_sequence, skipped_tokens=0.0, skipped_rows=0):
    """:func:`batch_ledger` of checked, detached (N, T) tensors and (N,) bool ``hard`` (or None)."""
    log_ratio = clipped = None
    if old is not None:
        log_ratio = (lp - old) * m  # (N, T)
        if sequence_level:  # GSPO: one ratio per response, the mean log-ratio over its tokens
            log_ratio = log_ratio.sum(-1, keepdim=True) / m.sum(-1, keepdim=True).clamp(min=1.0)  # (N, 1)
        clipped = _clip_active(log_ratio.expand(lp.shape), a, lo, hi)  # (N, T)
    a_upd = _update_advantages(a, log_ratio, clipped)  # (N, T)
    terms = _change_terms(lp, h, a_upd)  # (N, T)
    if per_sequence:
        weights = m / m.sum(-1, keepdim=True).clamp(min=1.0)  # each response's tokens weigh 1 / |y_i|
        normaliser = float(m.shape[0] + skipped_rows)
        if normaliser <= 0:
            return dict.fromkeys(LEDGER_PARTS, 0.0)
        return _ledger_parts(terms, a_upd, weights, hard, normaliser=normaliser)
    # the token count, read back with the parts in one transfer; the rows left out still count in it
    return _ledger_parts(terms, a_upd, m, hard, added=skipped_tokens)


def bandit_ledger(z, r, b, *, hard: bool | None = None) -> dict[str, float]:
    r"""The ledger of QAE's softmax bandit (arXiv 2509.22611, sec. 4): the identity's step dz = pi (r - b).

    The expectation over actions y ~ pi of the "pg" shares (eq. L2) with A(y) = r(y) - b equals, per unit step, the
    identity's first-order change -Cov_pi(log pi, pi (r - b)) (:func:`qae_lab.toys.bandit.identity_entropy_change`
    with eta = 1), split by the sign of r(y) - b. ``z``, ``r``: (A,) logits and rewards; ``b``: the baseline;
    ``hard``: the prompt's regime, to fill the regime parts (None: left at 0).

    >>> from qae_lab.toys.bandit import identity_entropy_change
    >>> z, r = torch.tensor([2.0, 0.0, -1.0]), torch.tensor([0.0, 1.0, 0.0])   # the likely action is wrong
    >>> parts = bandit_ledger(z, r, 0.4)
    >>> round(parts["dh"], 6) == round(float(identity_entropy_change(z, r, torch.tensor([0.4]), 1.0)[0]), 6)
    True
    >>> round(parts["dh_pos"], 4), round(parts["dh_neg"], 4)   # the success is unlikely: both parts raise H
    (0.0129, 0.0991)
    """
    z = as_real_tensor(z, "z", ndim=1).double()
    r = as_real_tensor(r, "r", ndim=1).double()
    if r.shape != z.shape:
        raise ValueError(f"r must have shape {tuple(z.shape)} like z, got {tuple(r.shape)}")
    b = check_finite_scalar(b, "b")
    log_pi = torch.log_softmax(z, -1)  # (A,)
    h = -(log_pi.exp() * log_pi).sum()
    a = (r - b)[:, None]  # (A, 1)
    terms = _change_terms(log_pi[:, None], h.expand(z.shape[0], 1), a, form="pg")  # (A, 1)
    rows = None if hard is None else torch.full(z.shape, bool(hard))
    return _ledger_parts(terms, a, log_pi.exp()[:, None], rows, normaliser=1.0)
