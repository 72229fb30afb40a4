"""Tests for qae_lab.runs.presets against the installed transformers / TRL: every preset resolves in a
dry run, and the activation-checkpointing field the presets set is one the installed
``TrainingArguments`` (and so QAEConfig) has; transformers 5.23 renamed ``gradient_checkpointing``
to ``activation_checkpointing``. ``.ci/min-versions`` runs this file at the declared minimum
versions, the main CI run at current ones."""

from __future__ import annotations

import dataclasses
import importlib.metadata
import json
import subprocess
import sys
from pathlib import Path

import pytest
import transformers

from qae_lab.__main__ import main
from qae_lab.runs.presets import PRESETS, RunArgs, _checkpointing_field, build
from qae_lab.train.config import QAEConfig

CHECKPOINTING_NAMES = ("activation_checkpointing", "gradient_checkpointing")


def test_the_checkpointing_field_is_one_the_installed_versions_have():
    name = _checkpointing_field()
    assert name in {f.name for f in dataclasses.fields(QAEConfig)}
    trainer_args = {f.name for f in dataclasses.fields(transformers.TrainingArguments)}
    assert name in trainer_args
    # the newer name wherever the installed transformers has it (there the old one is a deprecated alias)
    assert (name == "activation_checkpointing") == ("activation_checkpointing" in trainer_args)


@pytest.mark.parametrize(
    "installed,expected",
    [
        ("4.56.2", "gradient_checkpointing"),
        ("5.17.0", "gradient_checkpointing"),
        ("5.22.2", "gradient_checkpointing"),
        ("5.23.0", "activation_checkpointing"),
        ("5.24.0.dev0", "activation_checkpointing"),
        ("6.0.0rc1", "activation_checkpointing"),
    ],
)
def test_checkpointing_field_follows_the_installed_version(installed, expected, monkeypatch):
    real = importlib.metadata.version
    monkeypatch.setattr(importlib.metadata, "version", lambda dist: installed if dist == "transformers" else real(dist))
    assert _checkpointing_field() == expected


def test_checkpointing_field_without_transformers(monkeypatch):
    def missing(dist):
        raise importlib.metadata.PackageNotFoundError(dist)

    monkeypatch.setattr(importlib.metadata, "version", missing)
    assert _checkpointing_field() == "activation_checkpointing"


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_sets_the_installed_checkpointing_field(name):
    used = [k for k in CHECKPOINTING_NAMES if k in PRESETS[name]]
    assert used == [_checkpointing_field()], f"preset {name!r} sets {used}"


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_dry_runs_without_loading_anything(name, monkeypatch, capsys):
    def no_loading(*args, **kwargs):
        raise AssertionError("a dry run must not load a model or tokenizer")

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", no_loading)
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", no_loading)
    assert main(["train", "--preset", name, "--set", "max_steps=7", "--dry-run"]) == 0, capsys.readouterr().err
    out = json.loads(capsys.readouterr().out)
    assert out["command"] == f"python -m qae_lab train --preset {name} --set max_steps=7"
    assert out["trainer"]["max_steps"] == 7
    on = out["trainer"][_checkpointing_field()]
    assert on is (not name.startswith("cpu-"))  # the GPU presets trade compute for memory, the CPU ones do not


@pytest.mark.parametrize("value", [True, False])
def test_checkpointing_can_be_set_from_the_command_line(value, tmp_path):
    field = _checkpointing_field()
    for name in ("cpu-demo", "qwen2.5-0.5b-gsm8k"):
        _, cfg = build(name, [f"{field}={str(value).lower()}"], output_dir=str(tmp_path))
        assert getattr(cfg, field) is value and cfg.gradient_checkpointing is value


@pytest.mark.slow(seconds=8)
def test_the_gpu_preset_dry_run_from_the_issue_in_a_fresh_process(tmp_path):
    # the command that failed with "unknown field(s) 'activation_checkpointing'" on transformers 5.17
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "qae_lab",
            "train",
            "--preset",
            "qwen2.5-1.5b-gsm8k",
            "--output-dir",
            str(tmp_path / "run"),
            "--dry-run",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    resolved = json.loads(out.stdout)
    assert resolved["run"]["model"] == "qwen2.5-1.5b" and resolved["trainer"][_checkpointing_field()] is True
    assert not (tmp_path / "run").exists()  # a dry run writes nothing


