r"""The exact sequence policy's sampled group update, its entropy ledgers, training, and SA-AH's update variance.

One update as the trainer (:class:`qae_lab.train.trainer.QAETrainer`) makes it, with the same functions: G
responses per prompt from the exact pi(y); advantages A_i (:func:`qae_lab.advantages.group_advantages`, QAE arXiv
2509.22611); SA-AH / AH horizon weights w_t on H(s_t)/log V (:func:`qae_lab.horizon.selective_horizon_weights`,
arXiv 2606.05434) with the sum(w) normaliser c; then ``num_iterations`` passes of PPO's clipped surrogate with
DAPO's Clip-Higher range (eps_high = 0.28 against eps_low = 0.2),

    l_t = -min(r_t A~_t, clip(r_t, 1 - eps_low, 1 + eps_high) A~_t),  r_t = exp(log pi_t - log pi_old,t),
    A~_t = A_i w_t c,   L = sum_t l_t / N_tok   (TRL's "bnpo": a seed's tokens, N_tok = P G L)       (U1)

Implementer's notes: docs/implementation.md, section ``qae_lab.toys.seqpolicy_training``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch

from qae_lab.methods import DEFAULT_BASELINE, DEFAULT_K, DEFAULT_QUANTILE_METHOD, DEFAULT_SCALE
from qae_lab._checks import (
    as_real_tensor,
    check_choice,
    check_finite_scalar,
    check_group_size,
    check_int,
    check_k,
    check_positive,
)
from qae_lab.advantages import BASELINES, QUANTILE_METHODS, SCALES, group_advantages, hard_regime
from qae_lab.entropy_controls import ppo_clip_active
from qae_lab.horizon import normalise_entropy, normaliser_factor, selective_horizon_weights
from qae_lab.ledger import LEDGER_FORMS, LEDGER_PARTS, entropy_change_terms, square_sums, update_advantages
from qae_lab.toys.bandit import _adam_ascent
from qae_lab.toys.seqpolicy import (
    _advantage_table,
    _expected,
    _log_softmax,
    _logits,
    _snapshot,
    sequence_positions,
    space_of,
    split_parts,
    success_rate,
)

__all__ = ["OPTIMIZERS", "UpdateSettings", "group_update", "simulate", "update_variance"]

OPTIMIZERS = ("sgd", "adam")


@dataclass(frozen=True)
class UpdateSettings:
    r"""The knobs of one group update (eq. U1), checked once.

    >>> UpdateSettings(baseline="mean", epsilon_high=0.28, num_iterations=2).epsilon_high
    0.28
    >>> UpdateSettings(k=1.5)
    Traceback (most recent call last):
    ValueError: k must lie in the open interval (0, 1), got 1.5
    """

    group_size: int = 8  # G, responses sampled per prompt (>= 2)
    baseline: str = DEFAULT_BASELINE  # 'mean' (GRPO) or 'quantile' (QAE)
    k: float = DEFAULT_K  # QAE's K in (0, 1); also the regime split of the ledgers for the mean baseline
    quantile_method: str = DEFAULT_QUANTILE_METHOD  # 'paper' or 'linear' (qae_lab.advantages.quantile_baseline)
    scale: str = DEFAULT_SCALE  # A / the group's std ('group'), the seed's batch std ('batch') or 1 ('none', Dr.GRPO)
    eta: float = 10.0  # the SGD step size on the logits (Adam: its learning rate), > 0
    optimizer: str = "sgd"  # 'sgd' (plain) or 'adam' (betas 0.9, 0.999, eps 1e-8)
    num_iterations: int = 1  # passes over each sampled batch (PPO epochs), >= 1; the ratio leaves 1 from the second
    epsilon_low: float = 0.2  # PPO's lower clip range, >= 0
    epsilon_high: float = 0.2  # the upper clip range, >= 0 (DAPO's Clip-Higher: 0.28)
    alpha: float = 0.0  # the horizon weights' entropy coefficient (0: plain GRPO)
    selective: bool = True  # True: SA-AH (only A < 0 rollouts weighted); False: AH (every rollout)

    def __post_init__(self):
        check_group_size(self.group_size, self.group_size)
        check_choice(self.baseline, "baseline", BASELINES)
        check_k(self.k)
        check_choice(self.quantile_method, "quantile_method", QUANTILE_METHODS)
        check_choice(self.scale, "scale", SCALES)
        check_positive(self.eta, "eta")
        check_choice(self.optimizer, "optimizer", OPTIMIZERS)
        check_int(self.num_iterations, "num_iterations", 1)
        for name in ("epsilon_low", "epsilon_high"):
            if check_finite_scalar(getattr(self, name), name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        check_finite_scalar(self.alpha, "alpha")
        if not isinstance(self.selective, bool):
            raise ValueError(f"selective must be True (SA-AH) or False (AH), got {self.selective!r}")


def _batch(logits, rewards, settings) -> tuple[torch.Tensor, torch.Tensor]:
    """Checked (S, P, n, V) logits and (S, P, Y) 0/1 rewards, float64, and settings."""
    z = _logits(logits)
    v, l = space_of(z)
    if z.dim() != 4:
        raise ValueError(f"logits must have shape (S, P, n_prefixes, V), got {tuple(z.shape)}")
    r = as_real_tensor(rewards, "rewards").to(z)
    if r.shape != z.shape[:2] + (v**l,) or not bool(((r == 0) | (r == 1)).all()):
        raise ValueError(f"rewards must be 0/1 of shape {tuple(z.shape[:2]) + (v**l,)}, got {tuple(r.shape)}")
    if not isinstance(settings, UpdateSettings):
        raise ValueError(f"settings must be an UpdateSettings, got {type(settings).__name__}")
    return z, r


def _advantages(r: torch.Tensor, s: UpdateSettings) -> torch.Tensor:
    """Group advantages of (S, P, G) rewards; scale='batch' takes each seed's batch std."""
    kw = {"baseline": s.baseline, "k": s.k, "quantile_method": s.quantile_method, "scale": s.scale}
    if s.scale != "batch":
        return group_advantages(r.reshape(-1), s.group_size, **kw).view(r.shape)
    return torch.stack([group_advantages(rs.reshape(-1), s.group_size, **kw).view(rs.shape) for rs in r])


