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


# ---------------------------------------------------------------- boundaries and wiring (mutation-testing survivors)


def test_clip_cov_band_upper_bound_is_the_settings():
    # Clip-Cov draws only tokens with lb < Cov_t < clip_cov_ub. logps centred: +-(log 9)/2 = +-1.0986, A centred:
    # +-0.75, so Cov = 0.824 on (0, 0) and (1, 1): outside the band (0.5, 0.8), nothing drawn, the plain loss
    # -(1 + 1 - 0.5 - 0.5) / 4; inside (0.5, 5) the two would be zeroed: -(1 - 0.5) / 4.
    # Planted: clip_cov_select(...) without s.clip_cov_ub (its default 5.0) -> fails.
    lp = torch.log(torch.tensor([[0.9, 0.1], [0.9, 0.1]], dtype=torch.float64))
    a, m = torch.tensor([1.0, -0.5], dtype=torch.float64), torch.ones(2, 2, dtype=torch.float64)
    settings = LossSettings(cov_penalty="clip_cov", clip_cov_ratio=1.0, clip_cov_lb=0.5, clip_cov_ub=0.8)
    out = grpo_loss(lp, a, m, settings)
    assert out.metrics["cov/selected_frac"] == 0.0
    assert out.loss.item() == pytest.approx(-0.25)


def test_kl_cov_on_one_token_selected_fraction_and_loss_type():
    # one token, sampled at p = 0.25, now 0.5, A = 0: KL-Cov selects it (fraction 1/1), and its penalty
    # 0.7 |log 0.5 - log 0.25| = 0.7 log 2 is reduced like the policy term (bnpo: over its 1 token).
    # Planted: n = m.sum().clamp(min=2) -> fails (fraction 0.5); reduce_token_loss(cov_penalty, m, None, scale) -> fails
    # (reduced as dapo: needs num_items).
    lp = torch.log(torch.tensor([[0.5]], dtype=torch.float64))
    old = torch.log(torch.tensor([[0.25]], dtype=torch.float64))
    settings = LossSettings(loss_type="bnpo", cov_penalty="kl_cov", kl_cov_ratio=1.0, kl_cov_coef=0.7)
    out = grpo_loss(lp, torch.tensor([0.0], dtype=torch.float64), torch.ones(1, 1), settings, old_logps=old)
    assert out.metrics["cov/selected_frac"] == 1.0
    assert out.loss.item() == pytest.approx(0.7 * math.log(2.0))


def test_sequence_ratio_of_a_one_token_response():
    # GSPO on a 1-token response: s = exp(log 2 / 1) = 2; A = -1: -min(2 * -1, 1.2 * -1) = 2.
    # Planted: m.sum(-1).clamp(min=2.0) in the sequence ratio -> fails (s = sqrt 2).
    out = grpo_loss(
        leaf([[0.5]]),
        torch.tensor([-1.0], dtype=torch.float64),
        torch.ones(1, 1, dtype=torch.float64),
        LossSettings(loss_type="grpo", sequence_ratio=True),
        old_logps=torch.log(torch.tensor([[0.25]], dtype=torch.float64)),
    )
    assert out.loss.item() == pytest.approx(2.0)


def test_kl_stat_is_none_without_beta():
    # token_stats holds None where a statistic is not computed (beta = 0: no KL).
    # Planted: kl = "" -> fails.
    out = grpo_loss(leaf([[0.5, 0.5]]), torch.tensor([1.0], dtype=torch.float64), torch.ones(1, 2), LossSettings())
    assert out.token_stats["kl"] is None


@pytest.mark.parametrize(
    "loss_type, scale, want_loss, want_policy",
    [
        # bnpo: -(1 + 1 - 0.5 - 0.5) / 4 = -0.25, split over 2 accumulation steps; policy_loss unsplit
        ("bnpo", LossScale(accumulation=2), -0.125, -0.25),
        # dapo: -1 / (4 tokens / 1 process * 2 steps / 1): already per generation, policy_loss = loss
        ("dapo", LossScale(num_items=4, accumulation=2), -0.125, -0.125),
    ],
)
def test_policy_loss_is_the_unsplit_micro_batch_loss(loss_type, scale, want_loss, want_policy):
    # Planted: policy_loss = loss / (...) -> fails; (1 if ... and False ...), (1 if ... or True ...), (2 if dapo ...),
    # (1 if loss_type != "dapo" ...), "XXdapoXX" / "DAPO" -> each fails one row.
    lp = torch.log(torch.tensor([[0.5, 0.25], [0.5, 0.5]], dtype=torch.float64))
    a = torch.tensor([1.0, -0.5], dtype=torch.float64)
    out = grpo_loss(lp, a, torch.ones(2, 2), LossSettings(loss_type=loss_type), scale)
    assert out.loss.item() == pytest.approx(want_loss)
    assert out.token_stats["policy_loss"].item() == pytest.approx(want_policy)


