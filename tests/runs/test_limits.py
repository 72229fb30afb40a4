"""A run's settings checked together before anything loads, as a careless user breaks them: a size no machine holds
(``qae_lab.runs.limits.limits``), fewer training problems than one step draws, a reward weight per reward function,
fewer problems than levels; and a run that trains fewer steps than asked never writes itself up as finished
(``qae_lab.runs.pipeline.train``). Each test names the finding it checks and the bug planted to see it fail."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from testkit.tiny_runs import TINY, no_loading
from transformers import TrainerCallback

from qae_lab.__main__ import main
from qae_lab.lab.report import write_report
from qae_lab.runs import limits, pipeline
from qae_lab.runs.presets import PRESETS, build
from qae_lab.storage.folder import MODEL_DIR
from qae_lab.train.regime_eval import SPLIT_DRAWS

REGIME = {"regime_batch": pipeline.REGIME_BATCH, "regime_draws": SPLIT_DRAWS}


def _refused(sets: list[str], capsys, tmp_path: Path, preset: str = "cpu-demo") -> str:
    """The error of a dry run and of a real run of ``sets`` (both refused with status 2, the folder untouched)."""
    errors = []
    for extra in (["--dry-run"], []):
        argv = [
            "train",
            "--preset",
            preset,
            "--output-dir",
            str(tmp_path / "r"),
            *[a for s in sets for a in ("--set", s)],
        ]
        assert main([*argv, *extra]) == 2
        errors.append(capsys.readouterr().err)
    assert errors[0] == errors[1] and errors[0].startswith("qae-lab: error: ")
    assert not (tmp_path / "r").exists()
    return errors[0]


def _largest(sets: list[str], name: str, preset: str = "cpu-demo"):
    return limits.limits(*build(preset, sets, output_dir="unused"), **REGIME)[name][0]


@pytest.mark.parametrize(
    "sets, name, value",
    [
        # n_train=10**12 grew past 2 GB in 30 s drawing problems, after a dry run that passed
        (["n_train=1000000000000"], "n_train", 1000000000000),
        # num_generations = the batch = 10**8 reached 3.5 GB, after a dry run that passed
        (["num_generations=100000000", "per_device_train_batch_size=100000000"], "num_generations", 100000000),
        (["num_generations=100000000", "per_device_train_batch_size=100000000"], "per_device_train_batch_size", 10**8),
        # lora_r=10**11 gave a raw allocator traceback once the model had loaded
        (["lora=true", "lora_r=100000000000"], "lora_r", 100000000000),
    ],
)
def test_each_size_finding_is_refused_before_anything_loads_naming_field_value_and_bound(
    sets, name, value, monkeypatch, capsys, tmp_path
):
    # planted: check_run not called in run_plan.plan -> status 0 on the dry run (and the real run loads the model);
    # the bound left out of the message (at most ...) -> the second assert fails
    no_loading(monkeypatch)
    started = time.perf_counter()
    err = _refused(sets, capsys, tmp_path)
    assert f"{name}={value} (at most {_largest(sets, name)}:" in err, err
    assert time.perf_counter() - started < 30  # no problem drawn, no model loaded: seconds, whatever the sizes


@pytest.mark.parametrize(
    "preset, name, extra",
    [
        ("cpu-demo", "n_train", []),
        ("cpu-demo", "n_eval", []),
        ("qwen2.5-0.5b-gsm8k", "n_train", []),
        ("qwen2.5-0.5b-gsm8k", "n_eval", []),
        ("cpu-demo", "lora_r", ["lora=true"]),
        ("qwen2.5-1.5b-gsm8k", "lora_r", []),
        ("cpu-demo", "max_completion_length", []),
        ("cpu-demo", "eval_samples", []),
        ("cpu-sums", "eval_batch_size", []),
        ("qwen2.5-3b-gsm8k", "eval_max_new_tokens", ["eval_max_new_tokens=100"]),
        ("cpu-demo", "regime_eval_samples", []),
        ("cpu-demo", "entropy_top_k", ["entropy_top_k=4"]),
    ],
)
def test_the_largest_accepted_value_is_accepted_and_one_more_is_refused(preset, name, extra, monkeypatch):
    # planted: `value < largest` for `value <= largest` in over_limits: every case fails
    monkeypatch.delenv("QAE_LAB_GSM8K_DIR", raising=False)
    largest = _largest(extra, name, preset)
    for value, named in ((largest, False), (largest + 1, True)):
        said = limits.over_limits(*build(preset, [*extra, f"{name}={value}"], output_dir="unused"), **REGIME)
        assert any(line.startswith(f"{name}={value} (at most {largest}:") for line in said) == named, said


@pytest.mark.parametrize(
    "name, largest",
    [
        ("max_steps", 100_000),
        ("save_total_limit", 100_000),
        ("gradient_accumulation_steps", 1_024),
        ("num_iterations", 1_024),
        ("dynamic_sampling_max_rounds", 1_024),
        ("dataloader_prefetch_factor", 1_024),
        ("dataloader_num_workers", 1_024),
        ("torch_threads", 1_024),
    ],
)
def test_caps_that_depend_on_nothing_else_are_the_settings_own(name, largest):
    # held by QAEConfig / RunArgs themselves, so a config built in Python is refused too
    # planted: the cap missing from config._SETTING_RANGES (or RunArgs): one more is accepted
    build(
        "cpu-demo",
        [f"{name}={largest}", "dataloader_num_workers=1"] if "prefetch" in name else [f"{name}={largest}"],
        output_dir="unused",
    )
    with pytest.raises(ValueError, match=rf"{name} must .*{largest}"):
        build("cpu-demo", [f"{name}={largest + 1}"], output_dir="unused")


def test_memory_bounds_sit_where_the_estimate_crosses_2_tib():
    # planted: MAX_PEAK in GiB instead of TiB, or the bisection returning one below its last fit: the crossing moves
    run, cfg = build("qwen2.5-1.5b-gsm8k", output_dir="unused")
    for name in ("max_completion_length", "eval_samples", "per_device_eval_batch_size"):
        largest = limits.limits(run, cfg, **REGIME)[name][0]
        at = limits.run_peak(run, cfg, **REGIME, **{name: largest})
        past = limits.run_peak(run, cfg, **REGIME, **{name: largest + 1})
        assert at["peak"] <= 2 * 2**40 < past["peak"], name


def test_hand_counted_bounds_of_cpu_demo():
    # the embedded model: hidden 128 (q, o: 128 x 128; k, v: 128 x 64; gate, up, down: 128 <-> 384), vocabulary 470;
    # with max_steps=-1 an epoch is 2000 // (64 / 8) = 250 generation batches of one optimizer step each
    # planted: lora_r from max(in, out) (384), or the epoch's count without the prompts a batch (2000 steps)
    run, cfg = build("cpu-demo", ["lora=true", "entropy_top_k=5", "max_steps=-1"], output_dir="unused")
    bounds = limits.limits(run, cfg, **REGIME)
    assert bounds["lora_r"][0] == 128 and bounds["entropy_top_k"][0] == 470
    assert bounds["num_train_epochs"][0] == 100_000 / 250 and "250 steps an epoch" in bounds["num_train_epochs"][1]
    assert bounds["n_train"][0] == bounds["n_eval"][0] == 100_000
    said = limits.over_limits(
        *build("cpu-demo", ["max_steps=-1", "num_train_epochs=401"], output_dir="unused"), **REGIME
    )
    assert said and said[0].startswith("num_train_epochs=401.0 (at most 400:")


def test_gsm8k_counts_its_splits_and_a_local_folder_its_files(monkeypatch, capsys, tmp_path):
    # planted: the train and test sizes swapped -> n_eval=1320 accepted; a local folder bounded by the Hub's sizes ->
    # the last dry run refused
    no_loading(monkeypatch)
    monkeypatch.delenv("QAE_LAB_GSM8K_DIR", raising=False)
    assert "n_train=7474 (at most 7473:" in _refused(["n_train=7474"], capsys, tmp_path, "qwen2.5-0.5b-gsm8k")
    assert "n_eval=1320 (at most 1319:" in _refused(["n_eval=1320"], capsys, tmp_path, "qwen2.5-0.5b-gsm8k")
    data = tmp_path / "gsm8k"
    data.mkdir()
    rows = "".join(json.dumps({"question": f"{i} + 1?", "answer": f"#### {i + 1}"}) + "\n" for i in range(9000))
    for split in ("train", "test"):
        (data / f"{split}.jsonl").write_text(rows)
    argv = [
        "train",
        "--preset",
        "qwen2.5-0.5b-gsm8k",
        "--set",
        f"gsm8k_path={data}",
        "--output-dir",
        str(tmp_path / "x"),
    ]
    assert main([*argv, "--set", "n_train=9000", "--set", "n_eval=2000", "--dry-run"]) == 0
    capsys.readouterr()
    assert main([*argv, "--set", "n_train=9001", "--dry-run"]) == 2
    assert "n_train must be an int [1, 9000]" in capsys.readouterr().err


def test_a_model_folder_bounds_lora_r_by_its_own_hidden_size(monkeypatch, capsys, tmp_path):
    # the architecture is read from the folder's config.json, nothing loaded; a folder without one is bounded as the
    # smallest model here (planted: SMALLEST_ARCH for every folder -> lora_r=65 accepted)
    from qae_lab.task.models import embedded_dir

    no_loading(monkeypatch)
    config = json.loads((embedded_dir() / "config.json").read_text())
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({**config, "hidden_size": 64, "intermediate_size": 96}))
    assert limits.model_arch(str(model)).hidden == 64
    err = _refused([f"model={model}", "lora=true", "lora_r=65"], capsys, tmp_path)
    assert "lora_r=65 (at most 64: the widest rank of an adapted layer of the model" in err
    (model / "config.json").unlink()
    assert limits.model_arch(str(model)) is None  # unknown: the memory bounds count the embedded model's
    assert _largest([f"model={model}"], "max_completion_length") == _largest([], "max_completion_length")


def test_every_preset_is_within_every_bound():
    # planted: a bound tighter than a preset (MAX_PEAK of 2 GiB, MAX_DRAWN of 1,000) -> a preset refused
    for name in PRESETS:
        pipeline.check_run(*build(name, output_dir="unused"))


def test_two_settings_too_large_only_together_are_named_with_their_phase():
    # neither of eval_batch_size and eval_samples alone can be lowered enough: the phase and its settings are named
    # (planted: the fallback line left out -> the run refused with no setting named)
    run, cfg = build("cpu-demo", ["eval_batch_size=100000000", "eval_samples=100000000"], output_dir="unused")
    (said,) = limits.over_limits(run, cfg, **REGIME)
    assert "in its evaluation phase" in said and "eval_batch_size=100000000, eval_samples=100000000" in said
    # a setting's bound is that of the phases it enters: the evaluation's stand while the training step is too large
    # (planted: each bound from the whole peak -> eval_samples' bound 0)
    run, cfg = build("cpu-demo", ["per_device_train_batch_size=100000000"], output_dir="unused")
    assert limits.limits(run, cfg, **REGIME)["eval_samples"][0] == _largest([], "eval_samples") > 0


def test_fewer_training_problems_than_a_step_draws_is_refused_naming_what_to_change(monkeypatch, capsys, tmp_path):
    # finding: n_train=4 with 8 prompts a step (64 completions / 8) trained 0 of 3 steps, exited 0 and wrote model/
    # and report.html (planted: the check compares n_train with generation_batch_size (64) -> n_train=8 refused;
    # or it is left out -> status 0)
    no_loading(monkeypatch)
    err = _refused(["n_train=4", "max_steps=3"], capsys, tmp_path)
    assert "n_train=4 is fewer than the 8 prompts one generation batch draws" in err
    assert "generation_batch_size 64 / num_generations 8" in err and "per_device_train_batch_size" in err
    assert main(["train", "--set", "n_train=8", "--output-dir", str(tmp_path / "ok"), "--dry-run"]) == 0


def test_reward_weights_are_one_per_reward_function_in_the_dry_run(monkeypatch, capsys, tmp_path):
    # finding: reward_weights=[1,1] with one reward function passed the dry run; TRL refused it after the model loaded
    # (planted: the length check left out -> status 0; compared with the weights' sum -> [0.5,0.5] accepted)
    no_loading(monkeypatch)
    for weights in ("[1,1]", "[0.5,0.5]", "[1,2,3]"):
        err = _refused([f"reward_weights={weights}"], capsys, tmp_path)
        assert (
            f"reward_weights holds {len(json.loads(weights))} weights, but the run trains on 1 reward function" in err
        )
    assert main(["train", "--set", "reward_weights=[2]", "--output-dir", str(tmp_path / "ok"), "--dry-run"]) == 0


def test_fewer_problems_than_levels_is_refused_on_the_synthetic_tasks(monkeypatch, capsys, tmp_path):
    # the problems cycle through the levels: n_eval=2 with levels 2-5 evaluated levels 2 and 3 only
    # (planted: the check left out -> status 0; made whatever the evaluation -> evaluate=false refused)
    no_loading(monkeypatch)
    err = _refused(["n_eval=2"], capsys, tmp_path)
    assert "n_eval=2 is fewer than the 4 levels [2, 3, 4, 5]" in err and "levels [4, 5] would get none" in err
    for fine in (["levels=[2,3]"], ["evaluate=false"]):  # as many as the levels; or no held-out problem used
        argv = ["train", "--set", "n_eval=2", *[a for s in fine for a in ("--set", s)], "--output-dir", str(tmp_path)]
        assert main([*argv, "--dry-run"]) == 0


class StopAt(TrainerCallback):
    """Ends training as step ``step`` ends (as a callback that stops a run early does): no Ctrl-C, no checkpoint."""

    def __init__(self, step: int):
        self.step = step

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            control.should_training_stop = True


@pytest.mark.slow(seconds=25)
def test_a_run_that_trains_fewer_steps_than_asked_writes_no_model_and_no_finished_report(monkeypatch, capsys, tmp_path):
    # finding: n_train=4 with 8 prompts a step trained 0 of 3 steps, exited 0 and wrote model/ and report.html like a
    # finished run. With the plan's check out of the way (a notebook's own trainer, a sampler that runs dry), the run
    # ends with 0 steps: status 1, no model/, no report page, no "after" evaluation. Stopped at step 1 of 3 by a
    # callback: no model/, a report page marked as not finished.
    # (planted: `finished` taken as `not outcome.interrupted` -> model/ and report.html written, status 0)
    monkeypatch.setattr("qae_lab.runs.run_plan.check_run", lambda run, cfg: None)
    out = tmp_path / "empty"
    sets = [*TINY, "max_steps=3", "n_train=1", "levels=[2]", "n_eval=2", "save_model=true"]
    assert main(["train", "--output-dir", str(out), *[a for s in sets for a in ("--set", s)]]) == 1
    assert "trained 0 of the 3 steps it was asked for, so it is not finished" in capsys.readouterr().out
    written = {p.name for p in out.iterdir()}
    assert {MODEL_DIR, "report.html", "eval_after.json"}.isdisjoint(written) and "eval_before.json" in written

    out = tmp_path / "stopped"
    run, cfg = build("cpu-demo", [*TINY, "max_steps=3", "evaluate=false"], output_dir=str(out))
    result = pipeline.train(run, cfg, preset="cpu-demo", callbacks=[StopAt(1)], report=write_report)
    assert (result["global_step"], result["finished"], result["interrupted"]) == (1, False, False)
    assert not (out / MODEL_DIR).exists() and "1 / 3 (stopped early: not finished)" in (out / "report.html").read_text()


def test_disk_and_evaluation_time_are_bounded_in_the_dry_run(capsys):
    # found: 100,000 full-model checkpoints of the 1.5B preset (about 1,400 TiB) and an evaluation of 10^8 completions
    # passed the dry run. planted: the checks removed from check_run, or the checkpoint count ignoring save_steps
    from qae_lab.runs.cli import main

    for preset, sets, said in (
        (
            "qwen2.5-1.5b-gsm8k",
            ["lora=false", "save_strategy=steps", "save_steps=1", "max_steps=100000", "save_total_limit=none"],
            "the run would keep 100000 checkpoints of about 14.4 GiB each",
        ),
        ("cpu-demo", ["n_eval=100000", "eval_samples=1000"], "would sample 100,000,000 completions"),
        (
            "cpu-demo",
            ["regime_eval_steps=1", "n_eval=100000", "regime_eval_prompts=100000", "regime_eval_samples=100"],
            "the regime evaluation's start split",
        ),
    ):
        assert main(["train", "--preset", preset, *[a for s in sets for a in ("--set", s)], "--dry-run"]) == 2
        assert said in capsys.readouterr().err
    # kept within the bound: a LoRA run saving every step keeps small checkpoints; save_total_limit bounds the rest
    ok = ["lora=false", "save_strategy=steps", "save_steps=1", "max_steps=100000", "save_total_limit=10"]
    assert main(["train", "--preset", "qwen2.5-1.5b-gsm8k", *[a for s in ok for a in ("--set", s)], "--dry-run"]) == 0
    capsys.readouterr()
