"""Tests for qae_lab.toys.bandit: step model (c), sampled groups, and the bandit training simulation.

Plain-Python references (loops over a group's responses, ``statistics`` for the spread)
stand in for the vectorised code; Monte-Carlo checks use a fixed ``torch.Generator`` and
tolerances set from the sample's own standard error.
"""

from __future__ import annotations

import math
import statistics

import pytest
import torch
from testkit.reference import ref_advantages, ref_entropy

from qae_lab.advantages import group_advantages
from qae_lab.toys.bandit import entropy, entropy_by_start, expected_pg_step, make_bandits
from qae_lab.toys.bandit import mc_entropy_change, sample_group_steps, simulate_training

F64 = torch.float64


def T(x, dtype=F64) -> torch.Tensor:
    """A float64 tensor: the library computes in float64, and float32 inputs would round the hand values."""
    return torch.tensor(x, dtype=dtype)


# ---------------------------------------------------------------- plain-Python references


def py_softmax(z: list[float]) -> list[float]:
    m = max(z)
    e = [math.exp(v - m) for v in z]
    s = sum(e)
    return [v / s for v in e]


def py_exact(z: list[float], dz: list[float]) -> float:
    """The exact entropy change H(softmax(z + dz)) - H(softmax(z))."""
    return ref_entropy([a + b for a, b in zip(z, dz)]) - ref_entropy(z)


# ---------------------------------------------------------------- step model (c): sampled groups


def test_sample_group_steps_shapes_and_determinism():
    z, r = T([1.0, 0.2, -0.5, 0.3]), T([1.0, 0.0, 1.0, 0.0])
    dz, rw = sample_group_steps(z, r, 8, 50, generator=torch.Generator().manual_seed(3))
    assert dz.shape == (50, 4) and rw.shape == (50, 8)
    assert dz.dtype == F64
    assert set(rw.unique().tolist()) <= {0.0, 1.0}
    assert dz.sum(1).abs().max().item() < 1e-12  # sum_a (e_y - pi)_a = 0 for every response
    dz2, rw2 = sample_group_steps(z, r, 8, 50, generator=torch.Generator().manual_seed(3))
    assert torch.equal(dz, dz2) and torch.equal(rw, rw2)
    dz3, _ = sample_group_steps(z, r, 8, 50, generator=torch.Generator().manual_seed(4))
    assert not torch.equal(dz, dz3)


@pytest.mark.parametrize(
    "baseline,scale,method",
    [
        ("mean", "none", "paper"),
        ("mean", "group", "paper"),
        ("quantile", "group", "paper"),
        ("quantile", "none", "linear"),
    ],
)
def test_sample_group_steps_matches_loop_reference(baseline, scale, method):
    # distinct rewards per action, so every sampled action can be read back from its reward
    z, r = [0.5, -0.2, 1.0, 0.0, -1.0], [0.0, 1.0, 2.0, 3.0, 4.0]
    g, m, eta, k = 6, 30, 0.8, 0.4
    dz, rw = sample_group_steps(
        T(z),
        T(r),
        g,
        m,
        baseline=baseline,
        k=k,
        quantile_method=method,
        scale=scale,
        eta=eta,
        generator=torch.Generator().manual_seed(7),
    )
    pi = py_softmax(z)
    for row in range(m):
        rewards = rw[row].tolist()
        actions = [int(x) for x in rewards]
        adv = ref_advantages(rewards, g, baseline, k, method, scale, 1e-6)
        # dz = (eta / G) sum_i A_i (e_{y_i} - pi)
        want = [eta / g * sum(a_i * ((a == y) - pi[a]) for a_i, y in zip(adv, actions)) for a in range(len(z))]
        torch.testing.assert_close(dz[row], T(want), rtol=1e-9, atol=1e-12)


