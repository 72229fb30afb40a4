"""Tests for qae_lab.train.generation and QAETrainer's fast generation path (``fast_generation=True``).

The fast path must sample from the same policy as TRL's default path, only faster: same
greedy completions, same per-token log-probs (also equal to the loss forward's), token
frequencies that follow the policy's softmax, and base weights that come back bit-identical,
in bf16 too. The policy is the embedded model with a LoRA adapter whose B matrices are made
non-zero (a fresh adapter is the identity, so a merge would change nothing).
"""

from __future__ import annotations

import pytest
import torch
from lora_setup import lora_args, lora_policy, lora_trainer

from qae_lab.task.data import synthetic_task, to_grpo_dataset
from qae_lab.train.generation import generation_policy, lora_base_params
from qae_lab.task.models import load_policy
from qae_lab.train.config import QAEConfig
from qae_lab.train.trainer import QAETrainer


def trainer_for(model, tok, tmp_path, **kwargs) -> QAETrainer:
    """lora_setup's trainer (correctness reward, 8 problems), its settings changed by ``kwargs``."""
    return lora_trainer(model, tok, lora_args(tmp_path, **kwargs))


def prompt_ids(tok, n: int = 4) -> list[list[int]]:
    rows = to_grpo_dataset(synthetic_task(n, seed=3))
    return [
        tok.apply_chat_template(r["prompt"], add_generation_prompt=True, tokenize=True, return_dict=False) for r in rows
    ]


def snapshot(model) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in model.named_parameters()}


# ---------------------------------------------------------------- the context manager


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_base_weights_come_back_bit_identical(dtype):
    model, _ = lora_policy(dtype=dtype)
    before = snapshot(model)
    base = lora_base_params(model)
    base_before = [p.detach().clone() for p in base]
    with generation_policy(model) as m:
        assert not m.training
        # the merge really happened inside (B != 0), so the restore has something to undo
        assert any(not torch.equal(p, q) for p, q in zip(base, base_before))
        # and PEFT's wrappers are out of the module tree: the forward is the bare model's
        assert not any("lora_" in n for n, _ in m.named_parameters())
    assert model.training
    after = snapshot(model)
    assert after.keys() == before.keys()
    assert all(torch.equal(after[n], before[n]) for n in before)


def test_unmerge_alone_is_not_exact_in_bf16():
    # why generation_policy restores a snapshot: PEFT's merge + unmerge leaves bf16 rounding in the weights
    model, _ = lora_policy(dtype=torch.bfloat16)
    before = snapshot(model)
    model.merge_adapter()
    model.unmerge_adapter()
    assert any(not torch.equal(p.detach(), before[n]) for n, p in model.named_parameters() if "base_layer" in n)


def test_restores_even_when_generation_fails():
    model, _ = lora_policy()
    before = snapshot(model)
    with pytest.raises(RuntimeError, match="boom"), generation_policy(model):
        raise RuntimeError("boom")
    assert model.training and all(torch.equal(p.detach(), before[n]) for n, p in model.named_parameters())


def test_lora_base_params_are_the_adapted_layers():
    model, _ = lora_policy()
    params = lora_base_params(model)
    # 4 layers x 7 projections; q/k/v carry a bias each in Qwen2
    assert len(params) == 4 * 7 + 4 * 3
    assert {id(p) for p in params} <= {id(p) for n, p in model.named_parameters() if "base_layer" in n}


def test_merged_policy_has_the_unmerged_logits():
    model, tok = lora_policy(dropout=0.3)
    ids = torch.tensor(prompt_ids(tok, 1))
    with torch.no_grad():
        want = model.eval()(input_ids=ids).logits
        model.train()
        with generation_policy(model) as m:
            got = m(input_ids=ids).logits
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------- the trainer's in-loop path


def sampled_logps(trainer, prompts, fast: bool) -> tuple[list[list[int]], list[list[float]]]:
    """Completions of the trainer's own generation seam, and the per-token log-probs the sampler saw."""
    trainer.args.fast_generation = fast
    seen = []
    model = trainer.accelerator.unwrap_model(trainer.model)
    original = model.generate

    def generate(*args, **kwargs):  # the same call, with the sampler's logits returned as well
        out = original(*args, **kwargs, output_logits=True, return_dict_in_generate=True)
        seen.append(torch.stack(out.logits, 1).log_softmax(-1))  # (N, T, V)
        return out.sequences

    model.generate = generate
    try:
        completions, _ = trainer._generate_single_turn(prompts, None, {}, 1)
    finally:
        del model.generate
    logp = seen[0]
    return completions, [[float(logp[i, t, tok]) for t, tok in enumerate(c)] for i, c in enumerate(completions)]


