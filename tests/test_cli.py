"""Tests for qae_lab.cli and qae_lab.presets: the end-of-answer verdict of a run's evaluation,
presets and ``--set`` overrides, the GPU presets built without a model, and tiny
real runs through the entry function (the embedded model on the CPU: 2 steps of 2 prompts x 4
completions, 8 evaluation problems x 2 samples), including Ctrl-C and ``--resume``."""

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
from interrupts import InterruptAt

import qae_lab.evaluate as ev
from qae_lab import run as pipeline
from qae_lab.cli import main
from qae_lab.evaluate import EvalResult
from qae_lab.methods import METHODS
from qae_lab.presets import PRESETS, RunArgs, _checkpointing_field, build, command_line, parse_sets, parse_value
from qae_lab.rewards import REWARDS
from qae_lab.runfolder import read_log, step_rows

ROOT = Path(__file__).resolve().parents[1]
GOOD = "<reasoning>\n3 + 4 = 7\n</reasoning>\n<answer>\n7\n</answer>"
RAN_ON = GOOD + "\n<reasoning>\n7 + 1 = 8\n</reasoning>\n<answer>\n8 and so on"  # answered, then kept going
GARBAGE = GOOD + " 1 2 3 blah"


# ---------------------------------------------------------------- the verdict of a run's evaluation

class FakeTokenizer:
    """Just enough for qae_lab.data.prompt_text: the 'prompt' is the question itself."""

    chat_template = "fake"

    def apply_chat_template(self, messages, tokenize=False, add_generation_prompt=True):
        return messages[-1]["content"]


def test_trailing_garbage_scores_zero_in_the_printed_eval_verdict(monkeypatch, tmp_path):
    # question -> (greedy completion, sampled completions); generation stubbed, the judging is real
    outputs = {"q0": (GARBAGE, [GARBAGE, RAN_ON]), "q1": (GOOD, [GOOD, GARBAGE])}

    def fake_generate(model, tokenizer, prompts, *, num_samples=1, do_sample=False, **kwargs):
        return [outputs[p][1] if do_sample else [outputs[p][0]] for p in prompts]

    monkeypatch.setattr(ev, "generate", fake_generate)
    records = [{"id": 0, "level": 2, "question": "q0", "gold": "7"}, {"id": 1, "level": 3, "question": "q1", "gold": "7"}]
    cfg = SimpleNamespace(temperature=1.0, max_completion_length=48, disable_tqdm=True)
    res = pipeline.evaluate_run(None, FakeTokenizer(), records, RunArgs(eval_samples=2), cfg, tmp_path / "eval.json")
    # strict: only GOOD counts; lenient: GARBAGE too (RAN_ON's last answer is 8)
    assert res.summary == {"n_problems": 2, "n_samples": 2, "greedy_pass@1": 0.5, "pass@1": 0.25, "pass@2": 0.5,
                           "extracted_frac": 1.0, "lenient_pass@1": 0.75, "lenient_greedy_pass@1": 1.0,
                           # q0: no correct text, q1: GOOD once; each group's most frequent text is 1 of its 2
                           "distinct_correct": 0.5, "top_share": 0.5}
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


@pytest.mark.parametrize("name,model,max_len", [("qwen2.5-0.5b-gsm8k", "qwen2.5-0.5b", 384),
                                                ("qwen2.5-1.5b-gsm8k", "qwen2.5-1.5b", 384),
                                                ("qwen2.5-3b-gsm8k", "qwen2.5-3b", 512)])
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


def test_parse_value_types():
    assert parse_value("0.6", float) == 0.6 and parse_value("12", int) == 12
    assert parse_value("False", bool) is False and parse_value("yes", bool) is True
    assert parse_value("none", str | None) is None and parse_value("abc", str | None) == "abc"
    assert parse_value("3", int | str | None) == 3 and parse_value("x", int | str | None) == "x"
    assert parse_value("3,4,5", tuple[int, ...]) == (3, 4, 5) and parse_value("[2]", tuple[int, ...]) == (2,)
    assert parse_value('{"a": 1}', dict | str | None) == {"a": 1}
    for raw, tp in (("abc", int), ("maybe", bool), ("1.5", int), ("[1, 2]", dict)):
        with pytest.raises(ValueError):
            parse_value(raw, tp)