def test_sampled_mean_baseline_step_is_shrunk_expected_gradient():
    # With A_i = r_i - (1/G) sum_j r_j (mean baseline, no std) and g_i = e_{y_i} - pi:
    #   E[r_i g_i] = sum_y pi_y r_y (e_y - pi) = pi (r - E_pi r),  E[r_j g_i] = E[r_j] E[g_i] = 0 for j != i,
    # so E[A_i g_i] = (1 - 1/G) pi (r - E_pi r) and E[dz] = (eta/G) sum_i E[A_i g_i] = (G-1)/G * expected_pg_step:
    # the group mean contains the response's own reward.
    z, r = T([1.0, 0.2, -0.5, 0.3, -1.2]), T([1.0, 0.0, 1.0, 0.0, 0.0])
    g, m, eta = 8, 40000, 0.5
    dz, _ = sample_group_steps(
        z, r, g, m, baseline="mean", scale="none", eta=eta, generator=torch.Generator().manual_seed(1)
    )
    mean, stderr = dz.mean(0), dz.std(0) / math.sqrt(m)  # (A,) each
    full = expected_pg_step(z, r, eta)
    # 5 standard errors per coordinate: a two-sided miss has probability ~6e-7 per coordinate
    assert ((mean - (g - 1) / g * full).abs() <= 5 * stderr).all()
    # the 1/G shrinkage is resolved: the unshrunk gradient is many standard errors away
    assert ((mean - full).abs() / stderr).max().item() > 10


# ---------------------------------------------------------------- mc_entropy_change

Z4, R4 = T([1.0, 0.0, 0.5, -1.0]), T([1.0, 0.0, 1.0, 0.0])


def test_mc_entropy_change_against_plain_python():
    g, m, eta = 8, 200, 0.5
    out = mc_entropy_change(Z4, R4, g, m, baseline="quantile", eta=eta, generator=torch.Generator().manual_seed(15))
    assert sorted(out) == ["expected_pg", "mean", "std", "stderr", "zero_adv_frac"]
    assert all(isinstance(v, float) for v in out.values())
    # the same draws, recomputed: exact entropy change of every sampled step, in plain Python
    dz, _ = sample_group_steps(Z4, R4, g, m, baseline="quantile", eta=eta, generator=torch.Generator().manual_seed(15))
    z = Z4.tolist()
    dh = [py_exact(z, row) for row in dz.tolist()]
    assert out["mean"] == pytest.approx(statistics.fmean(dh), abs=1e-12)
    assert out["std"] == pytest.approx(statistics.stdev(dh), rel=1e-9)
    assert out["stderr"] == pytest.approx(out["std"] / math.sqrt(m), rel=1e-12)
    assert out["expected_pg"] == pytest.approx(py_exact(z, expected_pg_step(Z4, R4, eta).tolist()), abs=1e-12)
    # a single group has no spread
    one = mc_entropy_change(Z4, R4, g, 1, generator=torch.Generator().manual_seed(0))
    assert one["std"] == 0.0 and one["stderr"] == 0.0


def test_mc_entropy_change_zero_fraction_follows_the_gate():
    g, m, k = 8, 500, 0.4
    _, rw = sample_group_steps(Z4, R4, g, m, generator=torch.Generator().manual_seed(16))
    counts = rw.sum(1).long().tolist()  # successes per group; sampling does not depend on the baseline
    mean = mc_entropy_change(Z4, R4, g, m, baseline="mean", k=k, generator=torch.Generator().manual_seed(16))
    quant = mc_entropy_change(Z4, R4, g, m, baseline="quantile", k=k, generator=torch.Generator().manual_seed(16))
    # mean baseline, binary rewards: A = 0 only in all-equal groups
    assert mean["zero_adv_frac"] == pytest.approx(sum(g for c in counts if c in (0, g)) / (g * m), abs=1e-12)
    # quantile baseline: G - c zeros if hard (c <= G - ceil(K G)), else c
    zeros = sum(g - c if c <= g - math.ceil(k * g) else c for c in counts)
    assert quant["zero_adv_frac"] == pytest.approx(zeros / (g * m), abs=1e-12)
    assert quant["zero_adv_frac"] > mean["zero_adv_frac"] + 0.3
    # both see the same policy, so the exact expected-gradient change is shared
    assert quant["expected_pg"] == mean["expected_pg"]


