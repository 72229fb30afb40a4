r"""Step model (c) of the softmax bandit: sampled groups, Monte-Carlo entropy change, training.

QAE (arXiv 2509.22611, sec. 4) states its entropy result, Prop. 4.2, for the identity's step
model (:mod:`qae_lab.theory`). Training does not take that step: it samples a group of G
responses y_i ~ pi per prompt, scores them, and moves the logits by the REINFORCE step

    dz = (eta/G) sum_i A_i (e_{y_i} - pi)                                  (model (c))

with A_i from :func:`qae_lab.advantages.group_advantages` (mean or K-quantile baseline, with
or without the std). This module measures what that step does to the entropy, by Monte
Carlo over independent groups, next to the exact expected gradient (model (b)) and the
identity's first-order prediction (model (a)), and trains a population of bandits with it.
Shapes: A actions, M independent draws, G group size, P prompts.

Departures: none from the maths; the bandit, the difficulty spread and the step sizes are
the notebook's choices, not the paper's. The gate's exact zero-advantage fractions are in
:mod:`qae_lab.sparsity`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import torch

from qae_lab._checks import as_real_tensor, check_choice, check_group_size, check_int, check_k, check_positive
from qae_lab.advantages import BASELINES, QUANTILE_METHODS, SCALES, group_advantages, hard_regime
# _logits / _rewards_like: theory's input checks, shared so that both modules word errors alike
from qae_lab.theory import (
    _logits,
    _rewards_like,
    entropy,
    entropy_change_exact,
    expected_pg_step,
    identity_entropy_change,
    make_bandits,
    population_quantile,
)

__all__ = ["sample_group_steps", "mc_entropy_change", "mc_entropy_curve", "simulate_training", "mc_verdicts",
           "mc_comparison_lines", "training_summary_lines"]


def _reinforce_step(pi: torch.Tensor, actions: torch.Tensor, adv: torch.Tensor, eta: float) -> torch.Tensor:
    """dz = (eta/G) sum_i A_i (e_{y_i} - pi) for (M, A) pi, (M, G) actions and advantages."""
    g = actions.shape[1]
    dz = torch.zeros_like(pi).scatter_add_(1, actions, adv)  # (M, A): sum_i A_i e_{y_i}
    return eta / g * (dz - pi * adv.sum(1, keepdim=True))  # (M, A)


def sample_group_steps(z, r, group_size: int, n_groups: int, *, baseline: str = "quantile", k: float = 0.4,
                       quantile_method: str = "paper", scale: str = "group", eta: float = 1.0,
                       generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Step model (c): ``n_groups`` independent sampled-group REINFORCE steps from one z.

    Each draws G responses y_i ~ pi, scores r(y_i), takes advantages from
    :func:`qae_lab.advantages.group_advantages` and returns dz = (eta/G) sum_i A_i (e_{y_i} - pi).

    Args:
        z: (A,) logits; r: (A,) rewards. group_size: G >= 2. n_groups: M >= 1.
        baseline, k, quantile_method, scale: as in ``group_advantages``.

    Returns:
        (dz, rewards): (M, A) float64 steps and the (M, G) sampled rewards.

    >>> dz, rw = sample_group_steps(torch.zeros(3), torch.tensor([1.0, 0, 0]), 4, 5,
    ...                             generator=torch.Generator().manual_seed(0))
    >>> dz.shape, rw.shape
    (torch.Size([5, 3]), torch.Size([5, 4]))
    """
    z = _logits(z)
    if z.dim() != 1:
        raise ValueError(f"z must be a single policy of shape (A,), got {tuple(z.shape)}")
    r = _rewards_like(r, z)
    check_int(n_groups, "n_groups", 1)
    check_group_size(group_size, group_size)
    pi = torch.softmax(z, -1)
    actions = torch.multinomial(pi.expand(n_groups, -1), group_size, replacement=True, generator=generator)  # (M, G)
    rewards = r[actions]  # (M, G)
    adv = group_advantages(rewards.reshape(-1), group_size, baseline=baseline, k=k,
                           quantile_method=quantile_method, scale=scale).view(n_groups, group_size)
    return _reinforce_step(pi.expand(n_groups, -1), actions, adv, check_positive(eta, "eta")), rewards


