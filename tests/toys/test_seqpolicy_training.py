"""Tests for the update of the exact sequence policy (qae_lab.toys.seqpolicy_training): clipping, horizon weights,
Adam, the simulated curves, the update's variance, and the settings' checks."""

from __future__ import annotations

import math

import pytest
import torch

from qae_lab.toys.seqpolicy import make_tasks
from qae_lab.toys.seqpolicy_training import UpdateSettings, group_update, simulate, update_variance
from testkit.seqpolicy_setup import peaked


def test_clipping_only_from_the_second_pass_and_clip_higher_clips_less():
    t = peaked(2, 4, 2, 3)
    run = lambda **kw: group_update(
        t.logits,
        t.rewards,
        UpdateSettings(group_size=4, eta=60.0, **kw),  # noqa: E731
        generator=torch.Generator().manual_seed(11),
    )[1]
    assert float(run(num_iterations=1)["clip_frac"].max()) == 0.0
    two, higher = run(num_iterations=2), run(num_iterations=2, epsilon_high=0.28)
    assert float(two["clip_frac"].sum()) > 0 and bool((higher["clip_frac"] <= two["clip_frac"]).all())
    assert float(run(num_iterations=2, epsilon_low=1e6, epsilon_high=1e6)["clip_frac"].max()) == 0.0
    assert torch.allclose(two["sampled/dh"], run(num_iterations=1)["sampled/dh"])  # the split is the first pass's


def test_horizon_weights_and_adam_leave_what_is_not_exact_undefined():
    t = peaked(2, 3, 2, 3)
    gen = lambda: torch.Generator().manual_seed(12)  # noqa: E731
    _, plain, _ = group_update(t.logits, t.rewards, UpdateSettings(group_size=4), generator=gen())
    _, saah, _ = group_update(t.logits, t.rewards, UpdateSettings(group_size=4, alpha=0.5), generator=gen())
    assert bool(saah["expected/dh"].isnan().all()) and bool(torch.isfinite(saah["sampled/dh"]).all())
    assert torch.allclose(saah["sampled/dh"], saah["dh_first_order"])
    _, adam, _ = group_update(
        t.logits, t.rewards, UpdateSettings(group_size=4, optimizer="adam", eta=0.01), generator=gen()
    )
    assert bool(adam["sampled/dh"].isnan().all()) and bool(torch.isfinite(adam["dh_first_order"]).all())
    assert torch.equal(plain["zero_adv_frac"], adam["zero_adv_frac"])  # the same groups


def test_simulate_curves_pair_up_and_chain():
    t = peaked(2, 4, 2, 3)
    s = UpdateSettings(group_size=4, eta=2.0)
    out = simulate(t.logits, t.rewards, s, steps=6, seed=3)
    assert out["entropy"].shape == (2, 7) and out["clip_frac"].shape == (2, 6)
    assert torch.allclose(out["entropy"].diff(dim=-1), out["dh_exact"])
    assert torch.allclose(out["entropy_per_prompt"][..., 0].mean(-1), out["entropy"][:, 0])
    again = simulate(t.logits, t.rewards, s, steps=6, seed=3)
    assert all(torch.equal(out[k], again[k]) for k in out)


def test_update_variance_same_groups_for_every_variant():
    t = make_tasks(3, 2, 3, start="peaked", seed=1, sharpness=1.5)
    out = update_variance(
        t.logits, t.rewards, UpdateSettings(group_size=4, baseline="mean"), alphas=(0.5, 2.0), n_draws=300, chunk=128
    )
    assert set(out) == {"alpha = 0", "SA-AH, alpha = 0.5", "AH, alpha = 0.5", "SA-AH, alpha = 2", "AH, alpha = 2"}
    assert math.isclose(out["alpha = 0"]["cos_plain"], 1.0, rel_tol=1e-9)
    assert all(v["trace_var"] >= 0 and -1 <= v["cos_success"] <= 1 for v in out.values())
    assert out["SA-AH, alpha = 2"]["cos_plain"] < 1 - 1e-6  # the horizon weights change the mean update


# ---------------------------------------------------------------- errors name the argument


@pytest.mark.parametrize(
    "call,name",
    [
        (lambda: UpdateSettings(eta=0.0), "eta"),
        (lambda: UpdateSettings(epsilon_high=-0.1), "epsilon_high"),
        (lambda: UpdateSettings(num_iterations=0), "num_iterations"),
        (lambda: UpdateSettings(optimizer="lion"), "optimizer"),
        (lambda: UpdateSettings(group_size=1), "group_size"),
        (lambda: group_update(torch.zeros(1, 2, 3, 2), torch.zeros(1, 2, 3), UpdateSettings()), "rewards"),
        (lambda: group_update(torch.zeros(2, 3, 2), torch.zeros(2, 4), UpdateSettings()), "logits"),
        (lambda: simulate(torch.zeros(1, 1, 3, 2), torch.zeros(1, 1, 4), UpdateSettings(), steps=-1), "steps"),
        (lambda: update_variance(torch.zeros(1, 3, 2), torch.zeros(1, 4), UpdateSettings(), n_draws=1), "n_draws"),
    ],
)
def test_errors_name_the_argument(call, name):
    with pytest.raises(ValueError, match=rf"^{name} "):
        call()


def test_simulate_keeps_every_prompts_exact_curves():
    from qae_lab.toys.seqpolicy import sequence_entropy, success_rate

    t = peaked(2, 3, 2, 3)
    out = simulate(t.logits, t.rewards, UpdateSettings(group_size=4, eta=3.0), steps=4, seed=5)
    h, p = out["entropy_curves"], out["success_curves"]
    assert h.shape == p.shape == (2, 3, 5) and h.dtype == p.dtype == torch.float64
    # step 0 is the start's exact entropy and success rate, prompt by prompt
    assert torch.allclose(h[..., 0], sequence_entropy(t.logits)) and torch.allclose(
        p[..., 0], success_rate(t.logits, t.rewards)
    )
    # the same numbers as the mean curves, the first-and-last per prompt and the exact change of each step
    assert torch.equal(h.mean(1), out["entropy"]) and torch.equal(p.mean(1), out["success"])
    assert torch.equal(h[..., [0, -1]], out["entropy_per_prompt"])
    assert torch.allclose(h.mean(1).diff(dim=-1), out["dh_exact"])
    none = simulate(t.logits, t.rewards, UpdateSettings(group_size=4), steps=0)
    assert none["entropy_curves"].shape == (2, 3, 1) and none["entropy"].shape == (2, 1)
