"""What a careless or hostile user tries on a run folder, with the real command line on tiny runs:
``--overwrite`` on a folder no run wrote, a second process on a folder being written, a checkpoint without its
optimizer, schedule or RNG state, a README.md of the user's beside the checkpoints, a resume that is refused or
fails while loading, recorded settings that send data out, and a config file's ``env:``. Each test names the
finding it checks. The faults a run is built for (Ctrl-C, kills, cut logs): tests/runs/test_pipeline_safety.py."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from testkit.interrupts import InterruptAt
from testkit.tiny_runs import TINY, no_loading, snapshot, tiny_sets

from qae_lab.runs import pipeline as pipeline
from qae_lab.__main__ import main
from qae_lab.runs.presets import build
from qae_lab.storage.folder import read_log, step_rows


@pytest.mark.slow
def test_overwrite_never_deletes_files_no_run_wrote(monkeypatch, capsys, tmp_path):
    # finding 1: `--output-dir data/embedded --overwrite` deleted the embedded model's config.json, then failed
    from qae_lab.task.models import embedded_dir

    model = Path(shutil.copytree(embedded_dir(), tmp_path / "embedded"))
    before = snapshot(model)
    no_loading(monkeypatch)
    for extra in (["--dry-run"], []):
        assert main(["train", "--output-dir", str(model), "--overwrite", *tiny_sets(), *extra]) == 2
        assert "--overwrite deletes only the files of a run" in capsys.readouterr().err
    assert snapshot(model) == before and sorted(p.name for p in model.iterdir()) == sorted(
        p.name for p in Path(embedded_dir()).iterdir()
    )


@pytest.mark.slow
def test_a_second_process_is_refused_while_a_run_writes_the_folder(monkeypatch, capsys, tmp_path):
    # finding 2: two `train` processes on one --output-dir both exited 0 and wrote one folder (steps 1, 2, 1, 2, ...)
    import subprocess
    import sys

    out = tmp_path / "run"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from qae_lab.storage.folder import RunLock; "
            "lock = RunLock(sys.argv[1]).acquire(); print('held', flush=True); time.sleep(600)",
            str(out),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"  # the other process holds the folder now: no timing
        no_loading(monkeypatch)
        for extra in (["--dry-run"], []):
            assert main(["train", "--output-dir", str(out), *tiny_sets(), *extra]) == 2
            err = capsys.readouterr().err
            assert f"is being written by process {holder.pid}" in err and "one run folder takes one process" in err
        monkeypatch.setattr(
            "qae_lab.storage.folder.RunLock.busy", lambda self: None
        )  # planned before the other took it:
        assert main(["train", "--output-dir", str(out), *tiny_sets()]) == 2  # the claim itself refuses
        assert f"is being written by process {holder.pid}" in capsys.readouterr().err
        assert sorted(p.name for p in out.iterdir()) == [".qae_lab-run.lock"]  # the holder's name only: nothing written
    finally:
        holder.kill()
        holder.wait()
    # the race itself: both plan the folder as fresh before either writes; the second claim is refused
    from qae_lab.storage.resume import claim, plan_run

    first, second = plan_run(tmp_path / "race"), plan_run(tmp_path / "race")
    lock = claim(first)
    with pytest.raises(Exception, match="is being written by process"):
        claim(second)
    lock.release()
    with pytest.raises(Exception, match="already holds a run"):  # and after the first has let go: its marker
        claim(second)


@pytest.mark.slow
def test_a_checkpoint_without_its_optimizer_schedule_or_rng_is_skipped_with_the_reason(saved_run, tmp_path, capsys):
    # finding 3: `--resume RUN --max_steps 3` trained on with a fresh optimizer and schedule, and said nothing
    run = Path(shutil.copytree(saved_run, tmp_path / "run"))
    for name in ("optimizer.pt", "scheduler.pt", "rng_state.pth"):
        (run / "checkpoint-4" / name).unlink()
    assert main(["train", "--resume", str(run), "--set", "max_steps=6", "--dry-run"]) == 2
    err = capsys.readouterr().err  # the run finished at step 4: checkpoint-2 cannot carry it on
    assert "checkpoint-4 skipped: optimizer.pt is missing (Adam's moments); scheduler.pt is missing" in err
    assert "finished at step 4, after checkpoint-2" in err
    # an interrupted run (no end row): the resume takes checkpoint-2, says which and why, and trains 3-4 on its
    # restored optimizer and schedule, so the learning rates are the uninterrupted run's
    log = run / "log.jsonl"
    rows = read_log(log)
    log.write_text("".join(json.dumps(r) + "\n" for r in rows if "train_runtime" not in r))
    assert main(["train", "--resume", str(run), "--dry-run"]) == 0
    notes = json.loads(capsys.readouterr().out)["notes"]
    assert notes[0].startswith("checkpoint-4 skipped: optimizer.pt is missing")
    assert notes[1].startswith(f"resuming {run / 'checkpoint-2'} (step 2)") and "steps 3, 4 were logged" in notes[1]
    assert main(["train", "--resume", str(run)]) == 0
    lr = {r["step"]: r["learning_rate"] for r in step_rows(read_log(run))}
    assert lr == {r["step"]: r["learning_rate"] for r in step_rows(rows)}


@pytest.mark.slow
def test_a_users_readme_in_the_run_folder_survives_every_checkpoint(tmp_path, capsys):
    # finding 4: TRL's model card overwrote a README.md the user keeps in the output folder, at every checkpoint
    out = tmp_path / "run"
    out.mkdir()
    (out / "README.md").write_text("# my notes on this run\n")
    run, cfg = build(
        "cpu-demo", [*TINY, "max_steps=2", "save_strategy=steps", "save_steps=2", "evaluate=false"], output_dir=str(out)
    )
    result = pipeline.train(run, cfg, preset="cpu-demo", callbacks=[InterruptAt(1)])  # the Ctrl-C checkpoint-1
    assert result["checkpoint"] == str(out / "checkpoint-1")
    assert main(["train", "--resume", str(out)]) == 0  # the scheduled checkpoint-2, then the end
    assert (out / "README.md").read_text() == "# my notes on this run\n"
    for step in (1, 2):  # TRL's card went with each checkpoint, staged and published with it
        assert "TRL" in (out / f"checkpoint-{step}" / "README.md").read_text()


class _Gadget:
    def __reduce__(self):  # what a crafted pickle carries
        return (print, ("a crafted pickle ran",))


@pytest.mark.slow
def test_a_resume_refused_or_failing_while_loading_leaves_the_folder_byte_for_byte(
    saved_run, tmp_path, capsys, monkeypatch
):
    # finding 5: model/ and eval_after.json had moved to finished-step2/ before the failing load
    import torch

    run = Path(shutil.copytree(saved_run, tmp_path / "run"))
    before = snapshot(run)
    from transformers import Trainer

    def disk_gone(self, checkpoint):
        raise OSError("the disk went away while the optimizer loaded")

    monkeypatch.setattr(Trainer, "_load_optimizer_and_scheduler", disk_gone)
    with pytest.raises(OSError, match="disk went away"):
        main(["train", "--resume", str(run), "--set", "max_steps=6"])
    assert snapshot(run) == before and (run / "model").is_dir() and (run / "eval_after.json").is_file()
    monkeypatch.undo()
    # finding 11: a crafted optimizer.pt, refused before anything loads, with a named error (exit 2, not 1)
    torch.save({"state": _Gadget()}, run / "checkpoint-4" / "optimizer.pt")
    before = snapshot(run)
    assert main(["train", "--resume", str(run), "--set", "max_steps=6"]) == 2
    captured = capsys.readouterr()
    assert "optimizer.pt holds more than tensors and plain values, which a resume never unpickles" in captured.err
    assert "a crafted pickle ran" not in captured.out + captured.err
    assert snapshot(run) == before


@pytest.mark.slow
def test_a_resume_sends_nothing_out_on_recorded_settings_alone(saved_run, tmp_path, capsys, monkeypatch):
    # finding 6: a shared run folder whose recorded settings turn on push_to_hub, hub_model_id and a tracker resumed
    # with all three, and the resume notes did not mention them
    run = Path(shutil.copytree(saved_run, tmp_path / "run"))
    config = json.loads((run / "config.json").read_text())
    recorded = ["push_to_hub=true", "hub_model_id=someone/else", "report_to=wandb"]
    config["run"]["build"]["sets"] += recorded
    config["trainer"].update(push_to_hub=True, hub_model_id="someone/else", report_to=["wandb"])
    (run / "config.json").write_text(json.dumps(config))
    before = snapshot(run)
    no_loading(monkeypatch)
    for extra in (["--dry-run"], []):
        assert main(["train", "--resume", str(run), "--set", "max_steps=6", *extra]) == 2
        err = capsys.readouterr().err
        assert (
            "recorded settings that send data out (push_to_hub=True, hub_model_id='someone/else', report_to=['wandb'])"
            in err
            and "--set push_to_hub=true --set hub_model_id=someone/else" in err
        )
    assert snapshot(run) == before
    # named again: taken, and said; switched off: taken off
    assert (
        main(
            [
                "train",
                "--resume",
                str(run),
                "--set",
                "max_steps=6",
                *[a for s in recorded for a in ("--set", s)],
                "--dry-run",
            ]
        )
        == 0
    )
    said = json.loads(capsys.readouterr().out)
    assert "sends data out: push_to_hub=True, hub_model_id='someone/else', report_to=['wandb']" in said["notes"]
    assert (
        main(
            [
                "train",
                "--resume",
                str(run),
                "--set",
                "max_steps=6",
                "--set",
                "push_to_hub=false",
                "--set",
                "report_to=none",
                "--dry-run",
            ]
        )
        == 0
    )
    said = json.loads(capsys.readouterr().out)
    assert (
        not any(n.startswith("sends data out") for n in said["notes"])
        and "changed: max_steps 4 -> 6" in said["notes"][-1]
    )


@pytest.mark.slow
def test_a_config_files_env_is_allow_listed_recorded_and_re_applied_on_resume(tmp_path, capsys, monkeypatch):
    # finding 10: `env:` set any variable (LD_PRELOAD, PYTHONPATH) even on --dry-run, was not recorded, so --resume ran
    # without it, and HF_HOME / HF_HUB_OFFLINE set there had no effect
    import os

    no_loading(monkeypatch)
    for name, value, message in (
        ("LD_PRELOAD", "/tmp/evil.so", "is not among the variables a file may set"),
        ("PYTHONPATH", "/tmp/evil", "is not among the variables a file may set"),
        (
            "HF_HOME",
            "/tmp/elsewhere",
            "before a config file is read, so setting it here would change nothing: set it in the shell",
        ),
        ("HF_TOKEN", "hf_x", "carries a credential"),
        ("SOME_OTHER", "1", "is not among the variables a file may set"),
    ):
        monkeypatch.delenv(name, raising=False)
        bad = tmp_path / f"{name}.yaml"
        bad.write_text(f"preset: cpu-demo\nenv:\n  {name}: {value}\n")
        for extra in (["--dry-run"], []):
            assert main(["train", "--config", str(bad), "--output-dir", str(tmp_path / "r"), *extra]) == 2
            assert message in capsys.readouterr().err, name
        assert name not in os.environ and not (tmp_path / "r").exists()
    monkeypatch.undo()
    monkeypatch.delenv("WANDB_PROJECT", raising=False)
    good = tmp_path / "run.yaml"
    good.write_text("preset: cpu-demo\nenv:\n  WANDB_PROJECT: qae-workshop\n")
    out = tmp_path / "run"
    args = [f"--{s.split('=')[0]}={s.split('=')[1]}" for s in [*TINY, "evaluate=false", "max_steps=1"]]
    assert (
        main(
            [
                "train",
                "--config",
                str(good),
                "--output-dir",
                str(out),
                "--save_strategy",
                "steps",
                "--save_steps",
                "1",
                *args,
            ]
        )
        == 0
    )
    assert "env: WANDB_PROJECT=qae-workshop (read by Weights & Biases" in capsys.readouterr().out
    assert json.loads((out / "config.json").read_text())["run"]["build"]["env"] == {"WANDB_PROJECT": "qae-workshop"}
    monkeypatch.delenv("WANDB_PROJECT")  # a new shell: the resume sets it again from the run's record
    assert main(["train", "--resume", str(out), "--set", "max_steps=2", "--dry-run"]) == 0
    assert json.loads(capsys.readouterr().out)["env"] == {"WANDB_PROJECT": "qae-workshop"}
    assert os.environ["WANDB_PROJECT"] == "qae-workshop"
    config = json.loads((out / "config.json").read_text())
    config["run"]["build"]["env"] = {"LD_PRELOAD": "/tmp/evil.so"}  # a tampered record is checked as a file is
    (out / "config.json").write_text(json.dumps(config))
    assert main(["train", "--resume", str(out), "--set", "max_steps=2", "--dry-run"]) == 2
    assert "(the run's env): env: LD_PRELOAD is not among the variables a file may set" in capsys.readouterr().err