def test_fast_path_same_greedy_completions_and_logps(tmp_path):
    model, tok = lora_policy(dropout=0.0)
    trainer = trainer_for(model, tok, tmp_path, generation_kwargs={"do_sample": False})
    prompts = prompt_ids(tok, 4)
    default_c, default_lp = sampled_logps(trainer, prompts, fast=False)
    fast_c, fast_lp = sampled_logps(trainer, prompts, fast=True)
    assert fast_c == default_c and any(len(c) > 3 for c in fast_c)
    for a, b in zip(fast_lp, default_lp):
        torch.testing.assert_close(torch.tensor(a), torch.tensor(b), rtol=0, atol=1e-5)
    # and what the sampler saw is what the loss's forward scores (TRL's per-token log-probs)
    width = max(len(c) for c in fast_c)
    p_ids = torch.tensor([[tok.pad_token_id] * (max(map(len, prompts)) - len(p)) + p for p in prompts])
    c_ids = torch.tensor([c + [tok.pad_token_id] * (width - len(c)) for c in fast_c])
    ids = torch.cat([p_ids, c_ids], 1)
    mask = torch.cat([p_ids != tok.pad_token_id, torch.ones_like(c_ids, dtype=torch.bool)], 1).long()
    model.train()
    with torch.no_grad():
        loss_lp, _, _ = trainer._get_per_token_logps_and_entropies(model, ids, mask, width)
    for i, lp in enumerate(fast_lp):
        torch.testing.assert_close(loss_lp[i, : len(lp)], torch.tensor(lp), rtol=0, atol=1e-5)
    assert model.training


def test_fast_path_samples_follow_the_policy(tmp_path):
    # one prompt, n first tokens sampled at T = 2 through the trainer's seam, against softmax(logits / T)
    model, tok = lora_policy(dropout=0.0, seed=1)
    trainer = trainer_for(model, tok, tmp_path, max_completion_length=1, temperature=2.0)
    trainer.args.fast_generation = True
    prompt = [tok.convert_tokens_to_ids(["3", "+"])]  # "3+": the next token is a spread-out digit
    n = 4000
    torch.manual_seed(0)
    completions, _ = trainer._generate_single_turn(prompt * n, None, {}, 1)
    counts = torch.bincount(torch.tensor([c[0] for c in completions]), minlength=len(tok)).double()
    with torch.no_grad():
        p = model.eval()(input_ids=torch.tensor(prompt)).logits[0, -1].double().div(2.0).softmax(-1)
    model.train()
    expected = p * n
    assert float((counts / n - p).abs().sum() / 2) < 0.05  # total variation
    big = expected > 20
    assert int(big.sum()) >= 5  # the premise: a spread-out distribution, not one dominant token
    z = (counts[big] - expected[big]) / expected[big].sqrt()
    assert float(z.abs().max()) < 5.0


def test_fast_generation_trains_adapter_only_and_restores_base(tmp_path):
    model, tok = lora_policy(dropout=0.05)
    before = snapshot(model)
    trainer = trainer_for(model, tok, tmp_path, fast_generation=True, max_completion_length=24)
    trainer.train()
    params = dict(trainer.model.named_parameters())
    assert all(torch.equal(params[n].detach(), before[n]) for n in params if "lora_" not in n)
    assert any(not torch.equal(params[n].detach(), before[n]) for n in params if "lora_B" in n)
    assert trainer.model.training


def test_compile_generation_lifts_trls_disable_compile(tmp_path):
    model, tok = lora_policy()
    assert trainer_for(model, tok, tmp_path).generation_config.disable_compile is True  # TRL's default
    trainer = trainer_for(model, tok, tmp_path, compile_generation=True, cache_implementation="static")
    assert trainer.generation_config.disable_compile is False
    assert trainer.generation_config.cache_implementation == "static"


def test_fast_generation_steps_aside_for_vllm(tmp_path):
    # vLLM samples instead (tests/train/test_vllm.py): the fast path is set off, with a warning naming it
    with pytest.warns(UserWarning, match=r"step aside: fast_generation=True -> False$"):
        cfg = QAEConfig(output_dir=str(tmp_path), use_cpu=True, report_to=[], fast_generation=True, use_vllm=True)
    assert (cfg.fast_generation, cfg.to_dict()["fast_generation"]) == (False, False)


def test_a_caller_merged_adapter_is_left_merged():
    # the caller merged on purpose: only eval mode applies, and their merge (weights and PEFT's flag) survives
    model, _ = lora_policy()
    model.merge_adapter()
    before = snapshot(model)
    with generation_policy(model) as m:
        assert not m.training
    assert all(torch.equal(p.detach(), before[n]) for n, p in model.named_parameters())
    assert all(layer.merged for layer in model.modules() if hasattr(layer, "merged_adapters"))


def test_trls_deprecated_checkpointing_read_warns_nobody():
    # TRL reads model.is_gradient_checkpointing at every generation; transformers 5 deprecated that alias
    import warnings

    from qae_lab.train.generation import trl_deprecation_hidden

    model, _ = load_policy("embedded", device="cpu")
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        model.is_gradient_checkpointing  # noqa: B018  (this transformers' own: deprecated since 5.x, or no warning)
        deprecated = len(seen)
        filters = list(warnings.filters)
        with trl_deprecation_hidden():  # what QAETrainer's __init__ and generation run in
            model.is_gradient_checkpointing  # noqa: B018
            warnings.warn("another FutureWarning", FutureWarning)
        assert warnings.filters == filters  # the process's filters as they were
        model.is_gradient_checkpointing  # noqa: B018  (outside the block: shown)
    messages = [str(w.message) for w in seen]
    assert deprecated <= 1 and messages[deprecated] == "another FutureWarning"  # only that one hidden, only inside
    assert len(messages) == 2 * deprecated + 1, messages  # the alias's warning before and after the block, not in it
    assert all(
        "`is_gradient_checkpointing` is deprecated" in m for m in messages[:deprecated] + messages[deprecated + 1 :]
    )