def _rows(table: torch.Tensor, prefixes: torch.Tensor) -> torch.Tensor:
    """table[..., s_t, :] at every sampled position: (S, P, n, V) and (S, P, G, L) -> (S, P, G, L, V)."""
    n_seeds, n_prompts = prefixes.shape[:2]
    idx = prefixes.reshape(n_seeds, n_prompts, -1, 1).expand(-1, -1, -1, table.shape[-1])  # (S, P, G L, V)
    return table.gather(2, idx).view(*prefixes.shape, table.shape[-1])


def _pass(z: torch.Tensor, pos: tuple, adv: torch.Tensor, lp_old: torch.Tensor, s: UpdateSettings):
    """One pass of eq. U1: grad (S, P, n, V); A~, clipped, log pi(y_t|s_t), H(s_t) (S, P, G, L); log pi(.|s_t)."""
    n_seeds, n_prompts, g = adv.shape
    tokens, prefixes = pos  # (S, P, G, L) each
    v, l = z.shape[-1], tokens.shape[-1]
    zg = z.detach().clone().requires_grad_(True)
    rows = _log_softmax(_rows(zg, prefixes))  # (S, P, G, L, V): log pi_theta(.|s_t)
    lp = rows.gather(-1, tokens[..., None]).squeeze(-1)  # (S, P, G, L): log pi_theta of each sampled token
    with torch.no_grad():
        h = -(rows.exp() * rows).sum(-1)  # (S, P, G, L): H(s_t)
        mask = torch.ones(n_seeds * n_prompts * g, l, dtype=z.dtype)
        # w_{i,t} = exp(-alpha sum_{s<=t} H~_s) where SA-AH (A_i < 0) or AH applies, H~ = H / log V
        w = selective_horizon_weights(
            normalise_entropy(h, v).reshape(-1, l), mask, adv.reshape(-1), s.alpha, selective=s.selective
        ).view(lp.shape)
        # c = sum(m) / sum(w) over each seed's batch, so that the loss is sum(w l) / sum(w): the token-level
        # factor of one seed's batch is the per-row factor of that batch laid out as one row
        c = normaliser_factor(w.reshape(n_seeds, -1), mask.view(n_seeds, -1), per_sequence=True)  # (S, 1)
        a_tok = adv[..., None] * w * c[..., None, None]  # (S, P, G, L): A~_t = A_i w_t c
    log_ratio = lp - lp_old
    ratio = log_ratio.exp()
    # l_t = -min(r_t A~_t, clip(r_t, 1 - eps_low, 1 + eps_high) A~_t); bnpo: sum / N_tok per seed
    per_token = -torch.min(ratio * a_tok, ratio.clamp(1 - s.epsilon_low, 1 + s.epsilon_high) * a_tok)
    loss = per_token.sum((1, 2, 3)) / (n_prompts * g * l)  # (S,)
    (grad,) = torch.autograd.grad(loss.sum(), zg)
    clipped = ppo_clip_active(
        log_ratio.detach().reshape(-1, l), a_tok.reshape(-1, l), s.epsilon_low, s.epsilon_high
    ).view(lp.shape)
    return grad, a_tok, rows.detach(), clipped, lp.detach(), h


