"""qae_lab.runs.costs (a LoRA GRPO step's and a run's time on a GPU, estimated from the architecture): FLOP counts by
hand and against torch's own FLOP counter on real Qwen2 modules (prefill, a decode step, a checkpointed LoRA
forward and backward), the times by hand, the argument checks, and the T4 sentence notebook 04 and
docs/workshop.md state."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace as NS

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from qae_lab.runs.costs import (
    GPU,
    GPUS,
    decode_flops,
    decoder_weights,
    generation_time,
    gpu_named,
    lora_grpo_step_time,
    prefill_flops,
    run_time,
    training_flops,
    training_time,
)
from qae_lab.runs.costs import QWEN25, Arch, lora_param_count, param_count

ROOT = Path(__file__).resolve().parents[2]
# h 8, 2 layers, 2 query heads of 4, 1 key/value head, MLP 16, vocabulary 32
SMALL = Arch(8, 2, 2, 1, 16, 32, tied=True)
# a card on which a second is one FLOP (arithmetic-bound) or one byte (bandwidth-bound): times are the counts
FLOP_CARD = GPU("flops", 1e-12, 1e30)
BYTE_CARD = GPU("bytes", 1e30, 1e-9)


# ---------------------------------------------------------------- FLOPs by hand


def test_flops_by_hand():
    w = 2 * (2 * 8 * 8 + 2 * 8 * 4 + 3 * 8 * 16)  # per layer q, o 8x8; k, v 8x4; gate, up, down 8x16
    assert decoder_weights(SMALL) == w == 1152
    head = 32 * 8
    # prefill of 3 prompts of 5 tokens: every token through the layers, the LM head at the last position only;
    # causal attention: position i attends to i positions, 4 h FLOPs each per layer
    assert prefill_flops(SMALL, batch=3, prompt_len=5) == {
        "matmul": 2 * w * 3 * 5 + 2 * head * 3,
        "attention": 3 * 2 * sum(4 * 8 * i for i in range(1, 6)),
    }
    assert decode_flops(SMALL, batch=3, context=7) == {"matmul": 2 * (w + head) * 3, "attention": 3 * 2 * 4 * 8 * 7}
    r = lora_param_count(SMALL, 2)
    assert decode_flops(SMALL, batch=1, context=1, lora_r=2)["matmul"] == 2 * (w + r + head)
    # update: 2 sequences of 3 + 4 tokens; forward, recomputed forward, backward (input gradients of the frozen
    # base) = 3 passes of 2 W; LoRA 4 x 2 R (its weight gradients too); the LM head forward and backward on the 4
    # completion positions; attention: forward, recomputed, backward (two forwards' worth)
    fl = training_flops(SMALL, sequences=2, prompt_len=3, completion_len=4, lora_r=2)
    assert fl["matmul"] == 3 * 2 * w * 14 + 4 * 2 * r * 14 + 4 * head * 8
    assert fl["attention"] == 4 * 2 * 2 * sum(4 * 8 * i for i in range(1, 8))  # passes, sequences, layers
    plain = training_flops(SMALL, sequences=2, prompt_len=3, completion_len=4, lora_r=2, checkpointing=False)
    assert plain["matmul"] == 2 * 2 * w * 14 + 3 * 2 * r * 14 + 4 * head * 8
    assert plain["attention"] == fl["attention"] * 3 // 4


# ---------------------------------------------------------------- FLOPs against torch's counter


def _qwen2(arch: Arch):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    config = Qwen2Config(
        hidden_size=arch.hidden,
        num_hidden_layers=arch.layers,
        num_attention_heads=arch.heads,
        num_key_value_heads=arch.kv_heads,
        intermediate_size=arch.intermediate,
        vocab_size=arch.vocab,
        tie_word_embeddings=arch.tied,
        attn_implementation="eager",
    )
    model = Qwen2ForCausalLM(config)
    assert param_count(arch) == sum(p.numel() for p in model.parameters())
    return model


def _counted(run) -> dict[str, int]:
    """matmul FLOPs (the linear layers: mm / addmm) and attention FLOPs (eager attention's bmm, the rotary
    embedding's bmm taken out), as torch.utils.flop_counter counts them."""
    with FlopCounterMode(display=False) as counter:
        run()
    counts = counter.get_flop_counts()
    total = counts["Global"]
    rotary = sum(v for k, ops in counts.items() if k.endswith("rotary_emb") for v in ops.values())
    mm = sum(v for op, v in total.items() if str(op).split(".")[1] in ("mm", "addmm"))
    bmm = sum(v for op, v in total.items() if str(op).split(".")[1] == "bmm")
    assert mm + bmm == sum(total.values()), total  # nothing else was counted
    return {"matmul": mm, "attention": bmm - rotary}


def _full_to_causal(full: int, s: int) -> int:
    # eager attention multiplies the whole S x S score matrix (the mask applied after): 4 h L S^2 per pass and
    # sequence; causal attention needs the positions at or before each query, S (S + 1) / 2 of the S^2
    assert full * (s + 1) % (2 * s) == 0
    return full * (s + 1) // (2 * s)


@pytest.mark.slow(seconds=3)
def test_prefill_and_decode_flops_match_torchs_counter():
    model = _qwen2(SMALL).eval()
    ids = torch.randint(0, 32, (3, 5))
    with torch.no_grad():
        counted = _counted(lambda: model(input_ids=ids, logits_to_keep=1))
        ours = prefill_flops(SMALL, batch=3, prompt_len=5)
        assert counted["matmul"] == ours["matmul"]
        assert _full_to_causal(counted["attention"], 5) == ours["attention"]
        past = model(input_ids=ids, use_cache=True).past_key_values
        step = _counted(lambda: model(input_ids=ids[:, :1], past_key_values=past, use_cache=True))
    assert step == decode_flops(SMALL, batch=3, context=6)  # 5 cached positions and its own


@pytest.mark.slow(seconds=6)
@pytest.mark.parametrize("checkpointing", [True, False])
def test_lora_update_flops_match_torchs_counter(checkpointing):
    from peft import get_peft_model

    from qae_lab.task.models import lora_config

    model = _qwen2(SMALL)
    if checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.enable_input_require_grads()  # as PEFT and TRL do under checkpointing: layer 0 gets input gradients
    model = get_peft_model(model, lora_config(2, dropout=0.0)).train()
    ids, prompt_len, completion_len = torch.randint(0, 32, (2, 7)), 3, 4

    def update():
        # TRL's loss forward: the layers over every position, the LM head on the completion positions only
        hidden = model.base_model.model.model(input_ids=ids).last_hidden_state
        logits = model.base_model.model.lm_head(hidden[:, prompt_len - 1 : -1].contiguous())
        logits.log_softmax(-1).gather(-1, ids[:, prompt_len:, None]).sum().backward()

    counted = _counted(update)
    ours = training_flops(
        SMALL, sequences=2, prompt_len=prompt_len, completion_len=completion_len, lora_r=2, checkpointing=checkpointing
    )
    # non-reentrant checkpointing stops recomputing a layer once what the backward pass needs is back: the last
    # op, down_proj's LoRA B (8 x 2 weights), is not recomputed; the estimate counts it (2 x 16 FLOPs per token
    # and layer: 14 tokens, 2 layers)
    early_stop = 2 * 16 * 14 * 2 if checkpointing else 0
    assert counted["matmul"] == ours["matmul"] - early_stop
    assert _full_to_causal(counted["attention"], 7) == ours["attention"]


# ---------------------------------------------------------------- times by hand


def test_generation_time_by_hand():
    # arithmetic-bound card: the prefill and the decode steps' FLOPs, each step at least the host's time
    pre = sum(prefill_flops(SMALL, batch=2, prompt_len=4).values())
    steps = [sum(decode_flops(SMALL, batch=2, context=c).values()) for c in (5, 6)]
    assert generation_time(SMALL, FLOP_CARD, batch=2, prompt_len=4, new_tokens=3, dtype_bytes=2) == pytest.approx(
        pre + sum(steps)
    )
    assert generation_time(
        SMALL, FLOP_CARD, batch=2, prompt_len=4, new_tokens=3, dtype_bytes=2, host_s=steps[1] + 0.5
    ) == pytest.approx(pre + 2 * (steps[1] + 0.5))
    # half the peak: every card term doubles
    assert generation_time(
        SMALL, FLOP_CARD, batch=2, prompt_len=4, new_tokens=3, dtype_bytes=2, sustained=0.5
    ) == pytest.approx(2 * (pre + sum(steps)))
    # bandwidth-bound card: the weights (b = 2 bytes), once for the prefill and once per step with the KV cache
    # read (B c L 2 kv b); unmerged LoRA adds its float32 weights
    weights = param_count(SMALL) * 2
    kv = [2 * c * 2 * 2 * 4 * 2 for c in (5, 6)]
    assert generation_time(SMALL, BYTE_CARD, batch=2, prompt_len=4, new_tokens=3, dtype_bytes=2) == pytest.approx(
        3 * weights + sum(kv)
    )
    lora = lora_param_count(SMALL, 2) * 4
    assert generation_time(
        SMALL, BYTE_CARD, batch=2, prompt_len=4, new_tokens=3, dtype_bytes=2, lora_r=2
    ) == pytest.approx(3 * (weights + lora) + sum(kv))
    # one new token is the prefill alone
    assert generation_time(SMALL, FLOP_CARD, batch=2, prompt_len=4, new_tokens=1, dtype_bytes=2) == pytest.approx(pre)


def test_training_and_step_time_by_hand():
    fl = sum(training_flops(SMALL, sequences=4, prompt_len=3, completion_len=4, lora_r=2).values())
    assert training_time(
        SMALL, FLOP_CARD, sequences=4, prompt_len=3, completion_len=4, micro_batch=2, dtype_bytes=2, lora_r=2
    ) == pytest.approx(fl)
    # the weights read 3 times (checkpointing) in each of 2 micro-batches, LoRA's in float32
    assert training_time(
        SMALL, BYTE_CARD, sequences=4, prompt_len=3, completion_len=4, micro_batch=2, dtype_bytes=2, lora_r=2
    ) == pytest.approx(2 * 3 * (param_count(SMALL) * 2 + lora_param_count(SMALL, 2) * 4))
    step = lora_grpo_step_time(
        SMALL, FLOP_CARD, dtype_bytes=2, lora_r=2, micro_batch=2, generation_batch=4, prompt_len=3, completion_len=4
    )
    gen = generation_time(SMALL, FLOP_CARD, batch=4, prompt_len=3, new_tokens=4, dtype_bytes=2)  # merged: R = 0
    assert step == pytest.approx({"generation": gen, "training": fl, "step": gen + fl})


def _run(**kw):
    run = NS(
        model="qwen2.5-0.5b",
        dtype="float16",
        lora=True,
        lora_r=16,
        task="gsm8k",
        evaluate=True,
        n_eval=40,
        eval_samples=4,
        eval_batch_size=32,
        eval_max_new_tokens=None,
    )
    cfg = NS(
        max_steps=10,
        per_device_train_batch_size=16,
        generation_batch_size=32,
        max_completion_length=256,
        gradient_checkpointing=True,
        fast_generation=True,
        compile_generation=True,
        use_vllm=False,
    )
    for key, value in kw.items():
        setattr(run if hasattr(run, key) else cfg, key, value)
    return run, cfg


def test_run_time_adds_the_steps_and_two_evaluations():
    q, t4, host = QWEN25["qwen2.5-0.5b"], GPUS["t4"], {"merged": 0.005, "unmerged": 0.011}
    est = run_time(*_run(), t4, host=host)
    step = lora_grpo_step_time(
        q, t4, dtype_bytes=2, lora_r=16, micro_batch=16, generation_batch=32, prompt_len=320, completion_len=256
    )["step"]  # compiled decoding: no host term
    assert est["step"] == pytest.approx(step) and est["steps"] == pytest.approx(10 * step)
    # 40 problems in calls of 32 and 8: greedy, then 4 samples each, on the PEFT model (adapters unmerged)
    calls = [
        generation_time(q, t4, batch=b, prompt_len=320, new_tokens=256, dtype_bytes=2, lora_r=16, host_s=0.011)
        for b in (32, 128, 8, 32)
    ]
    assert est["evaluation"] == pytest.approx(sum(calls))
    assert est["total"] == pytest.approx(10 * step + 2 * sum(calls))
    assert run_time(*_run(evaluate=False), t4, host=host)["total"] == pytest.approx(10 * step)
    # eager decoding waits for the host: merged adapters with fast_generation alone, unmerged on TRL's path
    eager = run_time(*_run(compile_generation=False), t4, host=host)["step"]
    assert (
        eager
        == pytest.approx(
            lora_grpo_step_time(
                q,
                t4,
                dtype_bytes=2,
                lora_r=16,
                micro_batch=16,
                generation_batch=32,
                prompt_len=320,
                completion_len=256,
                host_s=0.005,
            )["step"]
        )
        and eager > step
    )
    trl_path = run_time(*_run(fast_generation=False), t4, host=host)["step"]
    assert trl_path == pytest.approx(
        lora_grpo_step_time(
            q,
            t4,
            dtype_bytes=2,
            lora_r=16,
            micro_batch=16,
            generation_batch=32,
            prompt_len=320,
            completion_len=256,
            merged_generation=False,
            host_s=0.011,
        )["step"]
    )
    # dtype "auto": bfloat16 where the card has it, float32 on a T4
    assert run_time(*_run(dtype="auto"), t4)["step"] > run_time(*_run(), t4)["step"]
    assert run_time(*_run(dtype="auto"), GPUS["l4"])["step"] == pytest.approx(
        run_time(*_run(dtype="bfloat16"), GPUS["l4"])["step"]
    )


def test_bad_arguments_name_themselves():
    t4 = GPUS["t4"]
    with pytest.raises(ValueError, match="tflops must be a finite number > 0"):
        GPU("x", 0, 1)
    with pytest.raises(ValueError, match="bandwidth must be a finite number > 0"):
        GPU("x", 1, float("nan"))
    with pytest.raises(ValueError, match=r"sustained .* must lie in \(0, 1\]"):
        generation_time(SMALL, t4, batch=1, prompt_len=1, new_tokens=1, dtype_bytes=2, sustained=1.5)
    with pytest.raises(ValueError, match="host_s must be a finite number of seconds >= 0"):
        generation_time(SMALL, t4, batch=1, prompt_len=1, new_tokens=1, dtype_bytes=2, host_s=-1)
    with pytest.raises(ValueError, match="dtype_bytes must be 2"):
        training_time(SMALL, t4, sequences=1, prompt_len=1, completion_len=1, micro_batch=1, dtype_bytes=3, lora_r=0)
    with pytest.raises(ValueError, match="batch must be"):
        decode_flops(SMALL, batch=0, context=1)
    with pytest.raises(ValueError, match="use_vllm must be False"):
        run_time(*_run(use_vllm=True), t4)
    with pytest.raises(ValueError, match="run.model must be one of"):
        run_time(*_run(model="llama"), t4)
    with pytest.raises(ValueError, match=r"missing \['unmerged'\]"):
        run_time(*_run(), t4, host={"merged": 0.01})


def test_device_names():
    assert gpu_named("Tesla T4") is GPUS["t4"] and gpu_named("NVIDIA L4") is GPUS["l4"]
    assert (
        gpu_named("NVIDIA A100-SXM4-80GB") is GPUS["a100"] and gpu_named("NVIDIA A100-PCIE-40GB") is GPUS["a100-40gb"]
    )
    assert gpu_named("NVIDIA H100 80GB HBM3") is GPUS["h100"] and gpu_named("NVIDIA H200") is GPUS["h200"]
    assert gpu_named("NVIDIA GeForce RTX 3090") is None and gpu_named("CPU") is None


# ---------------------------------------------------------------- what notebook 04 and docs/workshop.md say


def test_the_t4_sentence_is_notebook_04s_and_comes_from_the_committed_host_costs():
    from tools.readme_results import HOST_COSTS, t4_estimate, t4_time_line

    measured = json.loads((ROOT / HOST_COSTS).read_text())
    assert {"unmerged", "merged"} <= measured["rows"].keys()
    est = t4_estimate(ROOT)
    assert est["host"]["unmerged"] == measured["rows"]["unmerged"]["ms_per_decode_step"] / 1e3
    # the estimate is of notebook 04's GPU run: its steps and held-out problems (qae_lab.runs.presets.GPU_RUN)
    assert (est["cfg"].max_steps, est["run"].n_eval) == (200, 100)
    assert est["floor"]["total"] < est["half"]["total"]
    line = t4_time_line(ROOT)
    nb = json.loads((ROOT / "notebooks" / "04_lora_grpo_qwen25.ipynb").read_text())
    opening = " ".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")
    assert " ".join(line.split()) in " ".join(opening.split())
    settings = next("".join(c["source"]) for c in nb["cells"] if "presets.build(" in "".join(c["source"]))
    assert 'GPU_RUN["max_steps"]' in settings