def test_parse_sets_reaches_every_field_kind():
    got = parse_sets(["quantile_k=0.6", "token_weighting=sa_ah", "levels=3,5", "n_eval=12", "bf16=false",
                      "lr_scheduler_type=cosine", "report_to=none", "max-steps=3"])
    assert got == {"quantile_k": 0.6, "token_weighting": "sa_ah", "levels": (3, 5), "n_eval": 12, "bf16": False,
                   "lr_scheduler_type": "cosine", "report_to": None, "max_steps": 3}


@pytest.mark.parametrize("sets,message", [
    (["quantile_kk=0.6"], "unknown field.*'quantile_kk'.*did you mean 'quantile_k'"),
    (["quantile_k"], "needs name=value"),
    (["max_steps=ten"], "max_steps expects"),
    (["quantile_k=1.5"], "quantile_k must lie in"),
    (["token_weighting=everything"], "token_weighting"),
    (["task=mnist"], "task must be"),
    (["levels=0,7"], "levels must be"),
    (["n_eval=0"], "n_eval must be >= 1"),
])
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
    assert command_line("cpu-demo", ["report_to=[\"a b\"]"]) == \
        "python -m qae_lab train --preset cpu-demo --set 'report_to=[\"a b\"]'"


def test_console_script_and_module_entry_point():
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts == {"qae-lab": "qae_lab.cli:main"}
    out = subprocess.run([sys.executable, "-m", "qae_lab", "presets"], capture_output=True, text=True, check=True)
    assert set(PRESETS) == {line.split(":")[0] for line in out.stdout.splitlines()}


# ---------------------------------------------------------------- tiny real runs

TINY = ["max_steps=2", "per_device_train_batch_size=8", "num_generations=4", "n_train=16", "n_eval=8",
        "eval_samples=2", "disable_tqdm=true", "torch_threads=1"]


def _sets(extra=()) -> list[str]:
    return [a for s in [*TINY, *extra] for a in ("--set", s)]


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("cli") / "run"
    assert main(["train", "--preset", "cpu-demo", "--output-dir", str(out), *_sets()]) == 0
    return out


@pytest.mark.slow
def test_tiny_run_writes_config_log_evals_and_report(tiny_run):
    assert {"config.json", "log.jsonl", "report.html", "eval_before.json", "eval_after.json", "model"} <= \
        {p.name for p in tiny_run.iterdir()}
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


@pytest.mark.slow
def test_ctrl_c_then_resume_from_the_run_folder(tmp_path, capsys):
    out = tmp_path / "run"
    run, cfg = build("cpu-demo", [*TINY, "max_steps=4"], output_dir=str(out))
    result = pipeline.train(run, cfg, preset="cpu-demo", command="python -m qae_lab train ...",
                       callbacks=[InterruptAt(2)])
    assert result["interrupted"] and result["global_step"] == 2 and result["after"] is None
    assert Path(result["checkpoint"]) == out / "checkpoint-2"
    assert "--resume" in capsys.readouterr().out  # tells how to continue
    assert [r["step"] for r in step_rows(read_log(out))] == [1, 2] and (out / "report.html").exists()
    before = (out / "eval_before.json").read_text()

    assert main(["train", "--resume", str(out), *_sets(["max_steps=4"])]) == 0  # output dir = the run folder
    assert [r["step"] for r in step_rows(read_log(out))] == [1, 2, 3, 4]
    assert (out / "eval_before.json").read_text() == before  # the "before" evaluation is not redone
    assert (out / "eval_after.json").exists()