def _step(z: torch.Tensor, grad: torch.Tensor, s: UpdateSettings, state: dict | None):
    """z <- z - eta grad (SGD), or one Adam step down grad; returns (z, state)."""
    if s.optimizer == "sgd":
        return z - s.eta * grad, state
    return _adam_ascent(z, -grad, state or {}, eta=s.eta, scalar=False)


def _sample(snap, rewards: torch.Tensor, s: UpdateSettings, generator):
    """G responses per prompt from the exact pi(y): (tokens, prefixes) (S, P, G, L), rewards, advantages."""
    pi_y = snap.log_pi_y.exp()  # (S, P, Y)
    n_seeds, n_prompts, y_count = pi_y.shape
    y = torch.multinomial(pi_y.reshape(-1, y_count), s.group_size, replacement=True, generator=generator).view(
        n_seeds, n_prompts, s.group_size
    )  # (S, P, G)
    r = rewards.expand(pi_y.shape).gather(-1, y)  # (S, P, G)
    v, l = space_of(snap.lp)
    return sequence_positions(y, v, l), r, _advantages(r, s)


def _estimator_shares(rows, lp, h, lp_old, a_tok, clipped) -> dict[str, torch.Tensor]:
    """One pass's per-token terms (S, P, G, L) of every form (:func:`qae_lab.ledger.entropy_change_terms`)."""
    l, v = lp.shape[-1], rows.shape[-1]
    # A~_t r_t, and 0 where the clip stops the gradient (the first pass: r = 1, nothing clipped)
    a_upd = update_advantages(a_tok.reshape(-1, l), (lp - lp_old).reshape(-1, l), clipped.reshape(-1, l))
    sums = {"reinforce": square_sums(rows.reshape(-1, l, v))}  # (S P G, L) each: sum_b pi_b^2, sum_b pi_b^2 log pi_b
    return {
        form: entropy_change_terms(lp.reshape(-1, l), h.reshape(-1, l), a_upd, form=form, sums=sums.get(form)).view(
            lp.shape
        )
        for form in LEDGER_FORMS
    }