def mc_entropy_change(z, r, group_size: int, n_groups: int, *, baseline: str = "quantile", k: float = 0.4,
                      quantile_method: str = "paper", scale: str = "group", eta: float = 1.0,
                      generator: torch.Generator | None = None) -> dict[str, float]:
    r"""Monte-Carlo E[dH] and its spread over sampled-group steps (model (c)) from one policy.

    Returns:
        dict with ``mean``, ``std`` and ``stderr`` of the exact entropy change over the
        ``n_groups`` draws, ``zero_adv_frac`` (responses with A = 0) and, for comparison,
        ``expected_pg`` (the exact entropy change of model (b), the same step size).

    >>> out = mc_entropy_change(torch.tensor([1.0, 0, 0, -1]), torch.tensor([1.0, 0, 1, 0]), 8, 200,
    ...                         eta=0.5, generator=torch.Generator().manual_seed(0))
    >>> sorted(out)
    ['expected_pg', 'mean', 'std', 'stderr', 'zero_adv_frac']
    """
    dz, rewards = sample_group_steps(z, r, group_size, n_groups, baseline=baseline, k=k,
                                     quantile_method=quantile_method, scale=scale, eta=eta, generator=generator)
    z = _logits(z)
    dh = entropy_change_exact(z.expand_as(dz), dz)  # (M,)
    adv = group_advantages(rewards.reshape(-1), group_size, baseline=baseline, k=k,
                           quantile_method=quantile_method, scale=scale)
    std = float(dh.std()) if n_groups > 1 else 0.0
    return {
        "mean": float(dh.mean()), "std": std, "stderr": std / math.sqrt(n_groups),
        "zero_adv_frac": float((adv == 0).double().mean()),
        "expected_pg": float(entropy_change_exact(z, expected_pg_step(z, r, eta))),
    }


def mc_entropy_curve(ps, *, group_size: int, n_groups: int, k: float = 0.4, scale: str = "group",
                     quantile_method: str = "paper", n_actions: int = 16, sharpness: float = 1.5, eta: float = 0.5,
                     seed: int = 0) -> dict[str, list[float]]:
    r"""Monte-Carlo E[dH] of one sampled-group step, mean vs quantile baseline, for each p in ``ps``.

    One bandit per p, all built from the same base logits (:func:`make_bandits` with
    ``seed``) and shifted to their success rate; both baselines see the same bandit and the
    same random stream. Alongside: the exact entropy change of the expected
    gradient (model (b)) and the identity's first-order predictions (model (a)) with
    b = p (mean) and b = b_K (quantile).

    Returns:
        dict of lists over ``ps``: ``mean``, ``mean_stderr``, ``quantile``,
        ``quantile_stderr``, ``mean_zero_frac``, ``quantile_zero_frac``, ``expected_pg``,
        ``identity_mean``, ``identity_quantile``.

    >>> out = mc_entropy_curve([0.3, 0.7], group_size=8, n_groups=50)
    >>> len(out["mean"]), len(out["identity_quantile"])
    (2, 2)
    """
    ps = as_real_tensor(ps, "ps", ndim=1).double()
    # the same base logits for every p (one seed), so the curve varies p and nothing else
    bandits = [make_bandits(p.reshape(1), n_actions, sharpness, torch.Generator().manual_seed(seed)) for p in ps]
    z, r = torch.cat([b[0] for b in bandits]), torch.cat([b[1] for b in bandits])
    out: dict[str, list[float]] = {key: [] for key in ("mean", "mean_stderr", "quantile", "quantile_stderr",
                                                       "mean_zero_frac", "quantile_zero_frac", "expected_pg",
                                                       "identity_mean", "identity_quantile")}
    for i in range(ps.shape[0]):
        for baseline in BASELINES:
            mc = mc_entropy_change(z[i], r[i], group_size, n_groups, baseline=baseline, k=k, scale=scale,
                                   quantile_method=quantile_method, eta=eta,
                                   generator=torch.Generator().manual_seed(seed + 1 + i))
            out[baseline].append(mc["mean"])
            out[f"{baseline}_stderr"].append(mc["stderr"])
            out[f"{baseline}_zero_frac"].append(mc["zero_adv_frac"])
        out["expected_pg"].append(mc["expected_pg"])
        b = torch.stack([ps[i], population_quantile(z[i], r[i], k)])
        ident = identity_entropy_change(z[i], r[i], b, eta)
        out["identity_mean"].append(float(ident[0]))
        out["identity_quantile"].append(float(ident[1]))
    return out


