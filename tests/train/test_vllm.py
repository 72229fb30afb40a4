"""QAETrainer with vLLM generation (``use_vllm=True``), without vLLM or a GPU.

The configuration level: on a GPU preset, ``use_vllm=True`` sets the transformers-only generation
settings off with a warning, carries the vLLM settings, and a run's recorded settings resume.

The trainer level: vLLM's engine is replaced by a fake that TRL 1.16's own vLLM code
(``trl.generation.vllm_generation.VLLMGeneration``, colocate mode) drives as it would drive vLLM's
``LLM``: built with the config's settings, sent the LoRA-merged weights at each step, asked for
completions of the prompt token ids. The fake answers with fixed completions and sampler
log-probs, so the test knows every reward, QAE advantage and importance ratio it should see.
"""

from __future__ import annotations

import math
import os
import types
import warnings

import pytest
import torch
from lora_setup import lora_args, lora_policy, lora_trainer
from trl.generation import vllm_generation

from qae_lab.train import config
from qae_lab.runs import presets
from qae_lab.train import trainer as trainer_module
from qae_lab.task.answers import completion_text
from qae_lab.storage.resume import resume_changes
from qae_lab.train.config import QAEConfig
from qae_lab.storage.folder import RunFolderError
from qae_lab.train.trainer import QAETrainer

LIVE = "qwen2.5-1.5b-gsm8k-live"
STEPPED_ASIDE = (
    r"fast_generation=True -> False, compile_generation=True -> False, "
    r"cache_implementation='static' -> None"
)


# ---------------------------------------------------------------- configuration


def test_the_live_preset_with_vllm_steps_the_fast_path_aside_and_says_so(tmp_path):
    sets = [
        "use_vllm=true",
        "vllm_mode=colocate",
        "vllm_gpu_memory_utilization=0.25",
        "vllm_importance_sampling_mode=token_truncate",
        "vllm_max_model_length=1024",
    ]
    with pytest.warns(UserWarning, match=STEPPED_ASIDE) as seen:
        run, cfg = presets.build(LIVE, sets, output_dir=str(tmp_path))
    assert len(seen) == 1 and seen[0].filename != config.__file__  # attributed to the code that built the config
    recorded = cfg.to_dict()  # what config.json holds
    assert (recorded["fast_generation"], recorded["compile_generation"], recorded["cache_implementation"]) == (
        False,
        False,
        None,
    )
    assert (
        recorded["use_vllm"],
        recorded["vllm_mode"],
        recorded["vllm_gpu_memory_utilization"],
        recorded["vllm_importance_sampling_mode"],
        recorded["vllm_max_model_length"],
    ) == (True, "colocate", 0.25, "token_truncate", 1024)
    # the rest of the preset is untouched
    assert (run.model, cfg.per_device_train_batch_size, cfg.num_generations, cfg.max_completion_length) == (
        "qwen2.5-1.5b",
        32,
        8,
        256,
    )