def _ledgers(snap, rewards, s, pos, rows0, adv, hard, passes) -> dict[str, torch.Tensor]:
    """Sampled (LG1-2) and expected (LG3) ledgers of the first pass, estimators of ``passes`` (A~, form -> terms)."""
    n_seeds, n_prompts, g = adv.shape
    (tokens, prefixes), (a_tok, first) = pos, passes[0]
    unit = s.eta / (n_prompts * g * tokens.shape[-1]) / n_prompts  # the loss's 1/N_tok, then the mean over prompts
    split = (adv.reshape(n_seeds, -1), hard[..., None].expand(adv.shape).reshape(n_seeds, -1))  # A, hard (S, P G)
    g_rows = _rows(snap.g, prefixes)  # (S, P, G, L, V)
    # u_t = grad H . grad log pi(y_t|s_t) = g_{s_t, y_t} - sum_b pi(b|s_t) g_{s_t, b}   (eq. LG2)
    u_t = g_rows.gather(-1, tokens[..., None]).squeeze(-1) - (rows0.exp() * g_rows).sum(-1)
    nan = math.nan if s.optimizer != "sgd" else 1.0  # Adam's step is not a sum over samples
    share = (a_tok * u_t).sum(-1) * unit  # (S, P, G): sample i's share eta/N_tok sum_t A~_t u_t
    out = {f"sampled/{key}": val * nan for key, val in split_parts(share.reshape(n_seeds, -1), *split).items()}
    # the part through H(s_t) alone: rho(s_t) times the token's own step's change of H(s_t) (eq. LG5 = form L3)
    rho_t = snap.rho.gather(-1, prefixes.flatten(-2)).view(prefixes.shape)  # (S, P, G, L)
    out["sampled/dh_state"] = (rho_t * first["reinforce"]).sum((1, 2, 3)) * unit * nan
    out["sampled/dh_visit"] = out["sampled/dh"] - out["sampled/dh_state"]
    exact = s.optimizer == "sgd" and s.alpha == 0 and s.scale != "batch"
    if exact:
        expected = _expected(
            snap, rewards, _advantage_table(g, s.baseline, s.k, s.quantile_method, s.scale), s.k, s.eta
        )
    for key in LEDGER_PARTS:
        out[f"expected/{key}"] = expected[key].mean(-1) if exact else torch.full((n_seeds,), math.nan)
    for form in LEDGER_FORMS:
        terms = sum(t[form] for _, t in passes)  # (S, P, G, L), summed over the passes
        parts = split_parts(terms.sum(-1).reshape(n_seeds, -1) * unit, *split)
        out.update({f"estimator_{form}/{key}": val for key, val in parts.items()})
    return out


def _update(z0, rewards, s: UpdateSettings, generator, state, snap):
    """:func:`group_update` on checked inputs and z0's snapshot; returns (z, metrics, state, z's snapshot)."""
    pos, r, adv = _sample(snap, rewards, s, generator)
    rows0 = _rows(snap.lp, pos[1])  # (S, P, G, L, V): log pi_old(.|s_t)
    lp_old = rows0.gather(-1, pos[0][..., None]).squeeze(-1)  # (S, P, G, L)
    hard = hard_regime(r.sum(-1), s.group_size, s.k)  # (S, P)
    z, clip, passes = z0, [], []
    for _ in range(s.num_iterations):
        grad, a_tok, rows, clipped, lp, h = _pass(z, pos, adv, lp_old, s)
        passes.append((a_tok, _estimator_shares(rows, lp, h, lp_old, a_tok, clipped)))
        clip.append(clipped.double().mean((1, 2, 3)))
        z, state = _step(z, grad, s, state)
    new = _snapshot(z)
    out = {
        "entropy": snap.h.mean(-1),
        "success": (snap.log_pi_y.exp() * rewards).sum(-1).mean(-1),
        "zero_adv_frac": (adv == 0).double().mean((1, 2)),
        "hard_frac": hard.double().mean(-1),
        "clip_frac": torch.stack(clip).mean(0),
        "dh_exact": (new.h - snap.h).mean(-1),
        "dh_first_order": (snap.g * (z - z0)).sum((-1, -2)).mean(-1),
    }
    out.update(_ledgers(snap, rewards, s, pos, rows0, adv, hard, passes))
    return z, out, state, new