def simulate_training(p0, *, steps: int, group_size: int, n_actions: int = 32, sharpness: float = 1.0,
                      baseline: str = "quantile", k: float = 0.4, quantile_method: str = "paper",
                      scale: str = "group", eta: float = 1.0, seed: int = 0) -> dict[str, list[float]]:
    r"""Train a population of softmax bandits by sampled-group steps; track entropy and success.

    One bandit per initial success rate in ``p0`` (built by :func:`make_bandits` from
    ``seed``). Each step samples a group of G responses per prompt, takes advantages
    from :func:`qae_lab.advantages.group_advantages` over the whole batch, and applies the
    REINFORCE step to every prompt. The same seed gives the same bandits and, step by
    step, the same random stream for every baseline, so runs pair up.

    Returns:
        dict of lists, one entry per step 0..steps: ``entropy`` (mean H / log A),
        ``success`` (mean E_pi r), and per step 1..steps ``zero_adv_frac`` and ``hard_frac``.

    >>> out = simulate_training(torch.tensor([0.2, 0.8]), steps=3, group_size=4, n_actions=8)
    >>> len(out["entropy"]), len(out["zero_adv_frac"])
    (4, 3)
    """
    check_int(steps, "steps", 0)
    check_choice(baseline, "baseline", BASELINES)
    check_choice(scale, "scale", SCALES)
    check_choice(quantile_method, "quantile_method", QUANTILE_METHODS)
    k = check_k(k)
    g = check_group_size(group_size, group_size)
    eta = check_positive(eta, "eta")
    gen = torch.Generator().manual_seed(seed)
    z, r = make_bandits(p0, n_actions, sharpness, gen)  # (P, A)
    n = z.shape[0]
    log_a = math.log(n_actions)
    out: dict[str, list[float]] = {"entropy": [], "success": [], "zero_adv_frac": [], "hard_frac": []}
    for step in range(steps + 1):
        pi = torch.softmax(z, -1)
        out["entropy"].append(float(entropy(z).mean()) / log_a)
        out["success"].append(float((pi * r).sum(-1).mean()))
        if step == steps:
            break
        actions = torch.multinomial(pi, g, replacement=True, generator=gen)  # (P, G)
        rewards = r.gather(1, actions)  # (P, G)
        adv = group_advantages(rewards.reshape(-1), g, baseline=baseline, k=k, quantile_method=quantile_method,
                               scale=scale).view(n, g)
        out["zero_adv_frac"].append(float((adv == 0).double().mean()))
        out["hard_frac"].append(float(hard_regime(rewards.sum(1), g, k).double().mean()))
        z = z + _reinforce_step(pi, actions, adv, eta)
    return out


