"""Tests for qae_lab.loss: the update as a pure function, without TRL or a model.

* recorded steps (tests/testkit/recorded_steps.py): the micro-batches the trainer of commit e7fc51d computed
  inside TRL's loss; the pure function gives the same loss, dL/dlogps and metrics on each;
* hand-computed cases from the equations (SA-AH's sum(w) normalisation, the PPO clip, GSPO's
  sequence ratio, two-sided clipping, the k3 KL, each loss type's reduction, sparse denominators);
* bad settings are refused with the argument named.
"""

from __future__ import annotations

import math

import pytest
import torch
from testkit.recorded_steps import EPS32, ROUNDING_ULPS, load

from qae_lab.loss import LossScale, LossSettings, grpo_loss, reduce_token_loss

RECORDED = load()
# float32 rounding against each quantity's own scale, as tests/testkit/recorded_steps.py derives it for another machine
REL = ROUNDING_ULPS * EPS32

# the LossSettings each recorded case's QAEConfig amounts to (TRL's defaults: epsilon 0.2, epsilon_high = epsilon)
SETTINGS = {
    "bnpo": LossSettings(loss_type="bnpo"),
    "grpo_sa_ah": LossSettings(loss_type="grpo", token_weighting="sa_ah", alpha=0.3),
    "dapo_ah": LossSettings(loss_type="dapo", token_weighting="ah", alpha=0.5),
    "bnpo_sa_ah_sparse": LossSettings(loss_type="bnpo", token_weighting="sa_ah", alpha=0.4),
    "grpo_sparse": LossSettings(loss_type="grpo"),
    "dapo_sa_ah_sparse": LossSettings(loss_type="dapo", token_weighting="sa_ah"),
    "mean_unscaled": LossSettings(loss_type="bnpo"),
    "gspo": LossSettings(loss_type="grpo", sequence_ratio=True, epsilon_low=3e-4, epsilon_high=4e-4),
    "clip_higher_sa_ah": LossSettings(loss_type="bnpo", epsilon_high=0.28, token_weighting="sa_ah"),
    "clip_cov": LossSettings(
        loss_type="bnpo", cov_penalty="clip_cov", clip_cov_ratio=0.2, clip_cov_lb=-1.0, clip_cov_ub=5.0
    ),
    "kl_cov_dapo": LossSettings(loss_type="dapo", cov_penalty="kl_cov", kl_cov_ratio=0.1, kl_cov_coef=0.7),
    "beta_sa_ah": LossSettings(loss_type="bnpo", token_weighting="sa_ah", beta=0.04),
    "entropy_bonus_grpo": LossSettings(loss_type="grpo", token_weighting="sa_ah", entropy_coef=0.01),
    "top_entropy": LossSettings(loss_type="bnpo", token_weighting="sa_ah"),
    "top_k_grpo": LossSettings(loss_type="grpo", token_weighting="sa_ah", alpha=0.7),
    "dr_grpo": LossSettings(
        loss_type="dr_grpo", max_completion_length=RECORDED["cases"]["dr_grpo"]["max_completion_length"]
    ),
    "delta_neg_mask": LossSettings(loss_type="bnpo", delta=1.1),
}


def forward_rows(case: dict) -> tuple[dict, LossScale]:
    """The rows (and columns) the recorded forward saw, and the scale of the whole micro-batch.

    Sparse updates left the zero-advantage rows out and cut the padding columns no kept row reaches.
    """
    inputs = case["inputs"]
    adv = inputs["advantages"]
    full_mask = inputs["completion_mask"].double()
    rows = case["forward_rows"]
    keep = adv != 0 if rows < adv.shape[0] else torch.ones_like(adv, dtype=torch.bool)
    assert int(keep.sum()) == rows
    width = case["logps"].shape[1]
    cut = {
        k: v[keep][:, :width] if v.dim() == 2 else v[keep]
        for k, v in inputs.items()
        if isinstance(v, torch.Tensor) and v.dim() and v.shape[0] == adv.shape[0]
    }
    skipped = float(full_mask[~keep].sum())
    scale = LossScale(
        num_items=inputs.get("num_items_in_batch"),
        rows=None if bool(keep.all()) else adv.shape[0],
        skipped_tokens=skipped,
    )
    return cut, scale