def group_update(
    logits, rewards, settings: UpdateSettings, *, generator: torch.Generator | None = None, state: dict | None = None
) -> tuple[torch.Tensor, dict[str, torch.Tensor], dict | None]:
    r"""One sampled group update of every prompt (eq. U1), with its entropy ledgers: (new logits, metrics, state).

    logits (S, P, n, V), rewards (S, P, Y) 0/1; ``state``: Adam's (None: fresh). Metrics are (S,) means over prompts:
    ``entropy`` and ``success`` before the step, ``zero_adv_frac``, ``hard_frac``, ``clip_frac``, ``dh_exact``,
    ``dh_first_order`` (grad H . dz, all passes), and ``sampled/*``, ``expected/*``, ``estimator_{form}/*`` over
    :data:`qae_lab.ledger.LEDGER_PARTS`, with ``sampled/dh_state`` + ``sampled/dh_visit`` = ``sampled/dh``.

    >>> from qae_lab.toys.seqpolicy import task_batch
    >>> t = task_batch(2, 4, 2, 3, start="peaked")
    >>> z, m, _ = group_update(t.logits, t.rewards, UpdateSettings(group_size=4), generator=torch.Generator())
    >>> z.shape, m["entropy"].shape, bool(torch.allclose(m["sampled/dh"], m["dh_first_order"]))
    (torch.Size([2, 4, 7, 2]), torch.Size([2]), True)
    """
    z0, rewards = _batch(logits, rewards, settings)
    z, out, state, _ = _update(z0, rewards, settings, generator, state, _snapshot(z0))
    return z.detach(), out, state


def simulate(logits, rewards, settings: UpdateSettings, *, steps: int, seed: int = 0) -> dict[str, torch.Tensor]:
    r"""Train S seeds' prompts by ``steps`` sampled group updates (eq. U1), recording the exact curves and ledgers.

    The same seed and batch shape pair runs up seed by seed. Run it on one thread (:func:`qae_lab.threads.use_threads`):
    two made its many small operations 30 times slower. Returns ``entropy``, ``success`` (S, steps + 1), every
    :func:`group_update` metric (S, steps), ``*_curves`` per prompt (S, P, steps + 1), ``*_per_prompt`` (S, P, 2).

    >>> from qae_lab.toys.seqpolicy import task_batch
    >>> t = task_batch(2, 4, 2, 3, start="peaked")
    >>> out = simulate(t.logits, t.rewards, UpdateSettings(group_size=4), steps=5)
    >>> out["entropy"].shape, out["sampled/dh_hard_neg"].shape, out["entropy_per_prompt"].shape
    (torch.Size([2, 6]), torch.Size([2, 5]), torch.Size([2, 4, 2]))
    >>> out["entropy_curves"].shape, bool(torch.allclose(out["entropy_curves"].mean(1), out["entropy"]))
    (torch.Size([2, 4, 6]), True)
    """
    z, rewards = _batch(logits, rewards, settings)
    steps = check_int(steps, "steps", 0)
    gen = torch.Generator().manual_seed(check_int(seed, "seed", 0))
    snap, state = _snapshot(z), None
    curves = ([snap.h], [(snap.log_pi_y.exp() * rewards).sum(-1)])  # per prompt, (S, P) each step
    rows: dict[str, list[torch.Tensor]] = {}
    for _ in range(steps):
        z, metrics, state, snap = _update(z, rewards, settings, gen, state, snap)
        for key, val in metrics.items():
            rows.setdefault(key, []).append(val)
        curves[0].append(snap.h)
        curves[1].append((snap.log_pi_y.exp() * rewards).sum(-1))
    out = {key: torch.stack(val, -1).double() for key, val in rows.items()}  # (S, steps)
    for key, per_step in zip(("entropy", "success"), curves):
        per_prompt = torch.stack(per_step, -1)  # (S, P, steps + 1)
        out[f"{key}_curves"] = per_prompt
        out[key] = per_prompt.mean(1)  # (S, steps + 1): the mean over prompts, from the start
        out[f"{key}_per_prompt"] = per_prompt[..., [0, -1]]  # (S, P, 2): the start and the end
    return out


def _variants(settings: UpdateSettings, alphas) -> dict[str, UpdateSettings]:
    """GRPO's update (alpha = 0) and, for each alpha, SA-AH's (selective) and AH's."""
    out = {"alpha = 0": replace(settings, alpha=0.0)}
    for a in alphas:
        a = check_finite_scalar(a, "alphas")
        out[f"SA-AH, alpha = {a:g}"] = replace(settings, alpha=a, selective=True)
        out[f"AH, alpha = {a:g}"] = replace(settings, alpha=a, selective=False)
    return out