def test_make_trainer_loads_the_run_dtype(tmp_path):
    run, cfg = build("cpu-demo", ["dtype=bfloat16", "n_train=8", "n_eval=8", "max_steps=1"],
                     output_dir=str(tmp_path / "run"))
    trainer, _, _ = pipeline.make_trainer(run, cfg, preset="cpu-demo")
    assert {p.dtype for p in trainer.model.parameters()} == {torch.bfloat16}


# ---------------------------------------------------------------- run folders lose nothing (issue 11)

def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _no_loading(monkeypatch):
    """Checks must come before anything loads: loading the model fails the test."""
    def refuse(*args, **kwargs):
        raise AssertionError("the model was loaded before the settings were checked")
    monkeypatch.setattr("qae_lab.models.load_policy", refuse)


@pytest.mark.slow
def test_a_new_run_never_overwrites_a_run_folder(tiny_run, monkeypatch, capsys, tmp_path):
    before = _snapshot(tiny_run)
    _no_loading(monkeypatch)
    for extra in ([], ["--dry-run"]):
        assert main(["train", "--output-dir", str(tiny_run), *_sets(), *extra]) == 2
        err = capsys.readouterr().err
        assert "already holds a run" in err and "--resume" in err and "--overwrite" in err
    assert _snapshot(tiny_run) == before  # nothing cut, nothing replaced
    copy = Path(shutil.copytree(tiny_run, tmp_path / "copy"))
    (copy / "my_notes.txt").write_text("keep me")
    monkeypatch.undo()
    assert main(["train", "--output-dir", str(copy), "--overwrite", *_sets(["evaluate=false"])]) == 0
    assert "deleting the previous run's" in capsys.readouterr().out
    assert (copy / "my_notes.txt").read_text() == "keep me" and not (copy / "eval_before.json").exists()
    assert [r["step"] for r in step_rows(read_log(copy))] == [1, 2]


@pytest.mark.parametrize("sets, message", [
    (["max_steps=0"], "max_steps must be -1 (train num_train_epochs epochs) or >= 1, got 0"),
    (["max_steps=-3"], "max_steps must be -1"),
    (["learning_rate=-1"], "learning_rate must be a number in [0, inf), got -1.0"),
    (["temperature=0"], "temperature must be a number in (0, inf), got 0.0"),
    (["top_p=1.5"], "top_p must be a number in (0, 1], got 1.5"),
    (["beta=-0.1"], "beta must be a number in [0, inf)"),
    (["max_completion_length=0"], "max_completion_length must be a number in [1, inf)"),
    (["per_device_train_batch_size=0"], "per_device_train_batch_size must be"),
    (["task=gsm8k", "gsm8k_path=/nonexistent/gsm8k"], "gsm8k_path /nonexistent/gsm8k"),
])
def test_settings_are_refused_before_anything_loads_dry_run_included(sets, message, monkeypatch, capsys, tmp_path):
    _no_loading(monkeypatch)
    for extra in (["--dry-run"], []):
        assert main(["train", "--output-dir", str(tmp_path / "r"), *[a for s in sets for a in ("--set", s)],
                     *extra]) == 2
        assert message in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


@pytest.fixture(scope="module")
def saved_run(tmp_path_factory):
    """A finished 4-step run with a checkpoint every 2 steps (checkpoint-2, checkpoint-4)."""
    out = tmp_path_factory.mktemp("saved") / "run"
    assert main(["train", "--output-dir", str(out),
                 *_sets(["max_steps=4", "save_strategy=steps", "save_steps=2"])]) == 0
    return out


@pytest.mark.slow
@pytest.mark.parametrize("change", [["--set", "quantile_k=0.6"], ["--method", "mean"], ["--set", "n_train=32"],
                                    ["--set", "seed=7"]])