def test_mc_entropy_change_deterministic_given_generator():
    kw = {"baseline": "mean", "scale": "none", "eta": 0.3}
    a = mc_entropy_change(Z4, R4, 4, 100, generator=torch.Generator().manual_seed(17), **kw)
    b = mc_entropy_change(Z4, R4, 4, 100, generator=torch.Generator().manual_seed(17), **kw)
    c = mc_entropy_change(Z4, R4, 4, 100, generator=torch.Generator().manual_seed(18), **kw)
    assert a == b and a["mean"] != c["mean"]


# ---------------------------------------------------------------- simulate_training

P0 = T([0.2, 0.35, 0.5, 0.65, 0.8])


def test_simulate_training_lengths_and_determinism():
    kw = {"steps": 5, "group_size": 4, "n_actions": 8, "seed": 3}
    out = simulate_training(P0, **kw)
    assert sorted(out) == ["entropy", "hard_frac", "prompt_entropy", "success", "zero_adv_frac"]
    keys = ("entropy", "success", "prompt_entropy", "zero_adv_frac", "hard_frac")
    assert [len(out[key]) for key in keys] == [6, 6, 6, 5, 5]
    assert all(0.0 <= v <= 1.0 for key in out if key != "prompt_entropy" for v in out[key])
    # the per-prompt entropies (H / log A) average to the mean entropy at every step
    assert [statistics.fmean(h) for h in out["prompt_entropy"]] == pytest.approx(out["entropy"], abs=1e-12)
    assert simulate_training(P0, **kw) == out
    assert simulate_training(P0, **(kw | {"seed": 4})) != out
    assert simulate_training(P0, steps=0, group_size=4, n_actions=8)["zero_adv_frac"] == []


def test_simulate_training_starts_from_make_bandits_and_pairs_runs():
    kw = {"steps": 3, "group_size": 8, "n_actions": 8, "sharpness": 1.0, "seed": 21}
    mean = simulate_training(P0, baseline="mean", **kw)
    quant = simulate_training(P0, baseline="quantile", **kw)
    z, _ = make_bandits(P0, 8, 1.0, torch.Generator().manual_seed(21))
    for out in (mean, quant):
        assert out["success"][0] == pytest.approx(P0.double().mean().item(), abs=1e-12)
        assert out["entropy"][0] == pytest.approx(entropy(z).mean().item() / math.log(8), abs=1e-12)
    assert mean["entropy"][0] == quant["entropy"][0] and mean["success"][0] == quant["success"][0]
    # step 1 samples from the same policy with the same stream: the same groups, so the same regimes
    assert mean["hard_frac"][0] == quant["hard_frac"][0]
    assert mean["entropy"][1:] != quant["entropy"][1:]  # ... and then the updates differ


@pytest.mark.parametrize("baseline", ["mean", "quantile"])
def test_simulate_training_learns_an_easy_setting(baseline):
    p0 = T([0.3, 0.4, 0.5, 0.6, 0.7, 0.5, 0.4, 0.6])
    out = simulate_training(p0, steps=40, group_size=8, n_actions=8, baseline=baseline, eta=1.0, seed=0)
    assert out["success"][-1] > out["success"][0] + 0.15
    assert statistics.fmean(out["success"][-5:]) > statistics.fmean(out["success"][:5])


@pytest.mark.parametrize(
    "kwargs,name",
    [
        ({"steps": -1}, "steps"),
        ({"steps": 1.5}, "steps"),
        ({"steps": True}, "steps"),
        ({"group_size": 1}, "group_size"),
        ({"baseline": "median"}, "baseline"),
        ({"scale": "std"}, "scale"),
        ({"quantile_method": "nearest"}, "quantile_method"),
        ({"eta": 0.0}, "eta"),
        ({"eta": float("nan")}, "eta"),
        ({"n_actions": 1}, "n_actions"),
        ({"sharpness": -1.0}, "sharpness"),
        ({"k": 1.5}, "k"),
        ({"k": 0.0}, "k"),
        ({"optimizer": "rmsprop"}, "optimizer"),
    ],
)
def test_simulate_training_bad_input(kwargs, name):
    args = {"steps": 2, "group_size": 4, "n_actions": 8} | kwargs
    with pytest.raises(ValueError, match=rf"^{name} "):
        simulate_training(P0, **args)


