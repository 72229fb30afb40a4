"""A run folder loses nothing, whatever happens to the run: Ctrl-C then ``--resume``, a second
Ctrl-C during the save, a new run refused over another one (``--overwrite`` replaces it), a resume
with changed settings or an old checkpoint refused, a finished run extended as an event, damaged
checkpoint files named, a cut log line restored, and SIGKILL at random moments. Tiny real runs of the
command line (tests/testkit/tiny_runs.py; ``saved_run``: tests/conftest.py); which start each makes is
:mod:`qae_lab.storage.resume`'s plan (tests/storage/test_resume.py). What a careless or hostile user tries: tests/runs/test_pipeline_trust.py."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from testkit.interrupts import InterruptAt
from testkit.tiny_runs import TINY, no_loading, snapshot, tiny_sets

from qae_lab.lab.report import write_report
from qae_lab.runs import pipeline as pipeline
from qae_lab.__main__ import main
from qae_lab.runs.presets import build
from qae_lab.storage.folder import read_log, step_rows

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_ctrl_c_then_resume_from_the_run_folder(tmp_path, capsys):
    out = tmp_path / "run"
    run, cfg = build("cpu-demo", [*TINY, "max_steps=4"], output_dir=str(out))
    result = pipeline.train(
        run,
        cfg,
        preset="cpu-demo",
        command="python -m qae_lab train ...",
        callbacks=[InterruptAt(2)],
        report=write_report,  # the page the command line draws
    )
    assert result["interrupted"] and result["global_step"] == 2 and result["after"] is None
    assert Path(result["checkpoint"]) == out / "checkpoint-2"
    assert "--resume" in capsys.readouterr().out  # tells how to continue
    assert [r["step"] for r in step_rows(read_log(out))] == [1, 2] and (out / "report.html").exists()
    before = (out / "eval_before.json").read_text()

    assert main(["train", "--resume", str(out), *tiny_sets(["max_steps=4"])]) == 0  # output dir = the run folder
    assert [r["step"] for r in step_rows(read_log(out))] == [1, 2, 3, 4]
    assert (out / "eval_before.json").read_text() == before  # the "before" evaluation is not redone
    assert (out / "eval_after.json").exists()


@pytest.mark.slow
def test_a_new_run_never_overwrites_a_run_folder(saved_run, monkeypatch, capsys, tmp_path):
    before = snapshot(saved_run)
    no_loading(monkeypatch)
    for extra in ([], ["--dry-run"]):
        assert main(["train", "--output-dir", str(saved_run), *tiny_sets(), *extra]) == 2
        err = capsys.readouterr().err
        assert "already holds a run" in err and "--resume" in err and "--overwrite" in err
    assert snapshot(saved_run) == before  # nothing cut, nothing replaced
    copy = Path(shutil.copytree(saved_run, tmp_path / "copy"))
    (copy / "my_notes.txt").write_text("keep me")
    monkeypatch.undo()
    assert main(["train", "--output-dir", str(copy), "--overwrite", *tiny_sets(["evaluate=false"])]) == 0
    assert "deleting the previous run's" in capsys.readouterr().out
    assert (copy / "my_notes.txt").read_text() == "keep me" and not (copy / "eval_before.json").exists()
    assert [r["step"] for r in step_rows(read_log(copy))] == [1, 2]


@pytest.mark.slow
@pytest.mark.parametrize(
    "change", [["--set", "quantile_k=0.6"], ["--method", "mean"], ["--set", "n_train=32"], ["--set", "seed=7"]]
)
def test_resume_refuses_changed_settings_and_touches_nothing(saved_run, change, monkeypatch, capsys):
    before = snapshot(saved_run)
    no_loading(monkeypatch)
    assert main(["train", "--resume", str(saved_run / "checkpoint-4"), *change]) == 2
    err = capsys.readouterr().err
    assert "other settings than the run was trained with" in err and change[1].split("=")[0] in err + "baseline"
    assert main(["train", "--resume", str(saved_run / "checkpoint-2")]) == 2  # older than checkpoint-4
    assert "checkpoint-2 is not the run's latest checkpoint (checkpoint-4 is)" in capsys.readouterr().err
    assert snapshot(saved_run) == before


@pytest.mark.slow
def test_extending_a_finished_run_is_an_event_not_a_rewrite(saved_run, tmp_path, capsys):
    run = Path(shutil.copytree(saved_run, tmp_path / "run"))
    first = read_log(run)
    after = (run / "eval_after.json").read_bytes()
    assert main(["train", "--resume", str(run), "--set", "max_steps=6"]) == 0
    assert "changed: max_steps 4 -> 6" in capsys.readouterr().out
    rows = read_log(run)
    assert rows[: len(first)] == first  # every logged line kept, in place
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
    done = snapshot(run)
    assert main(["train", "--resume", str(run)]) == 0  # again, as it now is: nothing left to train
    assert "resuming" in capsys.readouterr().out
    assert [r["step"] for r in step_rows(read_log(run))] == [1, 2, 3, 4, 5, 6]
    assert all(
        snapshot(run)[name] == data
        for name, data in done.items()
        if name.startswith(("model/", "eval_after", "finished-step4/"))
    )  # kept, not redone


@pytest.mark.slow
def test_a_second_ctrl_c_during_the_save_leaves_no_half_checkpoint(tmp_path, capsys, monkeypatch):
    from qae_lab.train.trainer import QAETrainer

    out = tmp_path / "run"
    run, cfg = build(
        "cpu-demo", [*TINY, "max_steps=4", "evaluate=false", "save_strategy=steps", "save_steps=2"], output_dir=str(out)
    )
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
def test_damaged_checkpoint_files_are_named_and_the_resume_takes_the_latest_complete_one(
    saved_run, tmp_path, capsys, monkeypatch
):
    run = Path(shutil.copytree(saved_run, tmp_path / "run"))
    no_loading(monkeypatch)
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
    assert pipeline.train(run, cfg, preset="cpu-demo", callbacks=[InterruptAt(4)])["checkpoint"] == str(
        out / "checkpoint-4"
    )
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

KILL_STEPS = 6  # a checkpoint every 2 steps: the kills land in start-up, before, between and after checkpoints
# one prompt x 4 completions a step: what is tested is the run folder, not the learning
KILL_SETS = [
    f"max_steps={KILL_STEPS}",
    "save_strategy=steps",
    "save_steps=2",
    "per_device_train_batch_size=4",
    "num_generations=4",
    "n_train=16",
    "evaluate=false",
    "disable_tqdm=true",
    "torch_threads=1",
]
# at least 12 rounds, until 12 kills have landed, 4 of them in a save, and 6 rounds resumed from a checkpoint
KILL_ROUNDS, KILLS, KILLS_IN_A_SAVE, RESUMES, MAX_ROUNDS = 12, 12, 4, 6, 48


def _outside(work: Path, run: Path) -> dict[str, bytes]:
    """Every file under ``work`` that is not in the run folder."""
    return {
        str(p.relative_to(work)): p.read_bytes()
        for p in sorted(work.rglob("*"))
        if p.is_file() and run not in p.parents
    }


def _kill_at(proc, run: Path, mode: int, rng, duration: float) -> str:
    """SIGKILL ``proc`` at a moment drawn by ``mode``; returns where it landed."""
    import time

    deadline = time.monotonic() + 4 * duration + 60
    if mode == 0:  # any moment of the run, start-up included
        proc.join(rng.uniform(0.0, duration))
    elif mode == 1:  # inside a checkpoint write: the n-th staged checkpoint has appeared
        staged = run / ".staging" / f"checkpoint-{2 * rng.randint(1, KILL_STEPS // 2)}"
        while proc.is_alive() and not staged.exists() and time.monotonic() < deadline:
            time.sleep(0.0005)
        time.sleep(rng.uniform(0.0, 0.004))
    else:  # around a log write: once k steps are logged
        k = rng.randint(1, KILL_STEPS)
        log = run / "log.jsonl"
        while (
            proc.is_alive() and time.monotonic() < deadline and (not log.exists() or log.read_bytes().count(b"\n") < k)
        ):
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


@pytest.mark.slow(seconds=75)
def test_sigkill_at_random_moments_then_resume_loses_nothing(tmp_path):
    """The kill test: rounds of start, SIGKILL at a random moment (a third aimed inside a checkpoint write), resume.

    At least 12 rounds, and more until 12 kills have landed (a kill drawn after the run ended
    does not count) with at least 4 of them inside a checkpoint write, and until 6 rounds were
    resumed from a checkpoint (the others restart: killed before the first checkpoint). Each round
    draws the kill's moment afresh: any moment of the run (start-up included), inside the n-th
    checkpoint write, or around the k-th log line, in turn.

    Each round's run folder must then hold a log with steps 1-6 exactly once, with the rewards and
    losses of an uninterrupted run of the same seed; the resume must start from the latest complete
    checkpoint at the kill; no checkpoint-N folder may ever be incomplete; nothing outside the run
    folder may change. Every other round also kills the first resume. The tally is printed
    (pytest -s) and written to .artifacts/kill_test.json.
    """
    import multiprocessing
    import random
    import time

    import killrun
    from qae_lab.storage.resume import checkpoint_problems, checkpoints, latest_complete_checkpoint

    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(
        [
            "killrun",
            "torch",
            "trl",
            "qae_lab.runs.cli",
            "qae_lab.train.trainer",
            "qae_lab.task.models",
            "qae_lab.runs.pipeline",
            "qae_lab.task.data",
            "qae_lab.lab.report",
        ]
    )
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
    assert [r["step"] for r in ref] == list(range(1, KILL_STEPS + 1))

    rng = random.Random(20261201)
    tally = {
        "rounds": 0,
        "kills": 0,
        "survived": 0,
        "during a checkpoint write": 0,
        "between writes": 0,
        "finished before the kill": 0,
        "restarted (no checkpoint yet)": 0,
        "resumed from a checkpoint": 0,
        "steps trained again": 0,
        "steps restored from a checkpoint": 0,
        "steps lost": 0,
    }
    rnd = -1
    while rnd + 1 < MAX_ROUNDS and (
        rnd + 1 < KILL_ROUNDS
        or tally["kills"] < KILLS
        or tally["resumed from a checkpoint"] < RESUMES
        or tally["during a checkpoint write"] < KILLS_IN_A_SAVE
    ):
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
            assert finish(["train", "--resume", "run"], work, f"{rnd:02d}-resume.txt") == 0, (
                outputs / f"{rnd:02d}-resume.txt"
            ).read_text()[-2000:]
            events = [r for r in read_log(run) if r.get("event") == "resume"][len(events_before) :]
            assert events[0]["step"] == int(latest.name.split("-")[1]), f"round {rnd}: not the latest checkpoint"
            tally["resumed from a checkpoint"] += 1
        rows = read_log(run)
        steps = step_rows(rows)
        tally["steps lost"] += len(set(range(1, KILL_STEPS + 1)) - {r["step"] for r in steps})
        assert [r["step"] for r in steps] == list(range(1, KILL_STEPS + 1)), (
            f"round {rnd}: {[r['step'] for r in steps]}"
        )
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
    assert tally["resumed from a checkpoint"] >= RESUMES


def read_log_rows(run: Path) -> list[dict]:
    """The log's rows, or none when the kill came before the first line."""
    from qae_lab.storage.folder import read_log_lines

    return read_log_lines(run / "log.jsonl")[0]