def test_resume_refuses_changed_settings_and_touches_nothing(saved_run, change, monkeypatch, capsys):
    before = _snapshot(saved_run)
    _no_loading(monkeypatch)
    assert main(["train", "--resume", str(saved_run / "checkpoint-4"), *change]) == 2
    err = capsys.readouterr().err
    assert "other settings than the run was trained with" in err and change[1].split("=")[0] in err + "baseline"
    assert main(["train", "--resume", str(saved_run / "checkpoint-2")]) == 2  # older than checkpoint-4
    assert "checkpoint-2 is not the run's latest checkpoint (checkpoint-4 is)" in capsys.readouterr().err
    assert _snapshot(saved_run) == before


@pytest.mark.slow
def test_extending_a_finished_run_is_an_event_not_a_rewrite(saved_run, tmp_path, capsys):
    run = Path(shutil.copytree(saved_run, tmp_path / "run"))
    first = read_log(run)
    after = (run / "eval_after.json").read_bytes()
    assert main(["train", "--resume", str(run), "--set", "max_steps=6"]) == 0
    assert "changed: max_steps 4 -> 6" in capsys.readouterr().out
    rows = read_log(run)
    assert rows[:len(first)] == first  # every logged line kept, in place
    events = [r for r in rows if r.get("event") == "resume"]
    assert len(events) == 1 and events[0]["step"] == 4 and events[0]["changed"] == {"max_steps": [4, 6]}
    assert [r["step"] for r in step_rows(rows)] == [1, 2, 3, 4, 5, 6]
    config = json.loads((run / "config.json").read_text())
    assert config["trainer"]["max_steps"] == 6 and config["resumes"][0]["changed"] == {"max_steps": [4, 6]}
    assert config["trainer"]["quantile_k"] == 0.4 and config["run"]["method"] == "qae"
    assert (run / "finished-step4" / "model").is_dir()  # the first finish's model and evaluation, kept
    assert (run / "finished-step4" / "eval_after.json").read_bytes() == after
    assert (run / "eval_after.json").exists() and (run / "model").is_dir()
    capsys.readouterr()
    done = _snapshot(run)
    assert main(["train", "--resume", str(run)]) == 0  # again, as it now is: nothing left to train
    assert "resuming" in capsys.readouterr().out
    assert [r["step"] for r in step_rows(read_log(run))] == [1, 2, 3, 4, 5, 6]
    assert all(_snapshot(run)[name] == data for name, data in done.items()
               if name.startswith(("model/", "eval_after", "finished-step4/")))  # kept, not redone


@pytest.mark.slow
def test_a_second_ctrl_c_during_the_save_leaves_no_half_checkpoint(tmp_path, capsys, monkeypatch):
    from qae_lab.trainer import QAETrainer

    out = tmp_path / "run"
    run, cfg = build("cpu-demo", [*TINY, "max_steps=4", "evaluate=false", "save_strategy=steps", "save_steps=2"],
                     output_dir=str(out))
    real = QAETrainer._save_rng_state
    calls = []

    def second_ctrl_c(self, output_dir):  # Ctrl-C again while the interruption's checkpoint is being written
        calls.append(output_dir)
        if self.state.global_step == 3:
            raise KeyboardInterrupt
        return real(self, output_dir)

    monkeypatch.setattr(QAETrainer, "_save_rng_state", second_ctrl_c)
    result = pipeline.train(run, cfg, preset="cpu-demo", callbacks=[InterruptAt(3)])
    printed = capsys.readouterr().out
    assert result["interrupted"] and result["global_step"] == 3
    assert Path(result["checkpoint"]) == out / "checkpoint-2"  # the latest complete one
    assert "interrupted again while saving checkpoint-3" in printed and "checkpoint-2" in printed
    assert not (out / "checkpoint-3").exists() and {c.name for c in out.glob("checkpoint-*")} == {"checkpoint-2"}
    monkeypatch.undo()
    assert main(["train", "--resume", str(out)]) == 0  # the latest complete checkpoint
    out_text = capsys.readouterr().out
    assert "resuming" in out_text and "checkpoint-2" in out_text and "steps 3 were logged" in out_text
    assert [r["step"] for r in step_rows(read_log(out))] == [1, 2, 3, 4]
    assert [r["step"] for r in read_log(out / "log.superseded.jsonl")] == [3]