def test_without_vllm_the_preset_keeps_the_fast_path(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # no step-aside note
        _, cfg = presets.build(LIVE, [], output_dir=str(tmp_path))
    assert (cfg.use_vllm, cfg.fast_generation, cfg.compile_generation, cfg.cache_implementation) == (
        False,
        True,
        True,
        "static",
    )


def test_vllm_with_nothing_to_step_aside_gives_no_note(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        cfg = QAEConfig(output_dir=str(tmp_path), use_cpu=True, report_to=[], use_vllm=True, vllm_mode="server")
    assert (cfg.fast_generation, cfg.compile_generation, cfg.vllm_mode) == (False, False, "server")


def test_only_the_settings_that_were_on_are_named(tmp_path):
    with pytest.warns(UserWarning, match=r"step aside: compile_generation=True -> False$"):
        cfg = QAEConfig(output_dir=str(tmp_path), use_cpu=True, report_to=[], use_vllm=True, compile_generation=True)
    assert not cfg.compile_generation


def test_a_vllm_run_resumes_with_its_recorded_settings(tmp_path):
    def settings(sets):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            run, cfg = presets.build(LIVE, sets, output_dir=str(tmp_path))
        return cfg.to_dict(), {}

    stored_trainer, _ = settings(["use_vllm=true"])
    stored = {"trainer": stored_trainer, "run": {}}
    assert resume_changes(stored, *settings(["use_vllm=true"]), checkpoint_step=10) == {}
    # sampling with transformers' fast path instead is another experiment: refused, naming what changed
    with pytest.raises(RunFolderError, match=r"fast_generation False -> True.*use_vllm True -> False"):
        resume_changes(stored, *settings([]), checkpoint_step=10)


# ---------------------------------------------------------------- the trainer, through TRL's vLLM code

G = 4  # completions per prompt
SAMPLER_LOGP = 0.0  # the fake sampler's log-prob of every token it returns: the importance ratio is then p_theta


def says_yes(completions, **kwargs) -> list[float]:
    """1 for a completion that says yes, else 0."""
    return [1.0 if "yes" in completion_text(c) else 0.0 for c in completions]


def answer(row: int) -> str:
    """Prompt 0 gets one yes in its group of 4, prompt 1 two: rewards (1, 0, 0, 0, 1, 1, 0, 0)."""
    group, j = divmod(row, G)
    return "yes" if j < 1 + group % 2 else "no"


class FakeLLM:
    """Stands in for ``vllm.LLM`` where TRL builds it (colocate mode): records what TRL gives it."""

    def __init__(self, tok, **kwargs):
        self.kwargs, self.tok, self.pushed, self.prompts, self.sampling = kwargs, tok, [], [], []
        self.loading: dict[str, torch.Tensor] = {}  # the weights of the sync under way
        model = types.SimpleNamespace(
            load_weights=lambda weights: self.loading.update({name: p.detach().clone() for name, p in weights})
        )
        runner = types.SimpleNamespace(model=model)
        self.llm_engine = types.SimpleNamespace(
            model_executor=types.SimpleNamespace(driver_worker=types.SimpleNamespace(model_runner=runner))
        )

    def reset_prefix_cache(self):  # TRL calls it at the end of each weight sync
        self.pushed.append(self.loading)
        self.loading = {}

    def generate(self, prompts, sampling_params, use_tqdm=False):
        self.prompts.append([p["prompt_token_ids"] for p in prompts])
        self.sampling.append(sampling_params)
        outputs = []
        for row, p in enumerate(prompts):
            ids = self.tok.encode(answer(row), add_special_tokens=False) + [self.tok.eos_token_id]
            logprobs = [{t: types.SimpleNamespace(logprob=SAMPLER_LOGP, rank=1)} for t in ids]
            outputs.append(
                types.SimpleNamespace(
                    prompt_token_ids=p["prompt_token_ids"],
                    outputs=[types.SimpleNamespace(token_ids=ids, logprobs=logprobs)],
                )
            )
        return outputs


@pytest.fixture
def fake_vllm(monkeypatch, tok):
    """vLLM 'installed', with :class:`FakeLLM` as its engine; the environment variables TRL sets are restored."""
    made = []

    def make(**kwargs):
        made.append(FakeLLM(tok, **kwargs))
        return made[-1]

    monkeypatch.setattr(vllm_generation, "is_vllm_available", lambda *a, **k: True)
    monkeypatch.setattr(vllm_generation, "LLM", make, raising=False)
    monkeypatch.setattr(vllm_generation, "SamplingParams", lambda **kw: kw, raising=False)
    names = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")  # TRL's colocate mode sets them
    before = {name: os.environ.get(name) for name in names}
    yield made
    for name, value in before.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def vllm_trainer(tmp_path, tok, model=None, **kwargs) -> QAETrainer:
    """lora_setup's trainer on 16 problems, rewarded by :func:`says_yes`, 2 steps sampled by vLLM (colocate)."""
    settings = dict(
        num_generations=G,
        max_completion_length=8,
        max_steps=2,
        scale_rewards="none",
        quantile_k=0.4,
        use_vllm=True,
        vllm_mode="colocate",
        vllm_gpu_memory_utilization=0.25,
    )
    settings.update(kwargs)
    with pytest.warns(UserWarning, match="step aside"):  # the GPU presets' fast path, set aside
        args = lora_args(
            tmp_path, **settings, fast_generation=True, compile_generation=True, cache_implementation="static"
        )
    return lora_trainer(model if model is not None else lora_policy()[0], tok, args, reward_funcs=says_yes, n_train=16)


def spy(monkeypatch, owner, name, calls: list):
    """Record the keyword arguments and result of each call of ``owner.name``, and call it."""
    real = getattr(owner, name)

    def recorded(*args, **kwargs):
        out = real(*args, **kwargs)
        calls.append((args, kwargs, out))
        return out

    monkeypatch.setattr(owner, name, recorded)


def test_qae_trains_on_vllms_completions(tmp_path, tok, fake_vllm, monkeypatch):
    def no_fast_path(*args, **kwargs):
        raise AssertionError("generation_policy entered on the vLLM path")

    monkeypatch.setattr(trainer_module, "generation_policy", no_fast_path)
    trainer = vllm_trainer(tmp_path, tok)
    model = trainer.accelerator.unwrap_model(trainer.model)
    monkeypatch.setattr(type(model.get_base_model()), "generate", no_fast_path)  # transformers never samples
    scored, losses = [], []
    spy(monkeypatch, trainer, "_generate_and_score_completions", scored)
    spy(monkeypatch, trainer_module, "grpo_loss", losses)
    trainer.train()

    [llm] = fake_vllm
    # the config's settings reached the engine and the sampler
    assert (
        llm.kwargs["gpu_memory_utilization"],
        llm.kwargs["tensor_parallel_size"],
        llm.kwargs["max_num_seqs"],
        llm.kwargs["model"],
    ) == (0.25, 1, 8, model.name_or_path)
    assert len(llm.sampling) == 2 and all(
        (s["n"], s["temperature"], s["max_tokens"], s["logprobs"]) == (1, 1.0, 8, 0) for s in llm.sampling
    )
    assert [len(p) for p in llm.prompts] == [8, 8]  # 2 prompts x G per step, each given G times
    # QAE's advantages from the fake's completions: K = 0.4 of G = 4 is the 2nd smallest reward, 0 in both groups
    # (the mean baseline would give 0.75, -0.25, ... and 0.5, -0.5, ...)
    for _, _, out in scored:
        texts = tok.batch_decode(out["completion_ids"], skip_special_tokens=True)
        assert [t.strip() for t in texts] == [answer(r) for r in range(8)]
        assert out["advantages"].tolist() == [1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0]
        # TRL's importance ratio: sampler log-prob 0, so exp(sum_t log p_theta), in (0, 1), one per response
        assert out["importance_sampling_ratio"].shape == (8, 1)
        assert bool((out["importance_sampling_ratio"] > 0).all() and (out["importance_sampling_ratio"] < 1).all())
    # the loss got TRL's ratio for the rows it updated (sparse update: the 3 with A != 0)
    assert len(losses) == 2
    for (_, kwargs, _), (_, _, out) in zip(losses, scored):
        kept = out["advantages"] != 0
        assert sorted(kwargs["sampling_ratio"].flatten().tolist()) == pytest.approx(
            sorted(out["importance_sampling_ratio"][kept].flatten().tolist()), rel=1e-6
        )
    assert trainer.state.global_step == 2
    assert [row["qae/k"] for row in trainer.state.log_history if "qae/k" in row] == [0.4, 0.4]


def test_vllm_gets_the_merged_lora_weights_each_step(tmp_path, tok, fake_vllm):
    trainer = vllm_trainer(tmp_path, tok, vllm_importance_sampling_correction=False)  # ratios ~1e-19 would stall it
    model = trainer.accelerator.unwrap_model(trainer.model)
    q = model.get_base_model().model.layers[0].self_attn.q_proj  # a PEFT LoRA layer
    merged_before = (
        q.base_layer.weight.detach()
        + q.scaling["default"] * (q.lora_B["default"].weight @ q.lora_A["default"].weight).detach()
    )
    trainer.train()

    [llm] = fake_vllm
    pushes = llm.pushed
    assert len(pushes) == 2  # once per step
    names = set(pushes[0])
    assert not any("lora_" in n or "base_layer" in n or n.startswith("base_model") for n in names)
    assert "model.layers.0.self_attn.q_proj.weight" in names
    torch.testing.assert_close(pushes[0]["model.layers.0.self_attn.q_proj.weight"], merged_before)
    # the second push carries the trained adapter
    assert not torch.equal(pushes[1]["model.layers.0.self_attn.q_proj.weight"], merged_before)


def test_without_the_importance_correction_the_loss_gets_no_sampler_ratio(tmp_path, tok, fake_vllm, monkeypatch):
    trainer = vllm_trainer(tmp_path, tok, max_steps=1, vllm_importance_sampling_correction=False)
    losses = []
    spy(monkeypatch, trainer_module, "grpo_loss", losses)
    trainer.train()
    assert len(losses) == 1 and losses[0][1]["sampling_ratio"] is None
    assert not math.isnan(losses[0][2].loss.item())


def test_vllms_weight_sync_leaves_bf16_base_weights_bit_identical(tmp_path, tok, fake_vllm):
    # TRL's sync merges LoRA, sends the weights and unmerges: in bf16 that unmerge alone would leave rounding in W
    trainer = vllm_trainer(
        tmp_path,
        tok,
        model=lora_policy(dtype=torch.bfloat16)[0],
        max_steps=1,
        vllm_importance_sampling_correction=False,
    )
    model = trainer.accelerator.unwrap_model(trainer.model)
    frozen = {n: p.detach().clone() for n, p in model.named_parameters() if not p.requires_grad}
    trainer.train()
    [llm] = fake_vllm
    q_name = "model.layers.0.self_attn.q_proj.weight"
    assert not torch.equal(
        llm.pushed[0][q_name], frozen["base_model.model." + q_name.replace(".weight", ".base_layer.weight")]
    )
    assert all(torch.equal(p.detach(), frozen[n]) for n, p in model.named_parameters() if not p.requires_grad)