# ---------------------------------------------------------------- the GPU presets' generation path and precision

GPU_PRESETS = [name for name in PRESETS if name.startswith("qwen2.5")]


@pytest.mark.parametrize("name", GPU_PRESETS)
def test_gpu_presets_generate_on_the_fast_path(name, tmp_path):
    _, cfg = build(name, output_dir=str(tmp_path))
    assert (cfg.fast_generation, cfg.cache_implementation, cfg.compile_generation) == (True, "static", True)
    _, cfg = build(name, ["compile_generation=false", "fast_generation=false"], output_dir=str(tmp_path))
    assert not cfg.fast_generation and not cfg.compile_generation


def test_cpu_demo_keeps_trls_generation(tmp_path):
    # the reference runs were made this way; the embedded model has neither LoRA nor dropout to remove
    _, cfg = build("cpu-demo", output_dir=str(tmp_path))
    assert not cfg.fast_generation and not cfg.compile_generation and cfg.cache_implementation is None


def test_live_preset_is_the_1_5b_preset_with_a_shorter_step(tmp_path):
    run, live = build("qwen2.5-1.5b-gsm8k-live", output_dir=str(tmp_path))
    run_full, full = build("qwen2.5-1.5b-gsm8k", output_dir=str(tmp_path))
    assert run == run_full and run.model == "qwen2.5-1.5b" and run.lora_r == 16
    assert (live.generation_batch_size // live.num_generations, live.num_generations) == (4, 8)
    assert (full.generation_batch_size // full.num_generations, full.num_generations) == (8, 8)
    assert (live.max_completion_length, full.max_completion_length) == (256, 384)
    assert live.gradient_accumulation_steps == 1 and live.steps_per_generation == 1
    same = ("learning_rate", "loss_type", "beta", "temperature", "quantile_k", "baseline", "fast_generation")
    assert all(getattr(live, k) == getattr(full, k) for k in same)


@pytest.mark.parametrize("dtype", ["auto", "bfloat16", "float16", "float32"])
def test_dtype_is_a_run_setting(dtype, tmp_path):
    run, _ = build("qwen2.5-1.5b-gsm8k", [f"dtype={dtype}"], output_dir=str(tmp_path))
    assert run.dtype == dtype


def test_bad_dtype_names_the_field(tmp_path):
    with pytest.raises(ValueError, match="dtype must be one of"):
        build("cpu-demo", ["dtype=fp8"], output_dir=str(tmp_path))


def test_default_run_folders_never_collide(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("qae_lab.runs.presets.time.strftime", lambda fmt: "20260101-120000")
    first = build("cpu-demo")[1].output_dir
    Path(first).mkdir(parents=True)
    assert build("cpu-demo")[1].output_dir == first + "-2"  # a second run in the same second: its own folder


def test_a_missing_gsm8k_folder_is_refused_at_build(tmp_path):
    with pytest.raises(ValueError, match=r"gsm8k_path .*nowhere is not a folder"):
        build("qwen2.5-0.5b-gsm8k", [f"gsm8k_path={tmp_path / 'nowhere'}"], output_dir=str(tmp_path / "r"))


def test_cpu_sums_trains_the_sums_model_on_the_sums_task(tmp_path):
    from qae_lab.runs.pipeline import load_records

    run, cfg = build("cpu-sums", output_dir=str(tmp_path / "r"))
    assert (run.model, run.task, run.eval_samples) == ("embedded-sums", "sums", 32)
    assert cfg.max_completion_length >= 150  # the longest correct solutions run to about 140 tokens
    train, held_out = load_records(run)
    assert all(r["source"] == "sums" for r in train + held_out) and {r["id"] for r in train}.isdisjoint(
        r["id"] for r in held_out
    )
    with pytest.raises(ValueError, match="task must be 'synthetic', 'sums' or 'gsm8k'"):
        RunArgs(task="products")