def high_entropy_tokens(entropies, mask, quantile):
    """TRL's forking-token mask on one process: entropy at or above the (1 - quantile) quantile."""
    threshold = torch.quantile(entropies[mask.bool()].float(), 1 - quantile)
    return (entropies * mask >= threshold) & mask.bool()


def run_case(name: str):
    case = RECORDED["cases"][name]
    cut, scale = forward_rows(case)
    logps = case["logps"].clone().requires_grad_()
    mask = cut["completion_mask"].double()
    settings = SETTINGS[name]
    h_norm = None
    if settings.token_weighting != "none":
        h_norm = case["h_norm"] if "h_norm" in case else (case["entropies"] / math.log(case["vocab_size"])).clamp(0, 1)
    entropy_mask = high_entropy_tokens(case["entropies"], mask, 0.5) if name == "top_entropy" else None
    generator = torch.Generator().manual_seed(hash((case["seed"], case["global_step"], 1)) % 2**63)
    out = grpo_loss(
        logps,
        cut["advantages"],
        mask,
        settings,
        scale,
        old_logps=cut["old_per_token_logps"],
        entropies=case["entropies"],
        h_norm=h_norm,
        ref_logps=cut.get("ref_per_token_logps"),
        entropy_mask=entropy_mask,
        hard_rows=cut["prompt_hard"],
        generator=generator,
    )
    out.loss.backward()
    return case, out, logps.grad, mask


def test_every_recorded_case_has_its_settings():
    assert set(SETTINGS) == set(RECORDED["cases"])


@pytest.mark.parametrize("name", sorted(SETTINGS))
def test_recorded_step_same_loss_gradient_and_metrics(name):
    case, out, grad, mask = run_case(name)
    # the loss runs in float32: agreement to float32 rounding, each quantity against its own scale (the loss: its
    # terms, at most max |A| times a ratio near 1; dL/dlogps: its largest element; the metrics: the largest one)
    loss_scale = max(1.0, float(case["inputs"]["advantages"].abs().max()))
    torch.testing.assert_close(out.loss.detach(), case["loss"], rtol=REL, atol=REL * loss_scale)
    torch.testing.assert_close(grad, case["dloss_dlogps"], rtol=REL, atol=REL * float(case["dloss_dlogps"].abs().max()))
    want = case["metrics"]
    metric_scale = max(1.0, max(abs(v) for values in want.values() for v in values if v is not None))
    for key, value in out.metrics.items():
        assert [value] == pytest.approx(want[key], rel=REL, abs=REL * metric_scale), key
    assert {k for k in want if k.startswith(("saah/", "cov/", "ledger/"))} == set(out.metrics)
    # TRL's own metrics, reduced as it reduces them on one process
    stats = out.token_stats
    for key in ("low", "high", "region"):
        x = stats[f"clip_{key}"].double()
        x = x.expand(mask.shape) * mask if x.shape[1] > 1 or x.shape == mask.shape else x
        mean = (x.sum() / (mask.sum() if stats[f"clip_{key}"].shape[1] > 1 else x.shape[0])).item()
        assert want[f"clip_ratio/{key}_mean"] == [pytest.approx(mean, rel=REL, abs=REL)], key
    entropy_key = "entropy/updated_rows" if "entropy/updated_rows" in want else "entropy"
    assert want[entropy_key] == [pytest.approx((stats["entropy"] * mask).sum().item() / mask.sum().item())]
    if "kl" in want:
        assert want["kl"] == [pytest.approx((stats["kl"] * mask).sum().item() / mask.sum().item())]
    if "policy_loss" in want:
        assert want["policy_loss"] == [pytest.approx(stats["policy_loss"].item())]