def update_variance(
    logits, rewards, settings: UpdateSettings, *, alphas=(0.5,), n_draws: int = 2000, chunk: int = 250, seed: int = 0
) -> dict[str, dict[str, float]]:
    r"""What SA-AH's horizon weights (arXiv 2606.05434) do to the variance of one update, by Monte Carlo.

    From one policy (P, n, V), ``n_draws`` batches of groups each give the first pass's SGD step dz = -eta grad L
    (eq. U1) under GRPO's weights (alpha = 0) and, on the same groups, SA-AH's and AH's for each alpha. Per variant:
    ``trace_var`` tr Cov(dz), ``mean_norm`` ||E dz||, ``noise_to_signal``, ``cos_plain`` / ``cos_success`` (E dz's
    cosine with GRPO's and with grad p), ``dh_mean`` / ``dh_std`` of grad H . dz.

    >>> from qae_lab.toys.seqpolicy import make_tasks
    >>> t = make_tasks(4, 2, 3, start="peaked")
    >>> out = update_variance(t.logits, t.rewards, UpdateSettings(group_size=4), n_draws=20)
    >>> sorted(out), round(out["alpha = 0"]["cos_plain"], 6)
    (['AH, alpha = 0.5', 'SA-AH, alpha = 0.5', 'alpha = 0'], 1.0)
    """
    z, rewards = _batch(torch.as_tensor(logits)[None], torch.as_tensor(rewards)[None], settings)  # (1, P, n, V)
    n_draws, chunk = check_int(n_draws, "n_draws", 2), check_int(chunk, "chunk", 1)
    variants = _variants(settings, alphas)
    snap, gen = _snapshot(z), torch.Generator().manual_seed(check_int(seed, "seed", 0))
    sums = {name: [torch.zeros_like(z[0]).flatten(), 0.0, 0.0, 0.0] for name in variants}  # sum dz, |dz|^2, dH, dH^2
    done = 0
    while done < n_draws:
        m = min(chunk, n_draws - done)
        many = snap._replace(
            lp=snap.lp.expand(m, *snap.lp.shape[1:]), log_pi_y=snap.log_pi_y.expand(m, *snap.log_pi_y.shape[1:])
        )
        pos, _, adv = _sample(many, rewards, settings, gen)
        lp_old = _rows(many.lp, pos[1]).gather(-1, pos[0][..., None]).squeeze(-1)
        for name, s in variants.items():
            dz = -s.eta * _pass(z.expand(m, *z.shape[1:]), pos, adv, lp_old, s)[0]  # (M, P, n, V)
            dh = (snap.g * dz).sum((-1, -2)).mean(-1)  # (M,)
            acc = sums[name]
            acc[0] += dz.flatten(1).sum(0)
            acc[1] += float((dz**2).sum())
            acc[2] += float(dh.sum())
            acc[3] += float((dh**2).sum())
        done += m
    zg = z[0].clone().requires_grad_(True)
    (grad_p,) = torch.autograd.grad(success_rate(zg, rewards[0]).mean(), zg)
    return _variance_summary(sums, n_draws, grad_p.flatten())


def _variance_summary(sums: dict, n: int, grad_p: torch.Tensor) -> dict[str, dict[str, float]]:
    """The numbers of :func:`update_variance` from its running sums over n draws."""
    cos = lambda a, b: float(a @ b / (a.norm() * b.norm()).clamp_min(1e-300))  # noqa: E731
    plain = sums["alpha = 0"][0] / n
    out = {}
    for name, (s_dz, s_sq, s_dh, s_dh2) in sums.items():
        mean = s_dz / n
        # tr Cov(dz) = E||dz||^2 - ||E dz||^2
        trace_var = s_sq / n - float(mean @ mean)
        out[name] = {
            "trace_var": trace_var,
            "mean_norm": float(mean.norm()),
            "noise_to_signal": trace_var / max(float(mean @ mean), 1e-300),
            "cos_plain": cos(mean, plain),
            "cos_success": cos(mean, grad_p),
            "dh_mean": s_dh / n,
            "dh_std": max(s_dh2 / n - (s_dh / n) ** 2, 0.0) ** 0.5,
        }
    return out