@pytest.mark.slow
def test_damaged_checkpoint_files_are_named_and_the_resume_takes_the_latest_complete_one(saved_run, tmp_path, capsys,
                                                                                          monkeypatch):
    run = Path(shutil.copytree(saved_run, tmp_path / "run"))
    _no_loading(monkeypatch)
    state = run / "checkpoint-4" / "trainer_state.json"
    state.write_text(state.read_text()[:100])
    assert main(["train", "--resume", str(run / "checkpoint-4"), "--dry-run"]) == 2
    assert "checkpoint-4: the checkpoint cannot be resumed: trainer_state.json is damaged" in capsys.readouterr().err
    rng = run / "checkpoint-2" / "rng_state.pth"
    rng.write_bytes(rng.read_bytes()[:200])
    assert main(["train", "--resume", str(run / "checkpoint-2"), "--dry-run"]) == 2
    assert "rng_state.pth is damaged or cut short" in capsys.readouterr().err
    assert main(["train", "--resume", str(run), "--dry-run"]) == 2  # no complete checkpoint is left
    err = capsys.readouterr().err
    assert "no complete checkpoint" in err and "checkpoint-4 skipped: trainer_state.json is damaged" in err


@pytest.mark.slow
def test_a_cut_last_log_line_is_restored_from_the_checkpoint(tmp_path, capsys):
    out = tmp_path / "run"
    run, cfg = build("cpu-demo", [*TINY, "max_steps=5", "evaluate=false"], output_dir=str(out))
    assert pipeline.train(run, cfg, preset="cpu-demo", callbacks=[InterruptAt(4)])["checkpoint"] == str(out / "checkpoint-4")
    log = out / "log.jsonl"
    text = log.read_text()
    log.write_text(text[: text.rindex('{"step": 4') + 30])  # step 4's line cut by a crash, after its checkpoint
    assert main(["train", "--resume", str(out)]) == 0
    assert "last line was cut short" in capsys.readouterr().out
    rows = read_log(out)
    assert [r["step"] for r in step_rows(rows)] == [1, 2, 3, 4, 5]  # no jump from 3 to 5
    restored = step_rows(rows)[3]
    assert restored["restored_from"] == "checkpoint-4/trainer_state.json" and 0.0 <= restored["reward"] <= 1.0
    event = next(r for r in rows if r.get("event") == "resume")
    assert event["cut_line"] and event["restored_steps"] == [4]


# ---------------------------------------------------------------- SIGKILL at random moments, then resume

KILL_SETS = ["max_steps=8", "save_strategy=steps", "save_steps=2", "per_device_train_batch_size=8", "num_generations=4",
             "n_train=16", "evaluate=false", "disable_tqdm=true", "torch_threads=1"]
KILL_ROUNDS, KILLS, KILLS_IN_A_SAVE, MAX_ROUNDS = 20, 24, 5, 80  # at least 20 rounds, until 24 kills, 5 in a save


def _outside(work: Path, run: Path) -> dict[str, bytes]:
    """Every file under ``work`` that is not in the run folder."""
    return {str(p.relative_to(work)): p.read_bytes() for p in sorted(work.rglob("*"))
            if p.is_file() and run not in p.parents}


