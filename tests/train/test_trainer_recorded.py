"""QAETrainer against the steps its predecessor recorded (tests/testkit/recorded_steps.py).

The trainer of commit e7fc51d computed these micro-batches inside TRL's ``_compute_loss`` (QAE
advantages and SA-AH weights folded into TRL's advantages, sparse rows rescaled afterwards). Today's
trainer hands the same tensors to :func:`qae_lab.loss.grpo_loss`: same loss, same parameter
gradients (per-parameter norms and eight random projections of the whole gradient) and the same
metrics, on the same model and inputs.
"""

from __future__ import annotations

import pytest
import torch
from testkit.recorded_steps import CASES, EPS32, ROUNDING_ULPS, fingerprint_mismatch, grad_fingerprint, load
from testkit.step_setup import make_trainer, tiny_model

from qae_lab.metric_names import ENTROPY_REGIME_METRICS


RECORDED = load()
# float32 rounding, measured against each quantity's own scale (tests/testkit/recorded_steps.py says why so much)
REL = ROUNDING_ULPS * EPS32


def trainer_mask(inputs: dict) -> torch.Tensor:
    """The loss's token mask: completion tokens, minus tool output where there is some."""
    mask = inputs["completion_mask"]
    return mask * inputs["tool_mask"] if "tool_mask" in inputs else mask


def _trainer_step(tmp_path, tok, name):
    """The recorded case's micro-batch through today's trainer: (case, loss, gradient fingerprint, metrics, inputs
    as the loss left them, the inputs as given, whether the sparse update was in force)."""
    case = RECORDED["cases"][name]
    model = tiny_model(tok)
    model.load_state_dict(RECORDED["model_state"])
    settings = dict(case["settings"])
    beta = settings.pop("kl_beta", 0.0)
    trainer = make_trainer(tmp_path, tok, model, **settings)
    trainer.beta = beta
    sparse = trainer._sparse_active(trainer.loss_settings())  # rows with A = 0 left out, or not
    inputs = {k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in case["inputs"].items()}
    seen = {k: v.clone() for k, v in inputs.items() if isinstance(v, torch.Tensor)}
    model.zero_grad(set_to_none=True)
    loss = trainer._compute_loss(model, inputs)
    loss.backward()
    grads = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
    metrics = {k: list(v) for k, v in trainer._metrics["train"].items() if v}
    return case, loss.detach(), grad_fingerprint(grads), metrics, inputs, seen, sparse


def as_trl_counts_them(recorded: dict, given: dict, settings: dict) -> dict:
    """The recorded ``clip_ratio/*`` of a step whose sparse update left rows out, as today's trainer logs them: as TRL
    does, over every row (the rows left out, A = 0, clip nothing and count); the old trainer counted the kept rows
    only (tokens, or responses with GSPO's sequence ratio). A change of definition on purpose (commit message)."""
    kept = given["advantages"] != 0  # (N,)
    mask = trainer_mask(given).double()  # (N, T)
    if settings.get("importance_sampling_level") == "sequence":
        share, left_counted = float(kept.sum()) / kept.numel(), bool((~kept).any())
    else:
        share, left_counted = float(mask[kept].sum() / mask.sum()), float(mask[~kept].sum()) > 0
    out = dict(recorded)
    for side in ("low_mean", "high_mean", "region_mean"):
        out[f"clip_ratio/{side}"] = [v * share for v in recorded[f"clip_ratio/{side}"]]
    if left_counted:  # a row left out clips 0 of its tokens: the least row share is 0
        out["clip_ratio/low_min"] = [min(v, 0.0) for v in recorded["clip_ratio/low_min"]]
    return out


