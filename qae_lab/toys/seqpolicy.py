r"""An exact autoregressive softmax policy over short sequences, and its first-order entropy ledger.

QAE (arXiv 2509.22611, sec. 4) and Cui et al. 2025 (arXiv 2505.22617) reduce a prompt to a one-step bandit
(:mod:`qae_lab.toys.bandit`); here a response y = (y_1..y_L) is drawn token by token, every prefix s = y_<t (a
"state") with its own logit row z_s, small enough to enumerate:

    pi(y) = prod_t softmax(z_{y_<t})[y_t]                                   (the sequence policy, S1)
    H(pi) = -sum_y pi(y) log pi(y) = sum_s rho(s) H(pi(.|s))                (entropy chain rule, S2)
    p     = E_{y~pi}[r(y)]                                                  (success rate, S3)

Implementer's notes: docs/implementation.md, section ``qae_lab.toys.seqpolicy``.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import torch

from qae_lab.methods import DEFAULT_BASELINE, DEFAULT_K, DEFAULT_QUANTILE_METHOD, DEFAULT_SCALE
from qae_lab._checks import (
    as_real_tensor,
    check_choice,
    check_finite_scalar,
    check_group_size,
    check_int,
    check_positive,
)
from qae_lab.advantages import group_advantages, hard_regime
from qae_lab.ledger import LEDGER_PARTS
from qae_lab.toys.sparsity import binomial_pmf, canonical_groups

__all__ = [
    "MAX_SEQUENCES",
    "STARTS",
    "n_prefixes",
    "space_of",
    "sequence_positions",
    "enumerate_sequences",
    "path_sum",
    "sequence_logprobs",
    "sequence_entropy",
    "state_entropies",
    "prefix_reach",
    "success_rate",
    "sampled_values",
    "Tasks",
    "make_tasks",
    "task_batch",
    "describe_rule",
    "Snapshot",
    "snapshot",
    "entropy_gradients",
    "score_dot",
    "split_parts",
    "advantage_table",
    "expected_ledger",
]


MAX_SEQUENCES = 2**16  # V**L at most: every quantity is exact by enumeration
STARTS = ("flat", "peaked")


def n_prefixes(vocab: int, length: int) -> int:
    r"""The number of states (prefixes of length 0..L-1), n = (V**L - 1)/(V - 1); checks V in [2, 8], L in [1, 8].

    >>> n_prefixes(2, 2), n_prefixes(4, 5)
    (3, 341)
    >>> n_prefixes(8, 8)
    Traceback (most recent call last):
    ValueError: vocab**length must be <= 65536 (every sequence is enumerated), got 8**8 = 16777216
    """
    v, l = check_int(vocab, "vocab", 2, 8), check_int(length, "length", 1, 8)
    if v**l > MAX_SEQUENCES:
        raise ValueError(
            f"vocab**length must be <= {MAX_SEQUENCES} (every sequence is enumerated), got {v}**{l} = {v**l}"
        )
    return (v**l - 1) // (v - 1)


def space_of(z) -> tuple[int, int]:
    r"""(V, L) of a logit table z of shape (..., n, V), or ``ValueError`` naming ``z``.

    >>> space_of(torch.zeros(2, 7, 2))
    (2, 3)
    """
    if not isinstance(z, torch.Tensor) or z.dim() < 2:
        raise ValueError(
            f"z must be a tensor of shape (..., n_prefixes, V), got {type(z).__name__}"
            + (f" of shape {tuple(z.shape)}" if isinstance(z, torch.Tensor) else "")
        )
    v, n = z.shape[-1], z.shape[-2]
    for l in range(1, 9):
        if 2 <= v <= 8 and v**l <= MAX_SEQUENCES and (v**l - 1) // (v - 1) == n:
            return v, l
    raise ValueError(
        f"z must have shape (..., (V**L - 1)/(V - 1), V) with V in [2, 8], L in [1, 8], got {tuple(z.shape)}"
    )


def _logits(z) -> torch.Tensor:
    z = as_real_tensor(z, "z")
    space_of(z)
    return z if z.dtype == torch.float64 else z.double()


def sequence_positions(y, vocab: int, length: int) -> tuple[torch.Tensor, torch.Tensor]:
    r"""The tokens y_t and prefix (state) indices of sequences y (...) in [0, V**L): two (..., L) long tensors.

    >>> tok, pre = sequence_positions(torch.tensor([0, 3, 6]), 2, 3)   # 000, 011, 110
    >>> tok.tolist(), pre.tolist()
    ([[0, 0, 0], [0, 1, 1], [1, 1, 0]], [[0, 1, 3], [0, 1, 4], [0, 2, 6]])
    """
    n_prefixes(vocab, length)
    y = torch.as_tensor(y)
    if y.is_floating_point() or y.is_complex() or y.dtype == torch.bool:
        raise ValueError(f"y must be an integer tensor of sequence indices, got dtype {y.dtype}")
    if y.numel() and (int(y.min()) < 0 or int(y.max()) >= vocab**length):
        raise ValueError(f"y must lie in [0, {vocab**length}) (vocab**length), got {int(y.min())}..{int(y.max())}")
    t = torch.arange(length)
    # y_t = digit t of y in base V; prefix y_<t has index (V**t - 1)/(V - 1) + y // V**(L - t)
    tokens = (y[..., None] // vocab ** (length - 1 - t)) % vocab  # (..., L)
    offset = (vocab**t - 1) // (vocab - 1)  # (L,)
    return tokens, offset + y[..., None] // vocab ** (length - t)


def enumerate_sequences(vocab: int, length: int) -> tuple[torch.Tensor, torch.Tensor]:
    r"""All V**L sequences: their tokens and prefix indices at each position, two (Y, L) long tensors.

    >>> tok, pre = enumerate_sequences(2, 2)
    >>> tok.tolist(), pre.tolist()
    ([[0, 0], [0, 1], [1, 0], [1, 1]], [[0, 1], [0, 1], [0, 2], [0, 2]])
    """
    n_prefixes(vocab, length)
    return sequence_positions(torch.arange(vocab**length), vocab, length)


def path_sum(edge, length: int | None = None) -> torch.Tensor:
    r"""sum_t edge[y_<t, y_t] for every sequence y, (..., n, V) -> (..., Y); with edge = log pi(.|s), log pi(y) (S1).

    >>> path_sum(torch.tensor([[1.0, 2.0], [10.0, 20.0], [100.0, 200.0]]))   # V = 2, L = 2
    tensor([ 11.,  21., 102., 202.])
    """
    v, l = space_of(edge)
    if length is not None and length != l:
        raise ValueError(f"length must be {l} for a table of {edge.shape[-2]} prefixes of V = {v}, got {length}")
    return _reach_and_paths(edge)[1]


def sequence_logprobs(z) -> torch.Tensor:
    r"""log pi(y) = sum_t log softmax(z_{y_<t})[y_t] for all sequences (eq. S1): (..., n, V) -> (..., Y).

    >>> sequence_logprobs(torch.zeros(3, 2)).exp()                  # uniform: 1/4 each
    tensor([0.2500, 0.2500, 0.2500, 0.2500], dtype=torch.float64)
    """
    return path_sum(_log_softmax(_logits(z)))


def sequence_entropy(z) -> torch.Tensor:
    r"""H(pi) = -sum_y pi(y) log pi(y) in nats, by enumeration (eq. S2): (..., n, V) -> (...).

    >>> round(float(sequence_entropy(torch.zeros(3, 2))), 6) == round(2 * math.log(2), 6)
    True
    """
    return _entropy(_logits(z))


def _entropy(z: torch.Tensor) -> torch.Tensor:
    """H(pi) of checked float64 logits (..., n, V) -> (...)."""
    lp = path_sum(_log_softmax(z))
    return -(lp.exp() * lp).sum(-1)


def state_entropies(z) -> torch.Tensor:
    r"""H(pi(.|s)) of every state s in nats: (..., n, V) -> (..., n).

    >>> [round(h, 4) for h in state_entropies(torch.tensor([[0.0, 0.0], [0.0, -2.0], [0.0, 0.0]])).tolist()]
    [0.6931, 0.3653, 0.6931]
    """
    lp = _log_softmax(_logits(z))
    return -(lp.exp() * lp).sum(-1)


def prefix_reach(z) -> torch.Tensor:
    r"""rho(s) = pi(y_<t = s), the reach of prefix s in H(pi) = sum_s rho(s) H(pi(.|s)) (eq. S2): (..., n).

    >>> [round(r, 6) for r in prefix_reach(torch.tensor([[0.0, math.log(3)], [0.0, 0.0], [0.0, 0.0]])).tolist()]
    [1.0, 0.25, 0.75]
    """
    return _reach_and_paths(_log_softmax(_logits(z)))[0].exp()


def _log_softmax(z: torch.Tensor) -> torch.Tensor:
    """log softmax over the last dimension; for V <= 8 about twice as fast as torch.log_softmax on a CPU."""
    zc = z - z.detach().amax(-1, keepdim=True)
    return zc - (zc.exp() @ torch.ones(z.shape[-1], 1, dtype=z.dtype)).log()


def _reach_and_paths(lp: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """log rho(s) of every prefix (..., n) and log pi(y) of every sequence (..., Y) from log pi (..., n, V)."""
    v, l = space_of(lp)
    levels, acc = [torch.zeros_like(lp[..., 0, :1])], lp[..., 0, :]  # rho(root) = 1
    for t in range(1, l):
        levels.append(acc)
        lo = (v**t - 1) // (v - 1)
        # child (prefix m, token a) of length t + 1 has index m * V + a among its level
        acc = (acc[..., :, None] + lp[..., lo : lo + v**t, :]).flatten(-2)  # (..., V**(t+1))
    return torch.cat(levels, -1), acc


def success_rate(z, rewards) -> torch.Tensor:
    r"""p = E_{y~pi}[r(y)] (eq. S3): z (..., n, V), rewards (..., Y) -> (...).

    >>> success_rate(torch.zeros(3, 2), torch.tensor([1.0, 0, 0, 1]))
    tensor(0.5000, dtype=torch.float64)
    """
    lp = sequence_logprobs(z)
    r = as_real_tensor(rewards, "rewards").to(lp)
    if r.shape[-1] != lp.shape[-1]:
        raise ValueError(f"rewards must have {lp.shape[-1]} sequences (V**L) last, got shape {tuple(r.shape)}")
    return (lp.exp() * r).sum(-1)


def sampled_values(table, y) -> torch.Tensor:
    r"""table[..., y_<t, y_t] at every position of sampled sequences y (..., G): (..., n, V) -> (..., G, L).

    >>> lp = torch.log_softmax(torch.tensor([[0.0, 0.0], [0.0, 1.0], [2.0, 0.0]]), -1)
    >>> torch.allclose(sampled_values(lp, torch.tensor([1, 2])).sum(-1), path_sum(lp)[[1, 2]])
    True
    """
    v, l = space_of(table)
    tokens, prefixes = sequence_positions(y, v, l)  # (..., G, L)
    flat = table.flatten(-2)  # (..., n * V)
    idx = (prefixes * v + tokens).flatten(-2)  # (..., G * L)
    return flat.gather(-1, idx).view(*y.shape, l)  # (..., G, L)


class Tasks(NamedTuple):
    r"""Prompts of the sequence policy: initial ``logits`` (P, n, V) (or (S, P, n, V)), 0/1 ``rewards``
    (P, Y) and each prompt's ``rules`` (dicts ``weights``, ``modulus``, ``below``, :func:`describe_rule`).

    >>> make_tasks(2, 2, 2, seed=0).rewards.shape
    torch.Size([2, 4])
    """

    logits: torch.Tensor
    rewards: torch.Tensor
    rules: list


def describe_rule(rule: dict) -> str:
    r"""The reward rule in words: r(y) = 1 iff (sum_t a_t y_t) mod m < c, a checksum of the tokens.

    >>> describe_rule({"weights": [1, 3], "modulus": 5, "below": 2})
    'r(y) = 1 iff (1*y1 + 3*y2) mod 5 < 2'
    """
    terms = " + ".join(f"{a}*y{t + 1}" for t, a in enumerate(rule["weights"]))
    return f"r(y) = 1 iff ({terms}) mod {rule['modulus']} < {rule['below']}"


def _targets(n: int) -> torch.Tensor:
    """Success-rate targets: one in eight prompts very hard (0.05), the rest spread over 0.15..0.9."""
    return torch.nn.functional.pad(torch.linspace(0.15, 0.9, n - n // 8, dtype=torch.float64), (n // 8, 0), value=0.05)


def _pick_rule(
    pi: torch.Tensor, tokens: torch.Tensor, target: float, gen: torch.Generator, n_candidates: int
) -> tuple[dict, torch.Tensor]:
    """The checksum rule among random candidates whose success rate under pi (Y,) is closest to target."""
    y_count, length = tokens.shape
    m = torch.randint(2, 21, (n_candidates,), generator=gen)  # moduli 2..20
    a = 1 + (torch.rand(n_candidates, length, generator=gen) * (m[:, None] - 1)).long()  # weights 1..m-1
    res = (tokens @ a.T) % m  # (Y, C) residues
    mass = torch.zeros(n_candidates, 20, dtype=torch.float64)  # (C, 20): the pi-mass of each residue
    mass.scatter_add_(1, res.T, pi.expand(n_candidates, y_count))
    p = mass.cumsum(1)[:, :-1]  # (C, 19): p for "residue < c", c = 1..19
    c = torch.arange(1, 20)
    ok = (c[None] < m[:, None]) & (p > 1e-9) & (p < 1 - 1e-9)
    best = int(torch.where(ok, (p - target).abs(), torch.full_like(p, math.inf)).flatten().argmin())
    i, j = divmod(best, 19)
    rule = {"weights": a[i].tolist(), "modulus": int(m[i]), "below": int(c[j])}
    return rule, (res[:, i] < c[j]).double()


def make_tasks(
    n_prompts: int,
    vocab: int,
    length: int,
    *,
    start: str = "flat",
    seed: int = 0,
    sharpness: float = 3.0,
    n_candidates: int = 256,
) -> Tasks:
    r"""P prompts, each its own logit table and checksum reward (:func:`describe_rule`): of ``n_candidates`` random
    rules, the one whose success rate under the initial policy is closest to the prompt's target (one in eight 0.05,
    the rest 0.15..0.9). ``start``: ``"flat"`` (uniform) or ``"peaked"`` (logits ``sharpness * N(0, 1)``).

    >>> t = make_tasks(8, 4, 5, start="peaked", seed=0)
    >>> p = success_rate(t.logits, t.rewards)
    >>> bool(p.min() < 0.1), bool((p <= 0.6).any() and (p > 0.6).any())
    (True, True)
    """
    n = n_prefixes(vocab, length)
    p_count = check_int(n_prompts, "n_prompts", 1)
    check_choice(start, "start", STARTS)
    sharpness = check_finite_scalar(sharpness, "sharpness")
    if sharpness < 0:
        raise ValueError(f"sharpness must be >= 0, got {sharpness}")
    check_int(n_candidates, "n_candidates", 1)
    gen = torch.Generator().manual_seed(check_int(seed, "seed", 0))
    z = torch.zeros(p_count, n, vocab, dtype=torch.float64)
    if start == "peaked":
        z = sharpness * torch.randn(p_count, n, vocab, generator=gen, dtype=torch.float64)
    tokens, _ = enumerate_sequences(vocab, length)  # (Y, L)
    pi = sequence_logprobs(z).exp()  # (P, Y)
    rules, rewards = [], []
    for q, target in enumerate(_targets(p_count).tolist()):
        rule, r = _pick_rule(pi[q], tokens, target, gen, n_candidates)
        rules.append(rule)
        rewards.append(r)
    return Tasks(z, torch.stack(rewards), rules)


def task_batch(
    n_seeds: int, n_prompts: int, vocab: int, length: int, *, start: str = "flat", seed: int = 0, sharpness: float = 3.0
) -> Tasks:
    r"""S independent task sets (seeds ``seed .. seed + S - 1`` of :func:`make_tasks`), stacked: logits
    (S, P, n, V), rewards (S, P, Y), rules a list of S lists.

    >>> task_batch(3, 4, 2, 3).logits.shape
    torch.Size([3, 4, 7, 2])
    """
    check_int(n_seeds, "n_seeds", 1)
    sets = [
        make_tasks(n_prompts, vocab, length, start=start, seed=seed + s, sharpness=sharpness) for s in range(n_seeds)
    ]
    return Tasks(torch.stack([t.logits for t in sets]), torch.stack([t.rewards for t in sets]), [t.rules for t in sets])


class Snapshot(NamedTuple):
    r"""A policy's exact quantities for one update's ledgers (detached): ``lp`` (..., n, V) log pi(.|s),
    ``log_pi_y`` (..., Y), ``rho`` (..., n), ``h`` (...) H(pi), ``g`` (..., n, V) = grad_z H.

    >>> round(float(snapshot(torch.zeros(3, 2)).h), 4)
    1.3863
    """

    lp: torch.Tensor
    log_pi_y: torch.Tensor
    rho: torch.Tensor
    h: torch.Tensor
    g: torch.Tensor


def snapshot(z) -> Snapshot:
    r"""The :class:`Snapshot` of logits z (..., n, V): H = sum_s rho(s) H(s) (eq. S2) and, by one backward sweep,
    its gradient, the entropy's own policy gradient (a token's "reward" is -log pi, eq. LG4):

        grad_{z_{s,a}} H = rho(s) pi(a|s) (Q(s,a) - F(s)),   Q(s,a) = -log pi(a|s) + F(s a),
        F(s) = sum_a pi(a|s) Q(s,a) (the entropy still to come after prefix s; F = 0 after L tokens)

    >>> snap = snapshot(torch.tensor([[1.0, 0.0], [0.0, 0.0], [0.0, 2.0]]))
    >>> bool(torch.allclose(snap.h, sequence_entropy(torch.tensor([[1.0, 0.0], [0.0, 0.0], [0.0, 2.0]]))))
    True
    """
    return _snapshot(_logits(z).detach())


def _snapshot(z: torch.Tensor) -> Snapshot:
    """:func:`snapshot` of checked float64 logits."""
    v, l = space_of(z)
    lp = _log_softmax(z)  # (..., n, V)
    pi = lp.exp()
    log_rho, log_pi_y = _reach_and_paths(lp)  # (..., n), (..., Y)
    q = -lp  # (..., n, V): Q(s, a), the children's F added level by level from the deepest
    f_levels = []
    for t in range(l - 1, -1, -1):
        lo = (v**t - 1) // (v - 1)
        if f_levels:
            q[..., lo : lo + v**t, :] += f_levels[-1].view(*q.shape[:-2], v**t, v)
        # F(s) = sum_a pi(a|s) Q(s, a)
        f_levels.append((pi[..., lo : lo + v**t, :] * q[..., lo : lo + v**t, :]).sum(-1))  # (..., V**t)
    f = torch.cat(f_levels[::-1], -1)  # (..., n): F(s) of every prefix, root first
    # grad_{z_{s,a}} H = rho(s) pi(a|s) (Q(s,a) - F(s));  H = F(root) = sum_s rho(s) H(s)
    g = log_rho.exp()[..., None] * pi * (q - f[..., None])
    return Snapshot(lp, log_pi_y, log_rho.exp(), f[..., 0], g)


def entropy_gradients(z) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    r"""H(pi), g = grad_z H, and g_state, g with rho fixed in H = sum_s rho(s) H(s) (eq. S2; g - g_state goes through
    the visitation rho, which the per-state ledger ignores): (...), (..., n, V), (..., n, V), detached.

    >>> h, g, g_state = entropy_gradients(torch.zeros(3, 2))      # uniform: H is at its maximum
    >>> round(float(h), 4), float(g.abs().max()) < 1e-12
    (1.3863, True)
    """
    snap = snapshot(z)
    h_state = -(snap.lp.exp() * snap.lp).sum(-1)  # (..., n)
    # rho(s) grad_{z_s} H(s) = -rho(s) pi(a|s) (log pi(a|s) + H(s))
    g_state = -snap.rho[..., None] * snap.lp.exp() * (snap.lp + h_state[..., None])
    return snap.h, snap.g, g_state


def score_dot(g, z) -> torch.Tensor:
    r"""u_{s,a} = g . grad_z log pi(a|s) = g_{s,a} - sum_b pi(b|s) g_{s,b} for every (state, token) (eq. LG2).

    >>> score_dot(torch.tensor([[1.0, 0.0]]), torch.zeros(1, 2))     # V = 2, L = 1
    tensor([[ 0.5000, -0.5000]], dtype=torch.float64)
    """
    z = _logits(z)
    g = as_real_tensor(g, "g").to(z)
    if g.shape != z.shape:
        raise ValueError(f"g must have the shape of z {tuple(z.shape)}, got {tuple(g.shape)}")
    return _score_dot(g, _log_softmax(z))


def _score_dot(g: torch.Tensor, lp: torch.Tensor) -> torch.Tensor:
    """u = g - sum_b pi_b g_b per state, for checked g and log pi (..., n, V)."""
    return g - ((lp.exp() * g) @ torch.ones(g.shape[-1], 1, dtype=g.dtype))


def split_parts(shares, advantages, hard) -> dict[str, torch.Tensor]:
    r"""The ledger's parts (:data:`qae_lab.ledger.LEDGER_PARTS`) of per-sample shares (S, N), split by the
    advantages' signs and ``hard`` (S, N): :func:`qae_lab.ledger.ledger_parts` with weights 1, per row (S,).

    >>> parts = split_parts(torch.tensor([[-0.4, 1.5, 0.2]]), torch.tensor([[1.0, -1.0, -1.0]]),
    ...                     torch.tensor([[True, True, False]]))
    >>> [round(float(parts[k][0]), 4) for k in ("dh", "dh_pos", "dh_neg", "dh_easy", "dh_hard_neg")]
    [1.3, -0.4, 1.7, 0.2, 1.5]
    """
    d = as_real_tensor(shares, "shares", ndim=2)
    a = as_real_tensor(advantages, "advantages", ndim=2).to(d)
    hard = torch.as_tensor(hard, device=d.device)
    if a.shape != d.shape or hard.shape != d.shape or hard.dtype != torch.bool:
        raise ValueError(
            f"advantages and hard (bool) must have the shape of shares {tuple(d.shape)}, "
            f"got {tuple(a.shape)} and {tuple(hard.shape)} ({hard.dtype})"
        )
    signs, regimes = (("pos", a > 0), ("neg", a < 0)), (("hard", hard), ("easy", ~hard))
    return _ledger({f"dh_{r}_{s}": (d * (sel & rows)).sum(-1) for s, sel in signs for r, rows in regimes})


def _ledger(cells: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """All of :data:`~qae_lab.ledger.LEDGER_PARTS` from the four cells dh_{hard,easy}_{pos,neg}."""
    out = dict(cells)
    for sign in ("pos", "neg"):
        out[f"dh_{sign}"] = cells[f"dh_hard_{sign}"] + cells[f"dh_easy_{sign}"]
    for regime in ("hard", "easy"):
        out[f"dh_{regime}"] = cells[f"dh_{regime}_pos"] + cells[f"dh_{regime}_neg"]
    out["dh"] = out["dh_pos"] + out["dh_neg"]  # A = 0 contributes nothing
    return {k: out[k] for k in LEDGER_PARTS}


def advantage_table(
    group_size: int,
    *,
    baseline: str = DEFAULT_BASELINE,
    k: float = DEFAULT_K,
    quantile_method: str = DEFAULT_QUANTILE_METHOD,
    scale: str = DEFAULT_SCALE,
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""A1(c), A0(c): the advantage of a correct and of a wrong response in a group with c of G correct, two (G + 1,)
    tensors, 0 where the group has no such response.

    >>> a1, a0 = advantage_table(4, baseline="quantile", k=0.4, scale="none")
    >>> a1.tolist(), a0.tolist()                  # G = 4, K = 0.4: hard while c <= 2
    ([0.0, 1.0, 1.0, 0.0, 0.0], [0.0, 0.0, 0.0, -1.0, 0.0])
    """
    if scale == "batch":
        raise ValueError(
            "scale must be 'group' or 'none' for the expected ledger: with 'batch' the advantages "
            "depend on the other prompts' groups, not on c alone"
        )
    a1, a0 = _advantage_table(check_group_size(group_size, group_size), baseline, k, quantile_method, scale)
    return a1.clone(), a0.clone()