def _kill_at(proc, run: Path, mode: int, rng, duration: float) -> str:
    """SIGKILL ``proc`` at a moment drawn by ``mode``; returns where it landed."""
    import time

    deadline = time.monotonic() + 4 * duration + 60
    if mode == 0:  # any moment of the run, start-up included
        proc.join(rng.uniform(0.0, duration))
    elif mode == 1:  # inside a checkpoint write: the n-th staged checkpoint has appeared
        staged = run / ".staging" / f"checkpoint-{2 * rng.randint(1, 4)}"
        while proc.is_alive() and not staged.exists() and time.monotonic() < deadline:
            time.sleep(0.0005)
        time.sleep(rng.uniform(0.0, 0.004))
    else:  # around a log write: once k steps are logged
        k = rng.randint(1, 8)
        log = run / "log.jsonl"
        while proc.is_alive() and time.monotonic() < deadline and \
                (not log.exists() or log.read_bytes().count(b"\n") < k):
            time.sleep(0.001)
        time.sleep(rng.uniform(0.0, 0.05))
    if not proc.is_alive():
        proc.join()
        return "finished"
    staging = run / ".staging"
    saving = staging.is_dir() and any(staging.iterdir())
    proc.kill()  # SIGKILL: no handler, no cleanup
    proc.join()
    return "during a checkpoint write" if saving else "between writes"