def mc_verdicts(out: Mapping[str, Sequence[float]]) -> list[str]:
    r"""Per success rate of :func:`mc_entropy_curve`'s output: "lower", "higher" or "same",
    QAE's E[dH] against the mean baseline's, "same" unless the difference is beyond two standard errors.

    >>> mc_verdicts({"mean": [0.01, 0.01], "mean_stderr": [0.001] * 2, "quantile": [0.002, 0.011],
    ...              "quantile_stderr": [0.001] * 2})
    ['lower', 'same']
    """
    verdicts = []
    for m, m_se, q, q_se in zip(out["mean"], out["mean_stderr"], out["quantile"], out["quantile_stderr"]):
        margin = 2 * (m_se ** 2 + q_se ** 2) ** 0.5  # two standard errors of the difference
        verdicts.append("lower" if q - m < -margin else "higher" if q - m > margin else "same")
    return verdicts


def mc_comparison_lines(ps, out: dict[str, list[float]]) -> list[str]:
    r"""One line per success rate of :func:`mc_entropy_curve`'s output: E[dH] under the mean and the QAE baseline,
    their difference with a two-standard-error margin, a verdict (QAE lower / higher only beyond that margin) and
    QAE's zero-advantage share.

    Args:
        ps: the success rates ``out`` was computed at; out: :func:`mc_entropy_curve` of them.

    >>> out = {"mean": [0.010], "mean_stderr": [0.001], "quantile": [0.002], "quantile_stderr": [0.001],
    ...        "quantile_zero_frac": [0.75]}
    >>> mc_comparison_lines([0.3], out)[0]
    'p = 0.3:  E[dH] mean +0.0100, QAE +0.0020 (diff -0.0080 ± 0.0028: QAE lower);  zero-advantage share QAE 0.75'
    """
    words = {"lower": "QAE lower", "higher": "QAE higher", "same": "no clear difference"}
    verdicts, lines = mc_verdicts(out), []
    for i, p in enumerate(ps):
        diff = out["quantile"][i] - out["mean"][i]
        se = (out["quantile_stderr"][i] ** 2 + out["mean_stderr"][i] ** 2) ** 0.5
        verdict = words[verdicts[i]]
        lines.append(f"p = {float(p):.1f}:  E[dH] mean {out['mean'][i]:+.4f}, QAE {out['quantile'][i]:+.4f} "
                     f"(diff {diff:+.4f} ± {2 * se:.4f}: {verdict});  zero-advantage share QAE "
                     f"{out['quantile_zero_frac'][i]:.2f}")
    return lines


def training_summary_lines(runs: dict[str, dict[str, list[float]]]) -> list[str]:
    r"""Per run of :func:`simulate_training` (``{name: its output}``): entropy and success at the first and the last
    step and the mean zero-advantage share; then which run keeps the highest and the lowest final entropy.

    >>> runs = {"mean": {"entropy": [0.9, 0.5], "success": [0.5, 0.7], "zero_adv_frac": [0.25]},
    ...         "QAE": {"entropy": [0.9, 0.7], "success": [0.5, 0.6], "zero_adv_frac": [0.75]}}
    >>> print("\n".join(training_summary_lines(runs)))
          mean: entropy 0.900 -> 0.500,  success 0.500 -> 0.700,  mean zero-advantage share 0.25
           QAE: entropy 0.900 -> 0.700,  success 0.500 -> 0.600,  mean zero-advantage share 0.75
    After 1 steps the highest entropy is kept by 'QAE', the lowest by 'mean'.
    """
    if not runs:
        raise ValueError("runs must hold at least one simulated run")
    lines = []
    for name, o in runs.items():
        zero = sum(o["zero_adv_frac"]) / len(o["zero_adv_frac"])
        lines.append(f"{name:>10}: entropy {o['entropy'][0]:.3f} -> {o['entropy'][-1]:.3f},  success "
                     f"{o['success'][0]:.3f} -> {o['success'][-1]:.3f},  mean zero-advantage share {zero:.2f}")
    lo = min(runs, key=lambda n: runs[n]["entropy"][-1])
    hi = max(runs, key=lambda n: runs[n]["entropy"][-1])
    steps = len(next(iter(runs.values()))["entropy"]) - 1
    lines.append(f"After {steps} steps the highest entropy is kept by '{hi}', the lowest by '{lo}'.")
    return lines