@functools.lru_cache(maxsize=64)
def _advantage_table(g: int, baseline: str, k: float, quantile_method: str, scale: str):
    """:func:`advantage_table`, computed once per setting (a training run asks at every step)."""
    c = torch.arange(g + 1)
    adv = group_advantages(
        canonical_groups(g), g, baseline=baseline, k=k, quantile_method=quantile_method, scale=scale
    ).view(g + 1, g)
    a1 = torch.where(c > 0, adv[:, 0], torch.zeros(g + 1, dtype=adv.dtype))
    a0 = torch.where(c < g, adv[:, -1], torch.zeros(g + 1, dtype=adv.dtype))
    return a1, a0


def expected_ledger(
    z,
    rewards,
    *,
    group_size: int,
    eta: float,
    baseline: str = DEFAULT_BASELINE,
    k: float = DEFAULT_K,
    quantile_method: str = DEFAULT_QUANTILE_METHOD,
    scale: str = DEFAULT_SCALE,
    snap: Snapshot | None = None,
) -> dict[str, torch.Tensor]:
    r"""The exact expected first-order entropy change of one on-policy group update, split (eq. LG3): one SGD pass
    of the ``bnpo`` loss, no horizon weights, dz = eta/(P G L) sum_i A_i grad log pi(y_i), expected over the G
    responses. z (..., P, n, V), rewards (..., P, Y) -> (..., P) per part; ``snap``: z's :func:`snapshot`.

    >>> z, r = torch.zeros(1, 3, 2), torch.tensor([[1.0, 0.0, 0.0, 0.0]])   # uniform: H is at its maximum
    >>> abs(float(expected_ledger(z, r, group_size=4, eta=1.0)["dh"][0])) < 1e-12
    True
    """
    z = _logits(z)
    v, l = space_of(z)
    if z.dim() < 3:
        raise ValueError(f"z must have shape (..., P, n, V) with a prompt dimension, got {tuple(z.shape)}")
    r = as_real_tensor(rewards, "rewards").to(z)
    if r.shape != z.shape[:-2] + (v**l,) or not bool(((r == 0) | (r == 1)).all()):
        raise ValueError(f"rewards must be 0/1 of shape {tuple(z.shape[:-2]) + (v**l,)}, got {tuple(r.shape)}")
    snap = _snapshot(z) if snap is None else snap
    return _expected(
        snap,
        r,
        advantage_table(group_size, baseline=baseline, k=k, quantile_method=quantile_method, scale=scale),
        k,
        check_positive(eta, "eta"),
    )