def test_entropy_bonus_over_one_token_and_accumulation():
    # A = 0: the loss is the bonus alone, -coef * mean entropy over the counted tokens (one here: 0.7), then split
    # over the accumulation steps.
    # Planted: on.sum().clamp(min=2.0) -> fails (-0.035); "* scale.accumulation" instead of "/" -> fails (-0.14).
    lp, a = leaf([[0.5, 0.5]]), torch.tensor([0.0], dtype=torch.float64)
    m, h = torch.tensor([[1.0, 0.0]], dtype=torch.float64), torch.tensor([[0.7, 5.0]], dtype=torch.float64)
    settings = LossSettings(entropy_coef=0.1)
    assert grpo_loss(lp, a, m, settings, entropies=h).loss.item() == pytest.approx(-0.07)
    assert grpo_loss(lp, a, m, settings, LossScale(accumulation=2), entropies=h).loss.item() == pytest.approx(-0.035)


def test_ledger_uses_the_settings_clip_range():
    # r = 0.35 / 0.5 = 0.7 on an A < 0 token: clipped with eps_low = 0.2 (the ledger's term is 0), not with 0.5 or
    # 0.9 (the same nonzero term both times).
    # Planted: batch_ledger(...) without epsilon_low (its default 0.2) -> fails.
    def dh(eps_low):
        out = grpo_loss(
            torch.log(torch.tensor([[0.35]], dtype=torch.float64)),
            torch.tensor([-1.0], dtype=torch.float64),
            torch.ones(1, 1, dtype=torch.float64),
            LossSettings(epsilon_low=eps_low),
            old_logps=torch.log(torch.tensor([[0.5]], dtype=torch.float64)),
            entropies=torch.tensor([[1.0]], dtype=torch.float64),
        )
        return out.metrics["ledger/dh"]

    assert dh(0.2) == 0.0
    assert dh(0.5) != 0.0 and dh(0.5) == pytest.approx(dh(0.9))


def test_clip_metrics_exclude_the_boundary():
    # as TRL counts them: r < 1 - eps_low (A < 0) and r > 1 + eps_high (A > 0), strictly; on-policy r = exp(0) = 1
    # exactly, on both bounds when eps = 0: nothing is clipped.
    # Planted: "bounded <= 1 - eps_low" -> fails; "bounded >= 1 + eps_high" -> fails.
    out = grpo_loss(
        leaf([[0.5], [0.5]]),
        torch.tensor([1.0, -1.0], dtype=torch.float64),
        torch.ones(2, 1),
        LossSettings(epsilon_low=0.0, epsilon_high=0.0),
    )
    assert out.token_stats["clip_low"].tolist() == [[False], [False]]
    assert out.token_stats["clip_high"].tolist() == [[False], [False]]


def test_mask_counts_stay_exact_with_half_precision_logps():
    # bfloat16 logps (float32 advantages, as TRL's): 257 tokens of l_t = -1 give -1 exactly, as TRL's integer mask
    # counts them; a bfloat16 mask would round the count to 256 (-1.0039). float64 logps keep float64 throughout:
    # the entropy bonus of float32 entropies 1 and 2^-24 is their float64 mean, not their float32 sum 1.0 / 2.
    # Planted (on the fixed source): check_mask(...).to(None) -> fails (second part); the former .to(logps.dtype)
    # -> fails (first part).
    lp = torch.full((1, 257), -1.0, dtype=torch.bfloat16)
    for loss_type in ("bnpo", "grpo"):
        out = grpo_loss(lp, torch.tensor([1.0]), torch.ones(1, 257), LossSettings(loss_type=loss_type))
        assert out.loss.item() == -1.0, loss_type
    h = torch.tensor([[1.0, 2.0**-24]], dtype=torch.float32)
    out = grpo_loss(
        leaf([[0.5, 0.5]]),
        torch.tensor([0.0], dtype=torch.float64),
        torch.ones(1, 2),
        LossSettings(entropy_coef=1.0),
        entropies=h,
    )
    assert out.loss.dtype == torch.float64
    assert out.loss.item() == pytest.approx(-(1.0 + 2.0**-24) / 2, rel=1e-15, abs=0)


def test_reductions_at_one_token_and_with_accumulation():
    # boundaries of the denominators: one token (bnpo's count, dapo's num_items = 1) divides by 1, and grpo / dr_grpo
    # divide by the accumulation steps.
    # Planted: bnpo clamp(min=2.0) -> fails; dapo items clamp(min=2.0) -> fails; grpo "* scale.accumulation" -> fails;
    # dr_grpo "* scale.accumulation" -> fails.
    one, m1 = torch.tensor([[3.0]]), torch.ones(1, 1)
    assert reduce_token_loss(one, m1, "bnpo").item() == pytest.approx(3.0)
    assert reduce_token_loss(one, m1, "dapo", LossScale(num_items=1)).item() == pytest.approx(3.0)
    x, m = torch.tensor([[1.0, 3.0], [2.0, 0.0]]), torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    assert reduce_token_loss(x, m, "grpo", LossScale(accumulation=2)).item() == pytest.approx(2.0 / 2)
    dr = reduce_token_loss(x, m, "dr_grpo", LossScale(accumulation=2), max_completion_length=4)
    assert dr.item() == pytest.approx(6 / 8 / 2)


