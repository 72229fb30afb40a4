"""Recorded training steps: the loss, its gradients and its metrics, as ``QAETrainer`` computed them.

``tests/data/recorded_steps.pt`` was written by ``python tests/testkit/recorded_steps.py`` with the trainer of
commit e7fc51d, whose loss still ran inside TRL's ``_compute_loss`` (QAE advantages and SA-AH horizon weights
folded into TRL's advantages, a normaliser factor, sparse rows rescaled afterwards). The pure loss
(:mod:`qae_lab.loss`) and today's trainer must reproduce each case: same loss, same gradient with
respect to the log-probabilities (tests/test_loss.py, no model, no TRL) and the same parameter
gradients and metrics (tests/train/test_trainer_recorded.py).

Each case holds a tiny float64 Qwen2's micro-batch after generation and scoring (16 fixed ragged
completions, rewards with both QAE regimes), old log-probs moved off-policy by a fixed pattern so
that clipping happens, and what the loss's forward saw: the per-token log-probs and entropies, the
normalised entropies the horizon weights used, dL/dlogps, the loss, the parameter gradients and the
metrics the step logged. Re-recording with today's trainer would only compare it with itself: the file
stays as that trainer wrote it unless the maths changes on purpose (say so in the commit).
"""

from __future__ import annotations

import math
import sys
import tempfile
from pathlib import Path

import torch

PATH = Path(__file__).resolve().parents[1] / "data" / "recorded_steps.pt"
SHIFT = 0.3  # the old log-probs are the current ones plus SHIFT * sin(token index): ratios in ~[0.74, 1.35]

# name -> QAEConfig settings (on top of step_setup.make_trainer's)
CASES: dict[str, dict] = {
    "bnpo": {"loss_type": "bnpo", "sparse_update": False},
    "grpo_sa_ah": {"loss_type": "grpo", "token_weighting": "sa_ah", "alpha": 0.3, "sparse_update": False},
    "dapo_ah": {"loss_type": "dapo", "token_weighting": "ah", "alpha": 0.5},
    "bnpo_sa_ah_sparse": {"loss_type": "bnpo", "token_weighting": "sa_ah", "alpha": 0.4, "sparse_update": True},
    "grpo_sparse": {"loss_type": "grpo", "sparse_update": True},
    "dapo_sa_ah_sparse": {"loss_type": "dapo", "token_weighting": "sa_ah", "sparse_update": True},
    "mean_unscaled": {"loss_type": "bnpo", "baseline": "mean", "scale_rewards": "none", "sparse_update": False},
    "gspo": {"loss_type": "grpo", "importance_sampling_level": "sequence", "epsilon": 3e-4, "epsilon_high": 4e-4},
    "clip_higher_sa_ah": {"loss_type": "bnpo", "epsilon_high": 0.28, "token_weighting": "sa_ah"},
    "clip_cov": {
        "loss_type": "bnpo",
        "cov_penalty": "clip_cov",
        "clip_cov_ratio": 0.2,
        "clip_cov_lb": -1.0,
        "clip_cov_ub": 5.0,
    },
    "kl_cov_dapo": {"loss_type": "dapo", "cov_penalty": "kl_cov", "kl_cov_ratio": 0.1, "kl_cov_coef": 0.7},
    "beta_sa_ah": {"loss_type": "bnpo", "token_weighting": "sa_ah", "kl_beta": 0.04},  # KL to fixed reference log-probs
    "entropy_bonus_grpo": {"loss_type": "grpo", "token_weighting": "sa_ah", "entropy_coef": 0.01},
    "top_entropy": {"loss_type": "bnpo", "top_entropy_quantile": 0.5, "token_weighting": "sa_ah"},
    "top_k_grpo": {"loss_type": "grpo", "token_weighting": "sa_ah", "alpha": 0.7, "entropy_top_k": 5},
    "dr_grpo": {"loss_type": "dr_grpo", "sparse_update": False},
    "delta_neg_mask": {"loss_type": "bnpo", "delta": 1.1, "advantage_mask": "neg"},
}


def _record_case(name: str, settings: dict, tok, state: dict, out: str) -> dict:
    from testkit.step_setup import REWARDS, make_trainer, rows, tiny_model

    import qae_lab.train.trainer as trainer_module

    model = tiny_model(tok)
    model.load_state_dict(state)
    beta = settings.get("kl_beta", 0.0)
    trainer = make_trainer(Path(out) / name, tok, model, **{k: v for k, v in settings.items() if k != "kl_beta"})
    inputs = trainer._generate_and_score_completions(rows(REWARDS))
    trainer.beta = beta  # TRL builds a reference model only from a hub id; fixed reference log-probs serve
    with torch.no_grad():
        logps, _, _ = trainer._get_per_token_logps_and_entropies(
            model,
            torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], 1),
            torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], 1),
            inputs["completion_ids"].shape[1],
        )
    pattern = torch.sin(torch.arange(logps.numel(), dtype=logps.dtype)).view_as(logps)
    inputs["old_per_token_logps"] = logps + SHIFT * pattern
    if beta:
        inputs["ref_per_token_logps"] = logps - 0.2 * torch.cos(pattern)
    inputs = {k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in inputs.items()}
    saved_inputs = {k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in inputs.items()}

    seen: dict = {}
    forward = trainer._get_per_token_logps_and_entropies

    def spy(model_, input_ids, attention_mask, logits_to_keep, *args, **kwargs):
        logps_, entropies_, aux = forward(model_, input_ids, attention_mask, logits_to_keep, *args, **kwargs)
        if kwargs.get("compute_entropy"):
            logps_.retain_grad()
            seen.update(logps=logps_, entropies=entropies_.detach().clone(), rows=input_ids.shape[0])
        return logps_, entropies_, aux

    h_norms = []
    top_k_entropy = trainer_module.head_normalised_entropy

    def spy_top_k(*args, **kwargs):
        h = top_k_entropy(*args, **kwargs)
        h_norms.append(h.detach().clone())
        return h

    trainer._get_per_token_logps_and_entropies = spy
    trainer_module.head_normalised_entropy = spy_top_k
    for metrics in trainer._metrics.values():
        metrics.clear()
    try:
        model.zero_grad(set_to_none=True)
        loss = trainer._compute_loss(model, inputs)
        loss.backward()
    finally:
        trainer_module.head_normalised_entropy = top_k_entropy
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
    record = {
        "settings": settings,
        "inputs": saved_inputs,
        "loss": loss.detach().clone(),
        "grad_fingerprint": grad_fingerprint(grads),
        "metrics": {k: list(v) for k, v in trainer._metrics["train"].items()},
        "vocab_size": len(tok),
        "global_step": trainer.state.global_step,
        "seed": trainer.args.seed,
        "max_completion_length": trainer.max_completion_length,
    }
    if seen:
        grad = seen["logps"].grad
        record.update(
            logps=seen["logps"].detach().clone(),
            entropies=seen["entropies"],
            forward_rows=seen["rows"],
            dloss_dlogps=None if grad is None else grad.clone(),
        )
    if h_norms:
        record["h_norm"] = h_norms[-1]
    return record


