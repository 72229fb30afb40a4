"""benchmarks/phenomena_runs.py: which runs count as finished, so that a search spreads over sittings, and that an
unfinished run folder is only ever set aside (renamed), never deleted or overwritten."""

from __future__ import annotations

import json
import sys
from pathlib import Path


from testkit.scripts import ROOT, load_script

sys.path.insert(0, str(ROOT / "benchmarks"))  # the script imports its sibling reference_runs.py
runner = load_script("benchmarks/phenomena_runs.py")

NO_EVAL = ["max_steps=4", "evaluate=false"]


def _log(folder: Path, *rows: dict) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_a_run_that_evaluates_is_finished_by_its_after_evaluation(tmp_path):
    run = tmp_path / "r"
    _log(run, {"step": 4, "entropy": 0.2}, {"step": 4, "train_runtime": 9.0})
    assert not runner.finished(run, ["max_steps=4"])  # trained, but killed inside the last evaluation
    (run / "eval_after.json").write_text("{}")
    assert runner.finished(run, ["max_steps=4"])


def test_a_run_without_evaluation_is_finished_by_its_closing_row(tmp_path):
    run = tmp_path / "r"
    assert not runner.finished(run, NO_EVAL)  # no folder
    _log(run)
    assert not runner.finished(run, NO_EVAL)  # an empty log
    _log(run, {"step": 1, "entropy": 0.2}, {"step": 2, "entropy": 0.2})
    assert not runner.finished(run, NO_EVAL)  # stopped in the middle
    _log(run, {"step": 4, "entropy": 0.2}, {"step": 4, "train_runtime": 9.0})
    assert runner.finished(run, NO_EVAL)
    # the same log, but the run was to evaluate: not finished without its after-training evaluation
    assert not runner.finished(run, ["max_steps=4"])


def test_finished_runs_are_skipped_and_unfinished_ones_are_set_aside_only_when_asked(tmp_path):
    done, cut = tmp_path / "done", tmp_path / "cut"
    _log(done, {"step": 4, "train_runtime": 9.0})
    _log(cut, {"step": 2, "entropy": 0.2})
    assert runner._job("cpu-sums", "mean", NO_EVAL, done, 1) is None
    cmd = runner._job("cpu-sums", "mean", NO_EVAL, cut, 1)  # not asked: left as it is (the CLI will refuse it)
    assert cmd[cmd.index("--output-dir") + 1] == str(cut) and (cut / "log.jsonl").is_file()
    for n in (1, 2):  # asked, twice: each unfinished folder kept under its own name
        _log(cut, {"step": n, "entropy": 0.1 * n})
        assert runner._job("cpu-sums", "mean", NO_EVAL, cut, 1, retry=True) is not None
        kept = tmp_path / f"cut.unfinished-{n}"
        assert not cut.exists() and json.loads((kept / "log.jsonl").read_text())["step"] == n
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cut.unfinished-1", "cut.unfinished-2", "done"]


def test_the_search_seed_comes_first_so_a_try_keeps_its_own(tmp_path, monkeypatch):
    cmds = []
    monkeypatch.setattr(runner, "_run_all", lambda c, jobs: cmds.extend(c))
    monkeypatch.setitem(
        runner.SEARCHES, "phenomenon", ((("a", "mean", ["x=1"]), ("a-seed101", "mean", ["x=1", "seed=101"])), "f")
    )
    runner.search_run(tmp_path, 1, "phenomenon")
    sets = [[c[i + 1] for i, w in enumerate(c) if w == "--set"] for c in cmds]
    assert sets[0][:2] == [f"seed={runner.SEARCH_SEED}", "x=1"]
    assert sets[1][:3] == [f"seed={runner.SEARCH_SEED}", "x=1", "seed=101"]  # the later --set wins


def test_choose_prints_the_committed_search_and_the_declared_choice(capsys):
    choice = runner.choose()
    out = capsys.readouterr().out
    assert choice["chosen"] == runner.PHENOMENON_CHOSEN and f"declared: {runner.PHENOMENON_CHOSEN}" in out
    rows = runner.load_search("phenomenon", runner.DEST.parent)
    assert all(f"| {r['name']} |" in out for r in rows)  # a row per try