def test_recorded_cases_tell_the_settings_apart():
    # the comparison above could not pass with the wrong settings: each case's loss differs under the default ones
    for name in ("grpo_sa_ah", "clip_higher_sa_ah", "clip_cov", "beta_sa_ah", "gspo", "delta_neg_mask"):
        case = RECORDED["cases"][name]
        cut, scale = forward_rows(case)
        mask = cut["completion_mask"].double()
        plain = grpo_loss(
            case["logps"],
            cut["advantages"],
            mask,
            LossSettings(loss_type="bnpo"),
            scale,
            old_logps=cut["old_per_token_logps"],
        )
        assert abs(plain.loss.item() - case["loss"].item()) > 1e-6, name


# ---------------------------------------------------------------- hand-computed


def leaf(p):
    return torch.log(torch.tensor(p, dtype=torch.float64)).requires_grad_()


def test_sa_ah_loss_is_the_weighted_token_mean():
    # two responses of 2 tokens, on-policy (r = 1): l_t = -A_i; SA-AH's horizon weights act on the A < 0 row only
    logps, m = leaf([[0.5, 0.5], [0.5, 0.5]]), torch.ones(2, 2, dtype=torch.float64)
    h = torch.tensor([[0.5, 0.5], [0.5, 0.5]], dtype=torch.float64)
    a = torch.tensor([1.0, -1.0], dtype=torch.float64)
    out = grpo_loss(logps, a, m, LossSettings(loss_type="bnpo", token_weighting="sa_ah", alpha=2.0), h_norm=h)
    w = torch.tensor([[1.0, 1.0], [math.exp(-1.0), math.exp(-2.0)]])
    want = (-(w[0].sum()) + w[1].sum()) / w.sum()  # sum_t w_t l_t / sum_t w_t
    assert out.loss.item() == pytest.approx(want.item())
    assert out.metrics["saah/w_mean_neg"] == pytest.approx((math.exp(-1) + math.exp(-2)) / 2)
    ah = grpo_loss(logps, a, m, LossSettings(loss_type="bnpo", token_weighting="ah", alpha=2.0), h_norm=h)
    wa = torch.tensor([[math.exp(-1.0), math.exp(-2.0)]] * 2)
    assert ah.loss.item() == pytest.approx(((-wa[0] + wa[1]).sum() / wa.sum()).item())  # = 0: symmetric rows


def test_grpo_normalises_each_response_by_its_own_weights():
    logps, m = leaf([[0.5, 0.5, 0.5], [0.5, 0.5, 0.5]]), torch.tensor([[1.0, 1, 1], [1, 0, 0]], dtype=torch.float64)
    h = torch.full((2, 3), 0.25, dtype=torch.float64)
    a = torch.tensor([-2.0, -1.0], dtype=torch.float64)
    out = grpo_loss(logps, a, m, LossSettings(loss_type="grpo", token_weighting="sa_ah", alpha=1.0), h_norm=h)
    # per response: sum_t w_t (-A_i) / sum_t w_t = -A_i, whatever the weights; then the mean over responses
    assert out.loss.item() == pytest.approx((2.0 + 1.0) / 2)


def test_ppo_clip_and_two_sided_bound():
    logps = leaf([[0.5], [0.5]])
    old = torch.log(torch.tensor([[0.25], [0.25]], dtype=torch.float64))  # r = 2 on both
    m = torch.ones(2, 1, dtype=torch.float64)
    a = torch.tensor([1.0, -1.0], dtype=torch.float64)
    out = grpo_loss(logps, a, m, LossSettings(loss_type="bnpo"), old_logps=old)
    # A > 0: min(2 A, 1.2 A) = 1.2 (clipped, no gradient); A < 0: -min(-2, -1.2) = 2 (unclipped)
    assert out.loss.item() == pytest.approx((-1.2 + 2.0) / 2)
    out.loss.backward()
    assert logps.grad[0, 0].item() == 0.0 and logps.grad[1, 0].item() == pytest.approx(2.0 / 2)
    assert out.token_stats["clip_high"].tolist() == [[True], [False]]
    bounded = grpo_loss(logps, a, m, LossSettings(loss_type="bnpo", delta=1.5), old_logps=old)
    assert bounded.loss.item() == pytest.approx((-1.2 + 1.5) / 2)  # delta caps the A < 0 side at 1.5


