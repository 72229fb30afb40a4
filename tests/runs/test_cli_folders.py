"""The run folder through the real command line (``qae_lab.runs.cli.main``), the way a hostile user tries it:
an output folder inside the names a run owns, ``--overwrite`` over a run nested in one, an output
folder under a regular file, a damaged log under ``--resume``, and ``--overwrite`` over a run's TensorBoard logs. Each is refused with ``--dry-run`` too, before
anything loads, naming the path, the line or the setting; the folders are left byte for byte as they were."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from testkit.tiny_runs import TINY, no_loading, snapshot, tiny_sets

from qae_lab.__main__ import main
from qae_lab.storage.folder import LOCK_NAME, LOG_NAME, MARKER_NAME, STAGING_DIR, TENSORBOARD_DIR


def _outer(folder: Path) -> Path:
    """A run folder as a claimed run leaves it (its marker, a log line, a checkpoint folder)."""
    (folder / "checkpoint-2").mkdir(parents=True)
    (folder / MARKER_NAME).write_text('{"qae_lab_run": 1}\n')
    (folder / LOG_NAME).write_text('{"step": 1, "reward": 0.5}\n')
    return folder


def test_train_refuses_an_output_folder_inside_a_runs_own_names(tmp_path, capsys, monkeypatch):
    # finding 1: `train --output-dir OUTER/.staging` wrote a whole run there; `--overwrite OUTER` then deleted it
    outer = _outer(tmp_path / "outer")
    no_loading(monkeypatch)
    before = snapshot(outer)
    for inside in (STAGING_DIR, "model", "checkpoint-3", "finished-step4", "model/run", MARKER_NAME, LOCK_NAME):
        for extra in (["--dry-run"], []):
            assert main(["train", "--output-dir", str(outer / inside), *tiny_sets(), *extra]) == 2, inside
            err = capsys.readouterr().err
            assert "is a name the run folder uses for itself" in err and err.count("\n") == 1, (inside, err)
    assert snapshot(outer) == before and sorted(p.name for p in outer.iterdir()) == [
        MARKER_NAME,
        "checkpoint-2",
        LOG_NAME,
    ]


def test_overwrite_lists_the_staging_folder_and_never_deletes_a_nested_run(tmp_path, capsys, monkeypatch):
    # finding 1, the deleting side: what --overwrite deletes did not mention .staging, whatever it held
    outer = _outer(tmp_path / "outer")
    (outer / STAGING_DIR / "checkpoint-3").mkdir(parents=True)  # a save that was killed
    no_loading(monkeypatch)
    assert main(["train", "--output-dir", str(outer), "--overwrite", *tiny_sets(), "--dry-run"]) == 0
    notes = json.loads(capsys.readouterr().out)["notes"]
    assert notes == [f"--overwrite: deleting the previous run's .staging, checkpoint-2, log.jsonl in {outer}/"]
    nested = outer / STAGING_DIR / "checkpoint-3"
    (nested / MARKER_NAME).write_text('{"qae_lab_run": 1}\n')  # a run nested there (made before names were kept)
    before = snapshot(outer)
    for extra in (["--dry-run"], []):
        assert main(["train", "--output-dir", str(outer), "--overwrite", *tiny_sets(), *extra]) == 2
        err = capsys.readouterr().err
        assert f"{outer / STAGING_DIR}/ holds a run of its own (checkpoint-3/{MARKER_NAME})" in err, err
    assert snapshot(outer) == before


def test_train_refuses_an_output_folder_under_a_file_naming_the_file(tmp_path, capsys, monkeypatch):
    # finding 11: `--output-dir notes.txt/run` passed --dry-run, then the run died with a NotADirectoryError
    (tmp_path / "notes.txt").write_text("mine")
    no_loading(monkeypatch)
    for extra in (["--dry-run"], []):
        assert main(["train", "--output-dir", str(tmp_path / "notes.txt" / "run"), *tiny_sets(), *extra]) == 2
        err = capsys.readouterr().err
        assert f"output_dir {tmp_path / 'notes.txt' / 'run'}: {tmp_path / 'notes.txt'} is a file, not a folder" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


@pytest.mark.slow(seconds=5)
def test_a_damaged_log_refuses_the_resume_naming_the_file_and_line(saved_run, tmp_path, capsys, monkeypatch):
    # finding 9: a row with "step": "1", or a step row with no step, crashed --resume with a TypeError / KeyError
    run = Path(shutil.copytree(saved_run, tmp_path / "run"))
    log = run / LOG_NAME
    lines = log.read_text().splitlines(keepends=True)
    no_loading(monkeypatch)
    for damaged, said in (
        ({**json.loads(lines[0]), "step": "1"}, 'line 1 is damaged (its step is "1" (a string)'),
        ({k: v for k, v in json.loads(lines[1]).items() if k != "step"}, "line 2 is damaged (it has no step"),
    ):
        i = int(said.split()[1]) - 1
        log.write_text("".join([*lines[:i], json.dumps(damaged) + "\n", *lines[i + 1 :]]))
        before = snapshot(run)
        for extra in (["--dry-run"], []):
            assert main(["train", "--resume", str(run), "--set", "max_steps=6", *extra]) == 2
            err = capsys.readouterr().err
            assert f"{log}: {said}; a log row's step is a whole number >= 0)" in err and err.count("\n") == 1, err
        assert snapshot(run) == before


@pytest.mark.slow(seconds=15)
def test_overwrite_leaves_tensorboard_one_run_to_read(tmp_path, capsys, monkeypatch):
    # the finding: --overwrite kept the replaced run's TensorBoard events (transformers writes them to
    # <output_dir>/runs/<date>_<host>/), so the new run's chart showed both runs
    event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    monkeypatch.delenv("TENSORBOARD_LOGGING_DIR", raising=False)  # transformers' override of the folder
    out = tmp_path / "run"
    quick = [s for s in TINY if not s.startswith("max_steps=")]
    quick += ["evaluate=false", "save_model=false", "report_to=tensorboard", "max_completion_length=16"]

    def sets(values: list[str]) -> list[str]:
        return [a for v in values for a in ("--set", v)]

    def steps() -> list[int]:
        """The training steps TensorBoard reads under the run folder: each events file must be there to count."""
        found = sorted(out.rglob("events.out.tfevents.*"))
        assert len(found) == 1, found  # one writer: one run
        acc = event_accumulator.EventAccumulator(str(found[0].parent))
        acc.Reload()
        return [s.step for s in acc.Scalars("train/reward")]

    assert main(["train", "--output-dir", str(out), *sets([*quick, "max_steps=2"])]) == 0
    assert steps() == [1, 2]
    (out / "notes.txt").write_text("mine")  # the user's own file in the run folder
    capsys.readouterr()
    assert main(["train", "--output-dir", str(out), "--overwrite", *sets([*quick, "max_steps=1"])]) == 0
    assert steps() == [1]  # the second run's one step, and nothing of the first run's two
    assert (out / "notes.txt").read_text() == "mine"
    said = capsys.readouterr().out
    assert f"--overwrite: deleting the previous run's config.json, log.jsonl, report.html, {TENSORBOARD_DIR} in" in said
