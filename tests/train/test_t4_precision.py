"""The T4 preset's precision combination through one QAETrainer step, on the CPU: a stand-in that no free Colab
should be the first to run.

``qwen2.5-0.5b-gsm8k-t4`` trains float16 weights with PEFT's LoRA adapters in float32, and needs the loss, the
entropies and SA-AH's horizon weights in float32. Here the preset's own settings are built
(:func:`qae_lab.runs.presets.build`) and the run's own trainer made (:func:`qae_lab.runs.pipeline.make_trainer`: the
model loaded in float16 by ``load_policy``, LoRA through TRL's ``peft_config``), with the embedded tiny Qwen2 in place
of the 0.5B model, and one step trained with generation, rewards with signal in both of QAE's regimes and SA-AH's
weights on.

What the CPU cannot cover (docs/gpu.md): ``fp16=True`` itself (mixed-precision autocast and the gradient scaler need a
GPU, so it is off here: the weights are float16 all the same), CUDA's float16 kernels (attention, the fused log-prob
kernel TRL uses where Triton is present), the compiled static-cache decoding, and memory.

Planted once each, every one of these made this test fail: PEFT's ``autocast_adapter_dtype=False`` (adapters left in
float16), ``normalise_entropy(entropies, vocab)`` without ``.float()`` in the trainer (the dense path's H~ in float16),
``head_normalised_entropy(...)`` without ``.float()`` (the top-k path's), and the advantages held in float16
(``.half()`` on the trainer's ``sign_masked_advantages(...)``; ``group_advantages`` itself upcasts float16 rewards).
"""

from __future__ import annotations

import pytest
import torch

import qae_lab.loss
import qae_lab.train.trainer
from qae_lab.runs.pipeline import make_trainer
from qae_lab.runs.presets import SMALL_GPU_PRESET, build

G = 4  # group size: one hard group (1 of 4 correct) and one easy group (3 of 4) under K = 0.4


def two_regime_reward(completions, **kwargs) -> list[float]:
    """SA-AH's composite scale (0 or 7.5): group 0 has 1 of 4 correct (hard), group 1 has 3 of 4 (easy)."""
    return [7.5 if i % G < (1 if (i // G) % 2 == 0 else 3) else 0.0 for i in range(len(completions))]


@pytest.mark.parametrize("top_k", [None, 16], ids=["exact-entropy", "top-k-entropy"])
def test_t4_precision_one_step(tmp_path, monkeypatch, top_k):
    run, cfg = build(
        SMALL_GPU_PRESET,
        [
            "model=embedded",  # the tiny Qwen2 architecture in place of Qwen2.5-0.5B (no download)
            "task=synthetic",
            "n_train=8",
            "n_eval=2",
            "fp16=false",  # mixed precision needs a GPU; the weights stay float16 (dtype=float16, the preset's)
            "use_cpu=true",
            "max_steps=1",
            f"num_generations={G}",
            f"per_device_train_batch_size={2 * G}",
            "gradient_accumulation_steps=1",
            "max_completion_length=12",
            "token_weighting=sa_ah",
            f"entropy_top_k={'null' if top_k is None else top_k}",
            "compile_generation=false",
            "save_strategy=no",
            "evaluate=false",
            "disable_tqdm=true",
            "report_to=none",
        ],
        output_dir=str(tmp_path / "run"),
    )
    assert (run.dtype, run.lora, cfg.bf16) == ("float16", True, False)  # the preset's combination, as built

    seen: dict[str, torch.Tensor] = {}
    weights = qae_lab.loss._horizon_weights  # the loss calls the unchecked core of selective_horizon_weights
    loss_fn = qae_lab.train.trainer.grpo_loss

    def spy_weights(*args, **kwargs):
        seen["horizon weights"] = w = weights(*args, **kwargs)
        return w

    def spy_loss(logps, advantages, mask, settings, scale, **kwargs):
        seen.update(logps=logps, advantages=advantages, entropy=kwargs["entropies"], h_norm=kwargs["h_norm"])
        out = loss_fn(logps, advantages, mask, settings, scale, **kwargs)
        seen["loss"] = out.loss
        return out

    monkeypatch.setattr(qae_lab.loss, "_horizon_weights", spy_weights)
    monkeypatch.setattr(qae_lab.train.trainer, "grpo_loss", spy_loss)
    trainer, _tok, _eval = make_trainer(run, cfg, preset=SMALL_GPU_PRESET)
    trainer.reward_funcs[0] = two_regime_reward  # rewards with signal in both regimes, whatever was generated

    params = dict(trainer.model.named_parameters())
    trained = {n: p for n, p in params.items() if p.requires_grad}
    frozen = {n: p for n, p in params.items() if not p.requires_grad}
    assert trained and all("lora_" in n for n in trained)
    assert {p.dtype for p in frozen.values()} == {torch.float16}  # the base weights really are float16
    assert {p.dtype for p in trained.values()} == {torch.float32}, "LoRA adapters left in float16"
    before = {n: p.detach().clone() for n, p in trained.items()}

    trainer.train()

    assert trainer.state.global_step == 1
    assert {p.dtype for p in trained.values()} == {torch.float32}
    assert any(not torch.equal(before[n], p.detach()) for n, p in trained.items()), "the step changed no adapter"
    assert set(seen) == {"logps", "advantages", "entropy", "h_norm", "horizon weights", "loss"}
    for name, x in seen.items():
        assert x.dtype == torch.float32, f"{name} is {x.dtype}, not float32"
        assert bool(torch.isfinite(x).all()), f"{name} holds inf or NaN: {x}"
    assert bool((seen["advantages"] != 0).any())  # a step with signal (the sparse update keeps these rows)
    w = seen["horizon weights"]
    assert bool(((w > 0) & (w <= 1)).all())  # exp(-alpha * sum H~) with H~ in [0, 1]
    assert bool(((seen["h_norm"] >= 0) & (seen["h_norm"] <= 1 + 1e-4)).all())  # H~ = H / log V, float32 rounding
    row = trainer.state.log_history[0]
    logged = [row["loss"], row["grad_norm"]] + [v for k, v in row.items() if k.startswith(("entropy", "saah/"))]
    assert len(logged) > 3 and torch.isfinite(torch.tensor(logged)).all()
    assert row["grad_norm"] > 0