@pytest.mark.slow
def test_sigkill_at_random_moments_then_resume_loses_nothing(tmp_path):
    """Issue 11's kill test: rounds of start, SIGKILL at a random moment (a third aimed inside a checkpoint write), resume.

    At least 20 rounds, and more until 24 kills have landed (a kill drawn after the run ended
    does not count) with at least 5 of them inside a checkpoint write.

    Each round's run folder must then hold a log with steps 1-8 exactly once, with the rewards and
    losses of an uninterrupted run of the same seed; the resume must start from the latest complete
    checkpoint at the kill; no checkpoint-N folder may ever be incomplete; nothing outside the run
    folder may change. Every other round also kills the first resume. The tally is printed
    (pytest -s) and written to .artifacts/kill_test.json.
    """
    import multiprocessing
    import random
    import time

    import killrun
    from qae_lab.checkpoints import checkpoint_problems, checkpoints, latest_complete_checkpoint

    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["killrun", "torch", "trl", "qae_lab.cli", "qae_lab.trainer", "qae_lab.models",
                                "qae_lab.run", "qae_lab.data"])
    outputs = tmp_path / "outputs"
    outputs.mkdir()

    def launch(argv, cwd, name):
        proc = ctx.Process(target=killrun.run_cli, args=(argv, str(cwd), str(outputs / name)))
        proc.start()
        return proc

    def finish(argv, cwd, name):
        proc = launch(argv, cwd, name)
        proc.join(600)
        return proc.exitcode

    sets = [a for s in KILL_SETS for a in ("--set", s)]
    ref_dir = tmp_path / "reference"
    ref_dir.mkdir()
    t0 = time.monotonic()
    assert finish(["train", "--output-dir", "run", *sets], ref_dir, "reference.txt") == 0
    duration = time.monotonic() - t0
    ref = step_rows(read_log(ref_dir / "run"))
    assert [r["step"] for r in ref] == list(range(1, 9))

    rng = random.Random(20261201)
    tally = {"rounds": 0, "kills": 0, "survived": 0, "during a checkpoint write": 0, "between writes": 0,
             "finished before the kill": 0, "restarted (no checkpoint yet)": 0, "steps trained again": 0,
             "steps restored from a checkpoint": 0, "steps lost": 0}
    rnd = -1
    while rnd + 1 < MAX_ROUNDS and (rnd + 1 < KILL_ROUNDS or tally["kills"] < KILLS
                                    or tally["during a checkpoint write"] < KILLS_IN_A_SAVE):
        rnd += 1
        tally["rounds"] += 1
        work = tmp_path / f"round{rnd:02d}"
        work.mkdir()
        (work / "notes.txt").write_text("the user's own file")
        run = work / "run"
        outside = _outside(work, run)
        attempts = [launch(["train", "--output-dir", "run", *sets], work, f"{rnd:02d}-start.txt")]
        landed = _kill_at(attempts[0], run, rnd % 3, rng, duration)
        kills = [landed]
        if landed != "finished" and rnd % 2 and (latest := latest_complete_checkpoint(run)[0]) is not None:
            proc = launch(["train", "--resume", "run"], work, f"{rnd:02d}-resume-killed.txt")
            kills.append(_kill_at(proc, run, 0, rng, duration / 2))
        for where in kills:
            tally["finished before the kill" if where == "finished" else where] += 1
            tally["kills"] += where != "finished"
        assert all(not checkpoint_problems(path) for _, path in checkpoints(run)), f"round {rnd}: a half checkpoint"
        latest = latest_complete_checkpoint(run)[0]
        events_before = [r for r in read_log_rows(run) if r.get("event") == "resume"]
        if landed == "finished" and kills == ["finished"]:
            pass
        elif latest is None:
            assert finish(["train", "--resume", "run"], work, f"{rnd:02d}-resume.txt") == 2
            said = (outputs / f"{rnd:02d}-resume.txt").read_text()
            assert "no complete checkpoint" in said or "run config" in said, said[-500:]
            assert finish(["train", "--output-dir", "run", "--overwrite", *sets], work, f"{rnd:02d}-restart.txt") == 0
            tally["restarted (no checkpoint yet)"] += 1
        else:
            assert finish(["train", "--resume", "run"], work, f"{rnd:02d}-resume.txt") == 0, \
                (outputs / f"{rnd:02d}-resume.txt").read_text()[-2000:]
            events = [r for r in read_log(run) if r.get("event") == "resume"][len(events_before):]
            assert events[0]["step"] == int(latest.name.split("-")[1]), f"round {rnd}: not the latest checkpoint"
        rows = read_log(run)
        steps = step_rows(rows)
        tally["steps lost"] += len(set(range(1, 9)) - {r["step"] for r in steps})
        assert [r["step"] for r in steps] == list(range(1, 9)), f"round {rnd}: {[r['step'] for r in steps]}"
        for got, want in zip(steps, ref, strict=True):
            assert (got["reward"], got["loss"]) == (want["reward"], want["loss"]), f"round {rnd}, step {got['step']}"
        assert _outside(work, run) == outside, f"round {rnd}: files outside the run folder changed"
        events = [r for r in rows if r.get("event") == "resume"]
        tally["steps trained again"] += sum(len(e["superseded_steps"]) for e in events)
        tally["steps restored from a checkpoint"] += sum(len(e["restored_steps"]) for e in events)
        tally["survived"] += sum(w != "finished" for w in kills)
    tally["wall_s"] = round(time.monotonic() - t0, 1)
    print("\nkill test:", json.dumps(tally))
    artifacts = ROOT / ".artifacts"
    artifacts.mkdir(exist_ok=True)
    (artifacts / "kill_test.json").write_text(json.dumps(tally, indent=1) + "\n")
    assert tally["kills"] >= KILLS and tally["during a checkpoint write"] >= KILLS_IN_A_SAVE


def read_log_rows(run: Path) -> list[dict]:
    """The log's rows, or none when the kill came before the first line."""
    from qae_lab.runfolder import read_log_lines

    return read_log_lines(run / "log.jsonl")[0]


def test_a_bad_local_data_file_fails_the_dry_run_with_file_and_line(tmp_path, monkeypatch, capsys):
    _no_loading(monkeypatch)
    data = tmp_path / "gsm8k"
    data.mkdir()
    (data / "train.jsonl").write_text('{"question": "1+1?", "answer": "2 #### 2"}\n{"question": "2+2?"\n')
    (data / "test.jsonl").write_text('{"question": "1+1?", "answer": "2 #### 2"}\n')
    assert main(["train", "--preset", "qwen2.5-0.5b-gsm8k", "--set", f"gsm8k_path={data}", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert f"{data / 'train.jsonl'} line 2" in err and "not JSON" in err