def test_simulate_training_bad_p0():
    for p0 in (T([0.0, 0.5]), T([0.5, 1.0]), T([[0.5]]), [0.5, float("nan")]):
        with pytest.raises(ValueError, match=r"^p "):
            simulate_training(p0, steps=1, group_size=4)


def test_simulate_training_checks_k_even_without_steps():
    # steps=0 runs no update, but a bad K must still fail at once ("checked even when unused, so a typo never
    # hides", as group_advantages puts it)
    for k in (1.5, 0.0, float("nan")):
        with pytest.raises(ValueError, match=r"^k "):
            simulate_training(P0, steps=0, group_size=4, k=k)


# ---------------------------------------------------------------- bad input, generally

GOOD_Z, GOOD_R = T([1.0, 0.0, -1.0]), T([1.0, 0.0, 0.0])


def _calls_with(z=GOOD_Z, r=GOOD_R, eta=0.5, k=0.4):
    """One call of each sampled-group function, with the given argument and the others good."""
    return [
        lambda: sample_group_steps(z, r, 4, 3, k=k, eta=eta, generator=torch.Generator().manual_seed(0)),
        lambda: mc_entropy_change(z, r, 4, 3, k=k, eta=eta, generator=torch.Generator().manual_seed(0)),
    ]


@pytest.mark.parametrize("z", [T([1.0]), T(1.0), torch.zeros(3, 1), T([1.0, float("nan"), 0.0])])
def test_bad_z(z):
    for call in _calls_with(z=z):
        with pytest.raises(ValueError, match=r"^z "):
            call()


@pytest.mark.parametrize("r", [T([1.0, 0.0]), T([1.0, 0.0, 0.0, 1.0]), T([1.0, float("inf"), 0.0])])
def test_bad_r(r):
    for call in _calls_with(r=r):
        with pytest.raises(ValueError, match=r"^r "):
            call()


@pytest.mark.parametrize("eta", [0.0, -0.1, float("nan"), float("inf"), "0.1", None])
def test_bad_eta(eta):
    for call in _calls_with(eta=eta):
        with pytest.raises(ValueError, match="eta"):
            call()


@pytest.mark.parametrize("k", [0.0, 1.0, -0.2, 1.3, float("nan"), True, "0.4"])
def test_bad_k(k):
    for call in _calls_with(k=k):
        with pytest.raises(ValueError, match=r"^k "):
            call()


def test_bad_group_sizes_and_counts():
    for g in (1, 0, 2.0, True):
        with pytest.raises(ValueError, match="group_size"):
            sample_group_steps(GOOD_Z, GOOD_R, g, 3)
    for m in (0, -1, 2.0, True):
        with pytest.raises(ValueError, match="n_groups"):
            sample_group_steps(GOOD_Z, GOOD_R, 4, m)
    with pytest.raises(ValueError, match="z"):
        sample_group_steps(torch.zeros(2, 3), GOOD_R, 4, 3)  # one policy at a time


# ---------------------------------------------------------------- the optimisers