def test_dapo_denominator_in_the_loss_dtype():
    # float64 per-token losses: 4 / (10 / 3 processes) = 1.2 to float64 rounding (a float32 denominator is off by
    # ~2e-8 relative).
    # Planted: torch.as_tensor(num_items, dtype=None, ...) -> fails; without dtype= -> fails.
    x = torch.tensor([[1.0, 3.0]], dtype=torch.float64)
    got = reduce_token_loss(x, torch.ones(1, 2), "dapo", LossScale(num_items=10, num_processes=3))
    assert got.dtype == torch.float64
    assert got.item() == pytest.approx(1.2, rel=1e-14, abs=0)


def test_dapo_without_num_items_names_it():
    # the error names the missing argument exactly, LossScale.num_items.
    # Planted: the message "XXLossScale.num_items ...XX" -> fails; "lossscale.num_items ..." -> fails.
    with pytest.raises(ValueError, match=r"^LossScale\.num_items .* loss_type='dapo'$"):
        reduce_token_loss(torch.ones(1, 1), torch.ones(1, 1), "dapo")


@pytest.mark.parametrize(
    "bad, message",
    [
        ({"delta": float("nan")}, r"^delta must be finite"),
        ({"delta": "1.5"}, r"^delta must be a finite real number"),
        ({"delta": 1.0}, r"^delta must be > 1"),
        ({"clip_cov_ratio": 0.0}, r"^clip_cov_ratio must lie in \(0, 1\]"),
        ({"kl_cov_ratio": 0.0}, r"^kl_cov_ratio must lie in \(0, 1\]"),
        ({"kl_cov_ratio": 1.5}, r"^kl_cov_ratio must lie in \(0, 1\]"),
        ({"loss_type": "dr_grpo"}, r"^max_completion_length must be an int >= 1"),
        ({"loss_type": "dr_grpo", "max_completion_length": 0}, r"^max_completion_length must be an int >= 1"),
        ({"loss_type": "dr_grpo", "max_completion_length": 8, "token_weighting": "ah"}, r"^token_weighting needs"),
    ],
)
def test_bad_settings_messages_start_with_the_argument(bad, message):
    # the message begins with the argument's exact name; delta = 1 is refused (delta > 1).
    # Planted: check_finite_scalar(delta, None / "XXdeltaXX" / "DELTA") -> fails; "delta >= 1" -> fails;
    # check_ratio(clip_cov_ratio, "XXclip_cov_ratioXX") -> fails; check_ratio(kl_cov_ratio, None / no name /
    # "XXkl_cov_ratioXX" / "KL_COV_RATIO") -> fails; check_int(..., "XXmax_completion_lengthXX", 1) -> fails;
    # "XXtoken_weighting needs ...XX" -> fails.
    with pytest.raises(ValueError, match=message):
        LossSettings(**bad)


def test_boundary_settings_are_accepted():
    # the smallest valid values pass: max_completion_length = 1, delta just above 1; dr_grpo without token weighting.
    # Planted: check_int(max_completion_length, ..., 2) -> fails; token_weighting != "XXnoneXX" / "NONE" -> fails.
    assert LossSettings(loss_type="dr_grpo", max_completion_length=1).max_completion_length == 1
    assert LossSettings(loss_type="dr_grpo", max_completion_length=8, token_weighting="none").loss_type == "dr_grpo"
    assert LossSettings(delta=1.0 + 1e-9).delta == 1.0 + 1e-9


def test_dr_grpo_counts_the_rows_left_out_by_sparse_updates():
    # dr_grpo divides the token sum by B * max_completion_length with B the whole micro-batch's responses: rows a
    # sparse update left out (LossScale(rows=...)) stay in it, so the loss equals the full micro-batch's.
    # By hand: token sum 1 + 3 + 2 = 6 over 4 rows * 2 = 8 (not 2 rows * 2 = 4); with the two zero rows present the
    # full batch gives the same 6 / 8. Planted: `rows *` -> `per_token.shape[0] *` -> fails
    x, m = torch.tensor([[1.0, 3.0], [2.0, 0.0]]), torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    got = reduce_token_loss(x, m, "dr_grpo", LossScale(rows=4), max_completion_length=2)
    assert got.item() == pytest.approx(6 / 8)
    full_x, full_m = torch.cat([x, torch.zeros(2, 2)]), torch.cat([m, torch.ones(2, 2)])
    full = reduce_token_loss(full_x, full_m, "dr_grpo", max_completion_length=2)
    assert got.item() == pytest.approx(full.item())