def _expected(
    snap: Snapshot, r: torch.Tensor, table: tuple[torch.Tensor, torch.Tensor], k: float, eta: float
) -> dict[str, torch.Tensor]:
    """eq. LG3 for a checked snapshot, rewards (..., P, Y) and advantage table (A1, A0)."""
    a1, a0 = table
    big_g, l = a1.shape[0] - 1, space_of(snap.lp)[1]
    pi = snap.log_pi_y.exp()  # (..., P, Y)
    u_seq = path_sum(_score_dot(snap.g, snap.lp))  # (..., P, Y): grad H . grad log pi(y)
    p = (pi * r).sum(-1)  # (..., P)
    # h1 = E_{pi|r=1}[grad H . grad log pi(y)], h0 = E_{pi|r=0}[...]
    h1 = (pi * r * u_seq).sum(-1) / p.clamp_min(1e-300)
    h0 = (pi * (1 - r) * u_seq).sum(-1) / (1 - p).clamp_min(1e-300)
    c = torch.arange(big_g + 1, dtype=pi.dtype)
    pmf = binomial_pmf(p, big_g)  # (..., P, G+1)
    unit = eta / (snap.lp.shape[-3] * big_g * l)  # the loss's token count P G L
    # E[grad H . dz] = eta/(P G L) sum_c Binom(c) [c A1(c) h1 + (G - c) A0(c) h0]
    pos_term = unit * pmf * c * a1 * h1[..., None]  # (..., P, G+1): the correct samples' share
    neg_term = unit * pmf * (big_g - c) * a0 * h0[..., None]  # the wrong samples' share
    hard = hard_regime(torch.arange(big_g + 1), big_g, k)  # (G+1,)
    cells = {}
    for sign, sel in (("pos", 1), ("neg", -1)):
        both = pos_term * (torch.sign(a1) == sel) + neg_term * (torch.sign(a0) == sel)  # (..., P, G+1)
        cells[f"dh_hard_{sign}"] = (both * hard).sum(-1)
        cells[f"dh_easy_{sign}"] = (both * ~hard).sum(-1)
    return _ledger(cells)
