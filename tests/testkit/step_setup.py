"""The trainer tests' shared set-up: tiny float64 Qwen2s, fixed completions and rewards, gradient helpers.

Generation is replaced by fixed completions (TRL's ``_generate_single_turn`` seam) and the reward
function returns fixed rewards from a dataset column, so ``_generate_and_score_completions`` runs
end to end on known tokens and rewards. Used by tests/test_trainer*.py, tests/test_loss.py and
tests/testkit/recorded_steps.py.
"""

from __future__ import annotations

import math

import torch
import transformers
from datasets import Dataset
from testkit.reference import ref_advantages, ref_horizon_weights

from qae_lab.train.config import QAEConfig
from qae_lab.train.trainer import QAETrainer

G = 4  # group size of every hand-built batch
PROMPTS = ["What is 2 + 3?", "Add seven and five, then double it.", "Hi", "Ben has 4 apples and buys 9 more."]
# binary rewards with both regimes under K = 0.4, G = 4 (hard while #correct <= 2):
# hard 1/4 (only the success moves), easy 3/4 (only the failure moves), all-equal, hard 2/4
REWARDS = [1.0, 0, 0, 0, 1, 1, 0, 1, 0, 0, 0, 0, 0, 1, 1, 0]
GRAD_TOL = {"rtol": 1e-6, "atol": 1e-6}


def fixed_reward(completions, reward, **kwargs) -> list[float]:
    """Reward function that returns the ``reward`` column of the batch, whatever was generated."""
    return [float(r) for r in reward]


def tiny_config(tok, config_cls=transformers.Qwen2Config, **settings):
    """The tiny models' shape on the embedded tokenizer's vocabulary (2 layers, hidden 32), ``settings`` on top."""
    shape = {
        "vocab_size": len(tok),
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 128,
        "pad_token_id": tok.pad_token_id,
        "eos_token_id": tok.eos_token_id,
    }
    return config_cls(**{**shape, **settings})


def tiny_model(tok, seed: int = 0) -> transformers.Qwen2ForCausalLM:
    """A tiny random Qwen2 in float64 on the embedded tokenizer's vocabulary (high entropy: weights far from 1)."""
    cfg = tiny_config(tok, tie_word_embeddings=True)
    torch.manual_seed(seed)
    return transformers.Qwen2ForCausalLM(cfg).double().train()


