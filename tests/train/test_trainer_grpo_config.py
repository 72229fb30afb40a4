"""QAETrainer where a TRL user's script hands it what GRPOTrainer takes: a plain ``GRPOConfig`` with vLLM's sampling
keys in ``generation_kwargs``, or no ``args`` at all, trains one step unchanged (TRL's quickstart, one line swapped);
what runs code from elsewhere is still refused by name; building and training leaves the process's warning filters
as they were. The embedded model on the CPU."""

from __future__ import annotations

import dataclasses
import re
import warnings

import pytest
from trl import GRPOConfig

from qae_lab.task.data import synthetic_task, to_grpo_dataset
from qae_lab.task.models import load_policy
from qae_lab.task.rewards import correctness_reward
from qae_lab.train.config import QAEConfig
from qae_lab.train.trainer import QAETrainer

DATA = to_grpo_dataset(synthetic_task(8, levels=(2, 3), seed=5))


def researchers_config(out, **changes) -> GRPOConfig:
    """What a TRL quickstart script sets, with vLLM's SamplingParams keys it keeps for its vLLM runs."""
    settings = dict(
        output_dir=str(out),
        per_device_train_batch_size=4,
        num_generations=4,
        max_completion_length=8,
        generation_kwargs={"seed": 0, "skip_special_tokens": True, "include_stop_str_in_output": False},
        temperature=0.7,
        top_k=0,
        max_steps=1,
        use_cpu=True,
        report_to=[],
        save_strategy="no",
        disable_tqdm=True,
    )
    return GRPOConfig(**{**settings, **changes})


@pytest.mark.slow(seconds=15)
def test_a_plain_grpo_config_trains_unchanged_with_qae_defaults(tmp_path):
    model, tok = load_policy("embedded", device="cpu")
    grpo = researchers_config(tmp_path)
    with pytest.warns(UserWarning, match=r"QAETrainer got a GRPOConfig: .*baseline='quantile' \(QAE.*quantile_k=0.4"):
        trainer = QAETrainer(model, correctness_reward, args=grpo, processing_class=tok, train_dataset=DATA)
    cfg = trainer.args
    assert isinstance(cfg, QAEConfig) and (cfg.baseline, cfg.quantile_k) == ("quantile", 0.4)
    for name in ("generation_kwargs", "temperature", "top_k", "max_completion_length", "num_generations", "max_steps"):
        assert getattr(cfg, name) == getattr(grpo, name), name  # every setting the script made
    assert (cfg.generation_batch_size, cfg.steps_per_generation) == (
        grpo.generation_batch_size,
        grpo.steps_per_generation,
    )
    trainer.train()
    assert trainer.state.global_step == 1 and "qae/k" in trainer.state.log_history[0]


def test_no_args_is_trls_default_under_qaes_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # TRL's default writes into "<model>-GRPO" under the working folder
    model, tok = load_policy("embedded", device="cpu")
    name = model.config._name_or_path.split("/")[-1]
    try:  # TRL's own default: bf16, which a machine without a GPU refuses
        GRPOConfig(f"{name}-GRPO")
        trl_refuses = None
    except ValueError as err:
        trl_refuses = str(err)
    if trl_refuses:  # GRPOTrainer(model, reward) fails here too, with transformers' words: so does QAETrainer
        with pytest.raises(ValueError, match=re.escape(trl_refuses)):
            QAETrainer(model, correctness_reward, processing_class=tok, train_dataset=DATA)
        return
    with pytest.warns(UserWarning, match=r"QAETrainer got no args: .* at its default \(output_dir="):
        trainer = QAETrainer(model, correctness_reward, processing_class=tok, train_dataset=DATA)
    assert isinstance(trainer.args, QAEConfig) and trainer.args.output_dir == f"{name}-QAE"


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"model_init_kwargs": {"use_kernels": True}}, r"model_init_kwargs.use_kernels loads kernels from the Hub"),
        ({"model_init_kwargs": {"trust_remote_code": True}}, r"model_init_kwargs.trust_remote_code=true would run"),
        ({"trust_remote_code": True}, r"trust_remote_code=true would run Python code"),
        ({"model_init_kwargs": {"weights_only": False}}, r"model_init_kwargs.weights_only=False would unpickle"),
        ({"generation_kwargs": {"custom_generate": "someone/x"}}, r"generation_kwargs may hold only .*custom_generate"),
    ],
)
def test_what_runs_code_from_elsewhere_is_refused_in_a_grpo_config_too(tmp_path, changes, message):
    with pytest.raises(ValueError, match=message):
        QAETrainer("embedded-is-never-loaded", correctness_reward, args=researchers_config(tmp_path, **changes))
    assert not any(tmp_path.iterdir())


@pytest.mark.slow(seconds=15)
def test_building_and_training_leave_the_process_warning_filters_as_they_were(tmp_path):
    model, tok = load_policy("embedded", device="cpu")
    before = list(warnings.filters)
    grpo = researchers_config(tmp_path)
    values = {f.name: getattr(grpo, f.name) for f in dataclasses.fields(grpo) if f.init}
    args = QAEConfig(**{**values, "generation_batch_size": None})  # TRL derived it from steps_per_generation
    trainer = QAETrainer(model, correctness_reward, args=args, processing_class=tok, train_dataset=DATA)
    assert warnings.filters == before
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        trainer.train()
    assert not [w for w in seen if "is_gradient_checkpointing" in str(w.message)]  # TRL's read, hidden in its call
    assert warnings.filters == before