def _adam_reference(p0, steps: int, *, scalar: bool, lr: float = 0.05, seed: int = 9) -> list[list[float]]:
    """simulate_training's Adam run rebuilt around torch.optim.Adam (per logit) or, for ``scalar``, by hand with one
    second moment per prompt; the same bandits and the same random stream. Returns each step's per-prompt H / log A."""
    g, n_actions = 4, 6
    gen = torch.Generator().manual_seed(seed)
    z, r = make_bandits(p0, n_actions, 1.0, gen)
    z = z.clone().requires_grad_(True)
    opt = torch.optim.Adam([z], lr=lr, maximize=True)  # betas (0.9, 0.999), eps 1e-8
    m = torch.zeros_like(z)
    v = torch.zeros(z.shape[0], 1, dtype=F64)
    out = []
    for t in range(1, steps + 2):
        pi = torch.softmax(z.detach(), -1)
        out.append((entropy(z.detach()) / math.log(n_actions)).tolist())
        if t == steps + 1:
            break
        actions = torch.multinomial(pi, g, replacement=True, generator=gen)
        adv = group_advantages(r.gather(1, actions).reshape(-1), g, baseline="quantile").view(-1, g)
        # the surrogate whose gradient is (1/G) sum_i A_i (e_{y_i} - pi): (1/G) sum_i A_i log pi(y_i)
        objective = (adv * torch.log_softmax(z, -1).gather(1, actions)).sum() / g
        (grad,) = torch.autograd.grad(objective, z)
        if not scalar:
            z.grad = grad
            opt.step()
            continue
        m = 0.9 * m + 0.1 * grad
        v = 0.999 * v + 0.001 * (grad**2).mean(-1, keepdim=True)
        with torch.no_grad():
            z += lr * (m / (1 - 0.9**t)) / ((v / (1 - 0.999**t)).sqrt() + 1e-8)
    return out


@pytest.mark.parametrize("optimizer", ["adam", "adam_scalar"])
def test_simulate_training_adam_matches_a_reference(optimizer):
    p0 = T([0.2, 0.5, 0.8])
    out = simulate_training(
        p0, steps=6, group_size=4, n_actions=6, sharpness=1.0, eta=0.05, optimizer=optimizer, seed=9
    )
    want = _adam_reference(p0, 6, scalar=optimizer == "adam_scalar")
    torch.testing.assert_close(T(out["prompt_entropy"]), T(want), rtol=0, atol=1e-9)


def test_adam_cancels_the_step_size_and_sgd_does_not():
    # Adam's update is invariant to a common factor of the gradient (up to its eps), SGD's is not. With G = 2 a mixed
    # group's std is sqrt(1/2) always, so scale "group" is scale "none" times one constant, 1 / (sqrt(1/2) + eps)
    kw = {"steps": 8, "group_size": 2, "n_actions": 6, "seed": 3, "baseline": "mean"}
    p0 = T([0.3, 0.6])
    for opt, same in (("adam", True), ("sgd", False)):
        a = T(simulate_training(p0, scale="none", eta=0.1, optimizer=opt, **kw)["prompt_entropy"])
        b = T(simulate_training(p0, scale="group", eta=0.1, optimizer=opt, **kw)["prompt_entropy"])
        assert bool(torch.allclose(a, b, rtol=0, atol=1e-6)) is same, opt


# ---------------------------------------------------------------- entropy by starting regime


def test_entropy_by_start_by_hand():
    h = [[0.9, 0.5, 0.7, 0.2], [0.8, 0.6, 0.7, 0.4]]  # (T+1 = 2, P = 4)
    out = entropy_by_start(h, [0.1, 0.9, 0.5, 0.3], hard_max=0.3, easy_min=0.7)
    assert out["hard"].tolist() == pytest.approx([0.55, 0.6]) and out["easy"].tolist() == [0.5, 0.6]
    # a replicate dimension in the middle: (T+1, R, P) -> (T+1, R)
    out = entropy_by_start(T([h, h]).transpose(0, 1), [0.1, 0.9, 0.5, 0.3])
    assert out["easy"].shape == (2, 2) and out["easy"][:, 0].tolist() == [0.5, 0.6]


def test_entropy_by_start_refuses_what_it_cannot_group():
    with pytest.raises(ValueError, match="^prompt_entropy "):
        entropy_by_start([[0.5, 0.5]], [0.1, 0.5, 0.9])
    with pytest.raises(ValueError, match="^p0 "):
        entropy_by_start([[0.5, 0.5]], [0.4, 0.5])  # no prompt starts easy