def completion_ids(n: int, vocab: int, seed: int = 0) -> list[list[int]]:
    """n ragged completions (3..9 tokens) of ordinary token ids (no pad / eos)."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(3, 10, (n,), generator=g).tolist()
    return [torch.randint(10, vocab, (length,), generator=g).tolist() for length in lengths]


def rows(rewards, prompts=PROMPTS) -> list[dict]:
    """The local generation batch TRL's sampler hands over: each prompt repeated G times, with its rewards."""
    return [{"prompt": prompts[i // G], "reward": r} for i, r in enumerate(rewards)]


def make_trainer(
    tmp_path,
    tok,
    model=None,
    *,
    n: int = len(REWARDS),
    trainer_cls=QAETrainer,
    config_cls=QAEConfig,
    completions=None,
    reward_funcs=fixed_reward,
    **kwargs,
):
    """A trainer on fixed completions: one micro-batch of n responses per generation, no KL, on the CPU."""
    model = tiny_model(tok) if model is None else model
    settings = {
        "output_dir": str(tmp_path),
        "use_cpu": True,
        "bf16": False,
        "beta": 0.0,
        "report_to": [],
        "per_device_train_batch_size": n,
        "num_generations": G,
        "steps_per_generation": 1,
        "gradient_accumulation_steps": 1,
        "num_iterations": 1,
        "logging_steps": 1,
        "save_strategy": "no",
    }
    args = config_cls(**{**settings, **kwargs})
    trainer = trainer_cls(
        model=model,
        reward_funcs=reward_funcs,
        args=args,
        processing_class=tok,
        train_dataset=Dataset.from_list(rows(REWARDS[:n])),
    )
    trainer.current_gradient_accumulation_steps = 1  # set by the training loop; _compute_loss reads it
    fixed = completion_ids(n, len(tok)) if completions is None else completions

    def generate_single_turn(prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        assert len(prompt_ids) == len(fixed)
        return [list(c) for c in fixed], None  # (completion ids, sampling logprobs)

    trainer._generate_single_turn = generate_single_turn
    return trainer


def trainer_grads(trainer, inputs) -> dict[str, torch.Tensor]:
    """Gradients of one QAETrainer / GRPOTrainer loss on a micro-batch."""
    model = trainer.model
    model.zero_grad(set_to_none=True)
    trainer._compute_loss(model, inputs).backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    return grads


def reference_loss(
    model, inputs, adv, *, loss_type: str, weighting: str = "none", alpha: float = 0.5, top_k: int | None = None
):
    r"""The policy-gradient loss of one micro-batch, from the equations (QAE arXiv 2509.22611 sec. 2-4, SA-AH-GRPO arXiv 2606.05434; docs/equations.md).

    At the first step the PPO ratio is exp(logp - logp.detach()) = 1, so the clipped objective is
    -A_i * ratio_t per token; SA-AH/AH weight token t by w_t = exp(-alpha * sum_{s<=t} H~_s)
    (H~ the exact entropy of softmax(logits) / log V, detached), on rows with A_i < 0 only for
    SA-AH; the loss is normalised by sum(w): over the micro-batch (bnpo, dapo with one
    micro-batch) or per sequence and then averaged over rows (grpo). With ``top_k`` H~ is the
    entropy of the renormalised k largest probabilities, still divided by log V.
    """
    ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)  # (N, P+T)
    attention = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)  # (N, P+T)
    t = inputs["completion_ids"].shape[1]
    logits = model(input_ids=ids, attention_mask=attention).logits  # (N, P+T, V)
    z = logits[:, -t - 1 : -1]  # (N, T, V): the logits at position p predict token p+1
    log_p = torch.log_softmax(z, dim=-1)  # (N, T, V)
    logp = log_p.gather(-1, inputs["completion_ids"].unsqueeze(-1)).squeeze(-1)  # (N, T)
    m = inputs["completion_mask"].to(logp.dtype)  # (N, T)
    a = torch.as_tensor(adv, dtype=logp.dtype)  # (N,)
    if weighting == "none":
        w = m
    else:
        # H~_t = H(softmax(z_t)) / log V, no gradient
        log_q = log_p if top_k is None else torch.log_softmax(z.topk(top_k, dim=-1).values, dim=-1)
        h_norm = (-(log_q.exp() * log_q).sum(-1) / math.log(z.shape[-1])).detach()  # (N, T)
        w = torch.tensor(ref_horizon_weights(h_norm.tolist(), m.long().tolist(), alpha), dtype=logp.dtype)
        if weighting == "sa_ah":  # A_i >= 0: weight 1 on every real token
            w = torch.where(a[:, None] < 0, w, m)
    ratio = torch.exp(logp - logp.detach())  # (N, T), = 1 in value
    per_token = -a[:, None] * ratio * w  # (N, T)
    if loss_type == "grpo":
        return (per_token.sum(-1) / w.sum(-1)).mean()
    return per_token.sum() / w.sum()


def reference_grads(model, inputs, adv, **kwargs) -> dict[str, torch.Tensor]:
    """Parameter gradients of :func:`reference_loss`."""
    model.zero_grad(set_to_none=True)
    reference_loss(model, inputs, adv, **kwargs).backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    return grads


def assert_same_grads(got: dict, want: dict, **tol):
    assert got.keys() == want.keys() and got
    for name, value in want.items():
        torch.testing.assert_close(got[name], value, **(tol or GRAD_TOL), msg=lambda s, name=name: f"{name}: {s}")


def any_nonzero(grads: dict) -> bool:
    return any(bool(g.abs().max() > 0) for g in grads.values())


def qae_advantages(rewards, baseline="quantile", k=0.4, method="paper", scale="group", eps=1e-4) -> list[float]:
    """The independent loop reference of tests/testkit/reference.py."""
    return ref_advantages([float(r) for r in rewards], G, baseline, k, method, scale, eps)