def grad_fingerprint(grads: dict[str, torch.Tensor], n: int = 8) -> dict[str, torch.Tensor]:
    """Per-parameter gradient norms and the whole gradient projected on n fixed random directions.

    Two gradients with the same fingerprint (to rounding) are the same gradient: a difference would
    have to be orthogonal to every fixed Gaussian direction and keep every parameter's norm.
    """
    flat = torch.cat([grads[k].flatten() for k in sorted(grads)])
    directions = torch.randn(n, flat.numel(), generator=torch.Generator().manual_seed(0), dtype=flat.dtype)
    return {
        "names": sorted(grads),
        "norms": torch.stack([grads[k].norm() for k in sorted(grads)]),
        "projections": directions @ flat,
    }


# Tolerances for comparing today's float32 arithmetic with the recording machine's. The loss and its gradient
# pass through float32 (the advantages and old log-probs are float32), so each gradient element carries a
# rounding error of a few float32 ulps of its own size, and another CPU's kernels (other SIMD widths, other
# summation orders) round differently. A projection r . g over the whole gradient then differs by about
# r . dg ~ N(0, |dg|^2), i.e. by a few eps32 * |g|: its error is relative to the gradient's norm, not to the
# projection's own value (which can be small by cancellation: 0.013 for one direction of grpo_sparse, where
# a second machine's value differed by 2.6e-7, 3.5 eps32 * |g|). ROUNDING_ULPS = 32 leaves a margin of about
# 9 over the largest difference seen between two machines, and stays 40 times below a planted error of 1e-4
# relative to the gradient (tests/train/test_trainer_recorded.py checks that such an error still fails).
EPS32 = torch.finfo(torch.float32).eps
ROUNDING_ULPS = 32


def fingerprint_mismatch(got: dict, want: dict) -> list[str]:
    """Where two gradient fingerprints (:func:`grad_fingerprint`) differ beyond float32 rounding; empty when
    they agree. Per-parameter norms: relative to each norm; projections: relative to the whole gradient's norm."""
    if got["names"] != want["names"]:
        return [f"parameters differ: {got['names']} vs {want['names']}"]
    scale = float(want["norms"].double().norm())  # |g|, from the recorded per-parameter norms
    tol = ROUNDING_ULPS * EPS32
    bad = []
    norm_err = (got["norms"].double() - want["norms"].double()).abs()
    worst = int((norm_err / want["norms"].double().abs().clamp(min=1e-300)).argmax())
    if not bool((norm_err <= tol * want["norms"].double().abs()).all()):
        bad.append(
            f"norm of {want['names'][worst]}: {float(got['norms'][worst])!r} vs {float(want['norms'][worst])!r} "
            f"(relative tolerance {tol:.2e})"
        )
    proj_err = (got["projections"].double() - want["projections"].double()).abs()
    if not bool((proj_err <= tol * scale).all()):
        j = int(proj_err.argmax())
        bad.append(
            f"projection {j}: differs by {float(proj_err[j]):.3e} > {tol * scale:.3e} "
            f"({ROUNDING_ULPS} eps32 x |g| = {scale:.4f})"
        )
    return bad


def record(path: Path = PATH) -> dict:
    """Run every case through the trainer of this checkout and save what it computed."""
    from testkit.step_setup import tiny_model

    from qae_lab.task.models import load_policy

    torch.set_num_threads(1)
    tok = load_policy("embedded", device="cpu")[1]
    state = tiny_model(tok).state_dict()
    with tempfile.TemporaryDirectory() as out:
        cases = {name: _record_case(name, settings, tok, state, out) for name, settings in CASES.items()}
    data = {"model_state": state, "cases": cases}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    torch.save(data, tmp)
    tmp.replace(path)
    return data


def load(path: Path = PATH) -> dict:
    """The recorded cases (tensors only: ``torch.load`` with ``weights_only=True``)."""
    return torch.load(path, weights_only=True)


def log_vocab(record_: dict) -> float:
    return math.log(record_["vocab_size"])


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: testkit importable
    data = record()
    for name, case in data["cases"].items():
        print(
            f"{name:20s} loss {case['loss'].item():+.6f} rows {case.get('forward_rows')} "
            f"metrics {sorted(case['metrics'])}"
        )