@pytest.mark.parametrize("name", sorted(CASES))
def test_same_loss_gradients_and_metrics_as_recorded(tmp_path, tok, name):
    case, loss, got, metrics, inputs, seen, sparse = _trainer_step(tmp_path, tok, name)
    # the loss is a mean of per-token terms ratio * A (ratios within [0.74, 1.35]): its rounding scales with max |A|
    loss_scale = max(1.0, float(case["inputs"]["advantages"].abs().max()))
    torch.testing.assert_close(loss, case["loss"], rtol=REL, atol=REL * loss_scale)
    assert fingerprint_mismatch(got, case["grad_fingerprint"]) == []
    recorded = {k: v for k, v in case["metrics"].items() if v}  # the old trainer left an emptied "entropy" list
    if sparse and bool((case["inputs"]["advantages"] == 0).any()):
        recorded = as_trl_counts_them(recorded, case["inputs"], case["settings"])
    # the entropy's split by regime came later: not recorded, checked to recombine to the recorded entropy
    split = {k: metrics.pop(k) for k in ENTROPY_REGIME_METRICS if k in metrics}
    entropy_key = "entropy/updated_rows" if "entropy/updated_rows" in recorded else "entropy"
    # the old trainer logged TRL's `entropy` or, with rows left out, the updated rows' instead; today both are logged
    # in every step (tests/train/test_trainer_sparse.py checks the other one): the recorded one is compared here
    metrics.pop("entropy" if entropy_key == "entropy/updated_rows" else "entropy/updated_rows", None)
    split = {k: v for k, v in split.items() if k.rsplit("/", 1)[0] == entropy_key}
    assert metrics.keys() == recorded.keys()
    given = case["inputs"]
    rows = given["advantages"] != 0 if entropy_key == "entropy/updated_rows" else torch.ones_like(given["prompt_hard"])
    mask = trainer_mask(given).double()  # (N, T)
    counts = {r: float(mask[rows & (given["prompt_hard"] == (r == "hard"))].sum()) for r in ("hard", "easy")}
    assert set(split) == {f"{entropy_key}/{r}" for r in counts if counts[r] > 0}
    # the token-count-weighted mean of the two regimes is the recorded entropy, to its float32 rounding
    whole = sum(counts[r] * split[f"{entropy_key}/{r}"][0] for r in counts if counts[r] > 0) / sum(counts.values())
    assert [whole] == pytest.approx(recorded[entropy_key], rel=REL)
    # each metric is a float32 mean of O(1) terms (fractions, weights, entropies of at most log V ~ 6 nats, ledger
    # shares): its rounding is relative to the largest metric of the step, not to a value near 0 by cancellation
    metric_scale = max(1.0, max(abs(v) for values in recorded.values() for v in values if v is not None))
    for key, values in recorded.items():
        assert metrics[key] == pytest.approx(values, rel=REL, abs=REL * metric_scale), key
    # the loss reads its inputs and leaves them as they were
    for key, value in seen.items():
        assert torch.equal(inputs[key], value), key


def test_the_derived_tolerance_still_catches_a_planted_error_of_1e4(tmp_path, tok):
    # the case that differed on a second machine passes at the derived tolerance, and a gradient off by 1e-4
    # relative (scaled, moved in a random direction, or one parameter scaled) fails it
    case, _, got, _, _, _, _ = _trainer_step(tmp_path, tok, "grpo_sparse")
    want = case["grad_fingerprint"]
    assert fingerprint_mismatch(got, want) == []
    norm = float(want["norms"].double().norm())
    directions = torch.randn(8, 1, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    scaled = {**got, "norms": got["norms"] * (1 + 1e-4), "projections": got["projections"] * (1 + 1e-4)}
    moved = {**got, "projections": got["projections"] + 1e-4 * norm * directions.squeeze(1)}
    largest = int(want["norms"].argmax())
    one = {**got, "norms": got["norms"].clone()}
    one["norms"][largest] *= 1 + 1e-4
    for planted in (scaled, moved, one):
        assert fingerprint_mismatch(planted, want) != []


def test_the_fingerprint_tells_gradients_apart(tmp_path, tok):
    # the recorded comparison could not pass with another loss: SA-AH's gradient differs from the plain one
    a, b = RECORDED["cases"]["bnpo"]["grad_fingerprint"], RECORDED["cases"]["clip_higher_sa_ah"]["grad_fingerprint"]
    assert (a["projections"] - b["projections"]).abs().max() > 1e-3
