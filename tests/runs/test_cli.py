"""Tests for qae_lab.runs.cli and qae_lab.runs.presets: the end-of-answer verdict of a run's evaluation,
presets and ``--set`` overrides, the GPU presets built without a model, settings and data files
refused before anything loads, and a tiny real run through the entry function (the embedded model on
the CPU: 2 steps of 2 prompts x 4 completions, 8 evaluation problems x 2 samples). Interruption,
``--resume``, ``--overwrite`` and the kill test: tests/runs/test_pipeline_safety.py."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from testkit.tiny_runs import no_loading, tiny_sets

import qae_lab.task.evaluate as ev
from qae_lab.runs import pipeline as pipeline
from qae_lab.__main__ import main
from qae_lab.task.evaluate import EvalResult
from qae_lab.methods import METHODS
from qae_lab.runs.presets import PRESETS, RunArgs, _checkpointing_field, build, command_line
from qae_lab.task.rewards import REWARDS
from qae_lab.storage.folder import read_log, step_rows

ROOT = Path(__file__).resolve().parents[2]
GOOD = "<reasoning>\n3 + 4 = 7\n</reasoning>\n<answer>\n7\n</answer>"
RAN_ON = GOOD + "\n<reasoning>\n7 + 1 = 8\n</reasoning>\n<answer>\n8 and so on"  # answered, then kept going
GARBAGE = GOOD + " 1 2 3 blah"


# ---------------------------------------------------------------- the verdict of a run's evaluation


class FakeTokenizer:
    """Just enough for qae_lab.task.data.prompt_text: the 'prompt' is the question itself."""

    chat_template = "fake"

    def apply_chat_template(self, messages, tokenize=False, add_generation_prompt=True):
        return messages[-1]["content"]


def test_trailing_garbage_scores_zero_in_the_printed_eval_verdict(monkeypatch, tmp_path):
    # question -> (greedy completion, sampled completions); generation stubbed, the judging is real
    outputs = {"q0": (GARBAGE, [GARBAGE, RAN_ON]), "q1": (GOOD, [GOOD, GARBAGE])}

    def fake_generate(model, tokenizer, prompts, *, num_samples=1, do_sample=False, **kwargs):
        return [outputs[p][1] if do_sample else [outputs[p][0]] for p in prompts]

    monkeypatch.setattr(ev, "generate", fake_generate)
    records = [
        {"id": 0, "level": 2, "question": "q0", "gold": "7"},
        {"id": 1, "level": 3, "question": "q1", "gold": "7"},
    ]
    cfg = SimpleNamespace(temperature=1.0, max_completion_length=48, disable_tqdm=True, device="cpu")
    res = pipeline.evaluate_run(None, FakeTokenizer(), records, RunArgs(eval_samples=2), cfg, tmp_path / "eval.json")
    # strict: only GOOD counts; lenient: GARBAGE too (RAN_ON's last answer is 8)
    assert res.summary == {
        "n_problems": 2,
        "n_samples": 2,
        "greedy_pass@1": 0.5,
        "pass@1": 0.25,
        "pass@2": 0.5,
        "extracted_frac": 1.0,
        "lenient_pass@1": 0.75,
        "lenient_greedy_pass@1": 1.0,
        # q0: no correct text, q1: GOOD once; each group's most frequent text is 1 of its 2
        "distinct_correct": 0.5,
        "top_share": 0.5,
    }
    assert res.by_level[2]["pass@1"] == 0.0 and res.by_level[3]["pass@1"] == 0.5
    assert "lenient_pass@1" not in res.by_level[2]
    first = res.problems[0]["samples"][0]
    assert list(first) == ["completion", "extracted", "correct", "correct_lenient"]
    assert first["correct_lenient"] and not first["correct"] and res.problems[0]["n_correct"] == 0
    assert EvalResult.from_json(tmp_path / "eval.json") == res  # what eval_*.json holds
    line = pipeline.eval_line("after", res)
    assert "greedy pass@1 0.500, sampled pass@1 0.250" in line and "lenient 0.750" in line


# ---------------------------------------------------------------- presets and overrides


def test_every_preset_builds_and_methods_map_to_knobs(tmp_path):
    for name in PRESETS:
        _, cfg = build(name, output_dir=str(tmp_path / name))
        assert cfg.output_dir == str(tmp_path / name) and cfg.num_generations == 8
    for method, knobs in METHODS.items():
        _, cfg = build("cpu-demo", method=method, output_dir=str(tmp_path))
        assert (cfg.baseline, cfg.token_weighting) == (knobs["baseline"], knobs["token_weighting"])
    _, cfg = build("cpu-demo", ["token_weighting=none"], method="qae_sa_ah", output_dir=str(tmp_path))
    assert cfg.token_weighting == "none"  # --set wins over --method


def test_cpu_demo_preset_is_what_the_readme_says(tmp_path):
    run, cfg = build("cpu-demo", output_dir=str(tmp_path))
    assert (run.model, run.task, run.levels, run.eval_samples) == ("embedded", "synthetic", (2, 3, 4, 5), 8)
    assert (cfg.baseline, cfg.quantile_k, cfg.token_weighting) == ("quantile", 0.4, "none")
    assert cfg.use_cpu and not cfg.bf16 and cfg.beta == 0.0 and cfg.loss_type == "bnpo"
    assert (cfg.per_device_train_batch_size, cfg.num_generations, cfg.max_completion_length) == (64, 8, 48)
    assert cfg.generation_batch_size == 64 and cfg.temperature == 1.0 and not getattr(cfg, _checkpointing_field())
    assert cfg.logging_steps == 1 and not cfg.disable_tqdm


def test_the_reward_is_chosen_by_name(tmp_path):
    run, cfg = build("cpu-demo", output_dir=str(tmp_path))
    assert run.reward == "strict" and cfg.success_threshold == 0.5
    for name in ("qwen2.5-0.5b-gsm8k", "qwen2.5-1.5b-gsm8k", "qwen2.5-3b-gsm8k", "qwen2.5-1.5b-gsm8k-live"):
        run, cfg = build(name, output_dir=str(tmp_path))  # SA-AH-GRPO's composite reward: correct scores >= 5
        assert run.reward == "composite" and cfg.success_threshold == 5.0
    run, cfg = build("qwen2.5-1.5b-gsm8k", ["reward=strict", "success_threshold=0.5"], output_dir=str(tmp_path))
    assert run.reward == "strict"
    with pytest.raises(ValueError, match=r"success_threshold must lie in \(2.5, 5.0\] with reward 'composite'"):
        build("cpu-demo", ["reward=composite"], output_dir=str(tmp_path))  # 0.5 would count wrong answers as successes
    with pytest.raises(ValueError, match="reward must be one of"):
        build("cpu-demo", ["reward=lenient_strict"], output_dir=str(tmp_path))
    assert build("cpu-demo", ["reward=lenient"], output_dir=str(tmp_path))[0].reward == "lenient"  # an ablation
    run, cfg = build("cpu-demo", ["reward=composite", "success_threshold=5", "n_train=8"], output_dir=str(tmp_path))
    trainer, _, _ = pipeline.make_trainer(run, cfg)
    assert trainer.reward_funcs == [REWARDS["composite"]]


def test_default_output_dir_is_runs_preset_timestamp():
    _, cfg = build("cpu-demo")
    assert Path(cfg.output_dir).parent == Path("runs") and Path(cfg.output_dir).name.startswith("cpu-demo-")
    assert not Path(cfg.output_dir).exists()  # building creates nothing


@pytest.mark.parametrize(
    "name,model,max_len",
    [
        ("qwen2.5-0.5b-gsm8k", "qwen2.5-0.5b", 384),
        ("qwen2.5-1.5b-gsm8k", "qwen2.5-1.5b", 384),
        ("qwen2.5-3b-gsm8k", "qwen2.5-3b", 512),
    ],
)
def test_gpu_presets_build_without_loading_a_model(name, model, max_len, monkeypatch, capsys, tmp_path):
    import transformers

    def no_loading(*args, **kwargs):
        raise AssertionError("a dry run must not load a model")

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", no_loading)
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", no_loading)
    run, cfg = build(name, ["quantile_k=0.6"], method="qae_sa_ah", output_dir=str(tmp_path))
    assert (run.model, run.task, run.n_train, run.n_eval, run.lora, run.lora_r) == (model, "gsm8k", 800, 500, True, 16)
    assert cfg.learning_rate == 5e-6 and cfg.max_completion_length == max_len and getattr(cfg, _checkpointing_field())
    assert cfg.generation_batch_size == 64 and cfg.num_generations == 8  # 8 prompts x 8 completions per step
    assert (cfg.quantile_k, cfg.token_weighting) == (0.6, "sa_ah")
    assert cfg.bf16 == (torch.cuda.is_available() and torch.cuda.is_bf16_supported())
    assert main(["train", "--preset", name, "--set", "max_steps=7", "--dry-run"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["command"] == f"python -m qae_lab train --preset {name} --set max_steps=7"
    assert out["run"]["model"] == model and out["trainer"]["max_steps"] == 7
    assert out["trainer"]["steps_per_generation"] == 4


@pytest.mark.parametrize(
    "sets,message",
    [
        (["quantile_kk=0.6"], "unknown field.*'quantile_kk'.*did you mean 'quantile_k'"),
        (["quantile_k"], "needs name=value"),
        (["max_steps=ten"], r"--set max_steps=ten: max_steps: invalid int value: 'ten'"),
        (["quantile_k=1.5"], "quantile_k must lie in"),
        (["token_weighting=everything"], "token_weighting"),
        (["task=mnist"], "task must be"),
        (["levels=0,7"], "levels must be"),
        (["n_eval=0"], "n_eval must be an int >= 1"),
    ],
)
def test_bad_overrides_are_rejected_clearly(sets, message, capsys):
    with pytest.raises(ValueError, match=message):
        build("cpu-demo", sets, output_dir="unused")
    assert main(["train", *[a for s in sets for a in ("--set", s)], "--dry-run"]) == 2
    assert "qae-lab: error:" in capsys.readouterr().err


def test_unknown_preset_and_method_are_rejected():
    with pytest.raises(ValueError, match="unknown preset"):
        build("gpu-please")
    with pytest.raises(ValueError, match="unknown method"):
        build("cpu-demo", method="ppo")
    with pytest.raises(SystemExit):  # argparse's own choices check
        main(["train", "--preset", "gpu-please"])


def test_command_line_quotes_values():
    assert (
        command_line("cpu-demo", ['report_to=["a b"]'])
        == "python -m qae_lab train --preset cpu-demo --set 'report_to=[\"a b\"]'"
    )


@pytest.mark.slow(seconds=8)
def test_console_script_and_module_entry_point():
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts == {"qae-lab": "qae_lab.__main__:main"}
    out = subprocess.run([sys.executable, "-m", "qae_lab", "presets"], capture_output=True, text=True, check=True)
    assert set(PRESETS) == {line.split(":")[0] for line in out.stdout.splitlines()}


# ---------------------------------------------------------------- tiny real runs


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("cli") / "run"
    assert main(["train", "--preset", "cpu-demo", "--output-dir", str(out), *tiny_sets()]) == 0
    return out


@pytest.mark.slow
def test_tiny_run_writes_config_log_evals_and_report(tiny_run):
    assert {"config.json", "log.jsonl", "report.html", "eval_before.json", "eval_after.json", "model"} <= {
        p.name for p in tiny_run.iterdir()
    }
    config = json.loads((tiny_run / "config.json").read_text())
    assert config["preset"] == "cpu-demo" and config["run"]["method"] == "qae" and config["run"]["n_eval"] == 8
    assert config["trainer"]["max_steps"] == 2 and config["trainer"]["quantile_k"] == 0.4
    assert config["run"]["command"].startswith("python -m qae_lab train --preset cpu-demo --set max_steps=2")
    assert {"qae_lab", "trl", "transformers", "torch"} <= set(config["versions"])
    rows = step_rows(read_log(tiny_run))
    assert [r["step"] for r in rows] == [1, 2]  # one line per step
    for r in rows:
        assert r["qae/k"] == 0.4 and 0.0 <= r["reward"] <= 1.0 and "rewards/strict_correctness_reward/mean" in r
        assert {"qae/zero_adv_frac", "qae/hard_frac", "qae/easy_frac", "completions/mean_length"} <= set(r)
    after = EvalResult.from_json(tiny_run / "eval_after.json")
    assert after.summary["n_problems"] == 8 and after.summary["n_samples"] == 2
    assert {"greedy_pass@1", "pass@1", "lenient_pass@1"} <= set(after.summary)
    html = (tiny_run / "report.html").read_text()
    assert "Held-out evaluation" in html and "greedy_pass@1" in html and "zero-advantage fraction" in html


def test_make_trainer_loads_the_run_dtype(tmp_path):
    run, cfg = build(
        "cpu-demo", ["dtype=bfloat16", "n_train=8", "n_eval=8", "max_steps=1"], output_dir=str(tmp_path / "run")
    )
    trainer, _, _ = pipeline.make_trainer(run, cfg, preset="cpu-demo")
    assert {p.dtype for p in trainer.model.parameters()} == {torch.bfloat16}


@pytest.mark.parametrize(
    "sets, message",
    [
        (["max_steps=0"], "max_steps must be -1 (train num_train_epochs epochs) or in [1, 100000]"),
        (["max_steps=-3"], "max_steps must be -1"),
        (["learning_rate=-1"], "learning_rate must be a number in [0, inf), got -1.0"),
        # transformers' own words (its warpers, built as generate builds them); top_p=1.5 is accepted, as by TRL
        (["temperature=0"], "temperature=0.0: transformers' generate would"),
        (["beta=-0.1"], "beta must be a number in [0, inf)"),
        (["max_completion_length=0"], "max_completion_length must be a number in [1, inf)"),
        (["per_device_train_batch_size=0"], "per_device_train_batch_size must be"),
        (["task=gsm8k", "gsm8k_path=/nonexistent/gsm8k"], "gsm8k_path /nonexistent/gsm8k"),
        # a ZeroDivisionError in TRL's checks; a model folder's own Python code run by TRL's reference model
        (["num_generations=0"], "num_generations must be a number in [2, inf), got 0"),
        (["trust_remote_code=true"], "trust_remote_code=true would run Python code shipped in a model folder"),
        (['model_init_kwargs={"trust_remote_code": true}'], "model_init_kwargs.trust_remote_code=true would run"),
    ],
)
def test_settings_are_refused_before_anything_loads_dry_run_included(sets, message, monkeypatch, capsys, tmp_path):
    no_loading(monkeypatch)
    for extra in (["--dry-run"], []):
        assert (
            main(["train", "--output-dir", str(tmp_path / "r"), *[a for s in sets for a in ("--set", s)], *extra]) == 2
        )
        assert message in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


def test_a_bad_local_data_file_fails_the_dry_run_with_file_and_line(tmp_path, monkeypatch, capsys):
    no_loading(monkeypatch)
    data = tmp_path / "gsm8k"
    data.mkdir()
    (data / "train.jsonl").write_text('{"question": "1+1?", "answer": "2 #### 2"}\n{"question": "2+2?"\n')
    (data / "test.jsonl").write_text('{"question": "1+1?", "answer": "2 #### 2"}\n')
    assert main(["train", "--preset", "qwen2.5-0.5b-gsm8k", "--set", f"gsm8k_path={data}", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert f"{data / 'train.jsonl'} line 2" in err and "not JSON" in err


def test_run_folders_and_flag_pairs_that_cannot_work_get_a_named_error(monkeypatch, capsys, tmp_path):
    # --output-dir naming a file, or /, passed --dry-run; --resume ignored --overwrite
    no_loading(monkeypatch)
    (tmp_path / "a-file").write_text("mine")
    for argv, message in (
        (["--output-dir", str(tmp_path / "a-file")], "is a file, not a folder"),
        (["--output-dir", "/"], "is the file system's root"),
        (["--resume", str(tmp_path), "--overwrite"], "--resume continues the run in its folder, --overwrite deletes"),
        (["--resume", str(tmp_path / "a-file")], "is a file: give a run folder"),
    ):
        for extra in (["--dry-run"], []):
            assert main(["train", *argv, *extra]) == 2, argv
            err = capsys.readouterr().err
            assert err.startswith("qae-lab: error: ") and message in err and err.count("\n") == 1, err
    assert (tmp_path / "a-file").read_text() == "mine"


def test_remote_code_in_a_model_folder_never_runs(tmp_path, monkeypatch, capsys):
    # with beta > 0 and no LoRA, TRL built the reference model with trust_remote_code and a
    # model folder's own modelling file ran (it wrote a marker file)
    from qae_lab.task.models import embedded_dir

    model = Path(shutil.copytree(embedded_dir(), tmp_path / "model"))
    marker = tmp_path / "ran"
    (model / "modeling_evil.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    config = json.loads((model / "config.json").read_text())
    config["auto_map"] = {"AutoModelForCausalLM": "modeling_evil.Evil", "AutoConfig": "modeling_evil.EvilConfig"}
    (model / "config.json").write_text(json.dumps(config))
    for sets in (["trust_remote_code=true"], ['model_init_kwargs={"trust_remote_code": true}']):
        assert (
            main(
                [
                    "train",
                    "--output-dir",
                    str(tmp_path / "run"),
                    "--set",
                    f"model={model}",
                    "--set",
                    "beta=0.04",
                    *tiny_sets(sets),
                ]
            )
            == 2
        )
        assert "would run Python code shipped in a model folder" in capsys.readouterr().err
    assert not marker.exists() and not (tmp_path / "run").exists()
