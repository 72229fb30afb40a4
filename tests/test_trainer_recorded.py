"""QAETrainer against the steps its predecessor recorded (tests/recorded_steps.py).

The trainer of commit e7fc51d computed these micro-batches inside TRL's ``_compute_loss`` (QAE
advantages and SA-AH weights folded into TRL's advantages, sparse rows rescaled afterwards). Today's
trainer hands the same tensors to :func:`qae_lab.loss.grpo_loss`: same loss, same parameter
gradients (per-parameter norms and eight random projections of the whole gradient) and the same
metrics, on the same model and inputs.
"""

from __future__ import annotations

import pytest
import torch
from recorded_steps import CASES, grad_fingerprint, load
from step_setup import make_trainer, tiny_model


RECORDED = load()
TOL = {"rtol": 1e-5, "atol": 1e-7}  # float32 forward: rounding only


@pytest.mark.parametrize("name", sorted(CASES))
def test_same_loss_gradients_and_metrics_as_recorded(tmp_path, tok, name):
    case = RECORDED["cases"][name]
    model = tiny_model(tok)
    model.load_state_dict(RECORDED["model_state"])
    settings = dict(case["settings"])
    beta = settings.pop("kl_beta", 0.0)
    trainer = make_trainer(tmp_path, tok, model, **settings)
    trainer.beta = beta
    inputs = {k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in case["inputs"].items()}
    seen = {k: v.clone() for k, v in inputs.items() if isinstance(v, torch.Tensor)}
    model.zero_grad(set_to_none=True)
    loss = trainer._compute_loss(model, inputs)
    loss.backward()
    torch.testing.assert_close(loss.detach(), case["loss"], **TOL)
    grads = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
    got, want = grad_fingerprint(grads), case["grad_fingerprint"]
    assert got["names"] == want["names"]
    torch.testing.assert_close(got["norms"], want["norms"], **TOL)
    torch.testing.assert_close(got["projections"], want["projections"], **TOL)
    metrics = {k: list(v) for k, v in trainer._metrics["train"].items() if v}
    recorded = {k: v for k, v in case["metrics"].items() if v}  # the old trainer left an emptied "entropy" list
    assert metrics.keys() == recorded.keys()
    for key, values in recorded.items():
        assert metrics[key] == pytest.approx(values, rel=1e-5, abs=1e-7), key
    # the loss reads its inputs and leaves them as they were
    for key, value in seen.items():
        assert torch.equal(inputs[key], value), key


def test_the_fingerprint_tells_gradients_apart(tmp_path, tok):
    # the recorded comparison could not pass with another loss: SA-AH's gradient differs from the plain one
    a, b = RECORDED["cases"]["bnpo"]["grad_fingerprint"], RECORDED["cases"]["clip_higher_sa_ah"]["grad_fingerprint"]
    assert (a["projections"] - b["projections"]).abs().max() > 1e-3