def test_sequence_ratio_is_the_mean_log_ratio():
    logps = leaf([[0.5, 0.5]])
    old = torch.log(torch.tensor([[0.25, 1.0]], dtype=torch.float64))  # log-ratios log 2 and log 0.5: mean 0
    out = grpo_loss(
        logps,
        torch.tensor([1.0], dtype=torch.float64),
        torch.ones(1, 2, dtype=torch.float64),
        LossSettings(loss_type="grpo", sequence_ratio=True, epsilon_low=3e-4, epsilon_high=4e-4),
        old_logps=old,
    )
    assert out.loss.item() == pytest.approx(-1.0)  # s_i = 1: inside the clip whatever the token ratios


def test_kl_is_k3_added_on_every_token():
    logps = leaf([[0.5, 0.25]])
    ref = torch.log(torch.tensor([[0.25, 0.25]], dtype=torch.float64))
    out = grpo_loss(
        logps,
        torch.tensor([0.0], dtype=torch.float64),
        torch.ones(1, 2, dtype=torch.float64),
        LossSettings(loss_type="bnpo", beta=0.1),
        ref_logps=ref,
    )
    d = math.log(0.25) - math.log(0.5)
    assert out.loss.item() == pytest.approx(0.1 * (math.exp(d) - d - 1) / 2)


def test_each_loss_type_reduces_as_trl_and_sparse_rows_stay_in_the_denominators():
    x = torch.tensor([[1.0, 3.0], [2.0, 0.0]])
    m = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    assert reduce_token_loss(x, m, "bnpo").item() == pytest.approx(2.0)
    assert reduce_token_loss(x, m, "grpo").item() == pytest.approx((2.0 + 2.0) / 2)
    assert reduce_token_loss(x, m, "dr_grpo", max_completion_length=4).item() == pytest.approx(6 / 8)
    assert reduce_token_loss(
        x, m, "dapo", LossScale(num_items=12, num_processes=2, accumulation=2, steps_per_generation=4)
    ).item() == pytest.approx(6 / 3)
    assert reduce_token_loss(x, m, "bnpo", LossScale(skipped_tokens=3)).item() == pytest.approx(1.0)
    assert reduce_token_loss(x, m, "bnpo", LossScale(accumulation=2)).item() == pytest.approx(1.0)
    with pytest.raises(ValueError, match="num_items"):
        reduce_token_loss(x, m, "dapo")


@pytest.mark.parametrize(
    "bad, message",
    [
        ({"loss_type": "cispo"}, "loss_type must be one of"),
        ({"token_weighting": "soft"}, "token_weighting must be one of"),
        ({"alpha": -0.1}, "alpha must be >= 0"),
        ({"alpha": float("nan")}, "alpha"),
        ({"delta": 0.9}, "delta must be > 1"),
        ({"cov_penalty": "clip"}, "cov_penalty must be one of"),
        ({"clip_cov_ratio": 0.0}, "clip_cov_ratio"),
        ({"loss_type": "dr_grpo"}, "max_completion_length"),
        ({"loss_type": "dr_grpo", "max_completion_length": 8, "token_weighting": "sa_ah"}, "token_weighting needs"),
    ],
)
def test_bad_settings_are_named(bad, message):
    with pytest.raises(ValueError, match=message):
        LossSettings(**bad)


def test_settings_are_frozen():
    s = LossSettings()
    with pytest.raises(AttributeError):
        s.alpha = 0.9
