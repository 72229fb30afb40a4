"""tools/mutation.py: the modules it names exist with their tests, its score reads mutmut's record as mutmut's own
statuses do (1 and 3 killed, 0 survived, the rest not judged), and a module it does not know is refused by name."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tools import mutation

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", sorted(mutation.MODULES))
def test_each_module_and_its_tests_exist(name):
    source, tests = mutation.MODULES[name]
    assert (ROOT / source).is_file() and all((ROOT / t).is_file() for t in tests)


def test_the_score_counts_killed_survived_and_the_rest(tmp_path):
    # a hand-made record: two killed (exit 1: a test failed; 3: pytest's internal error), one survivor, one timeout
    # and one never run. Planted: 3 counted as a survivor, or the patterns ignored -> the counts below differ
    meta = tmp_path / "mutants" / "qae_lab" / "m.py.meta"
    meta.parent.mkdir(parents=True)
    codes = {
        "m.x_f__mutmut_1": 1,
        "m.x_f__mutmut_2": 3,
        "m.x_f__mutmut_3": 0,
        "m.x_f__mutmut_4": 36,
        "m.x_g__mutmut_1": 0,
    }
    meta.write_text(json.dumps({"exit_code_by_key": codes}))
    got = mutation.score(tmp_path, "qae_lab/m.py")
    assert (len(got["killed"]), got["survived"], len(got["other"])) == (2, ["m.x_f__mutmut_3", "m.x_g__mutmut_1"], 1)
    only_f = mutation.score(tmp_path, "qae_lab/m.py", ("*x_f__mutmut_*",))
    assert (len(only_f["killed"]), only_f["survived"]) == (2, ["m.x_f__mutmut_3"])
    row = mutation.row("advantages", {"killed": ["a"] * 3, "survived": ["b"], "other": []})
    assert row.startswith("| `qae_lab/advantages.py` | 3 / 4 | 75% | 0 | ")


def test_an_unknown_module_is_refused_by_name(capsys):
    with pytest.raises(SystemExit):
        mutation.main(["advantage"])
    assert "module must be one of advantages," in capsys.readouterr().err
    assert mutation.main(["--list"]) == 0 and "dynamic_sampling" in capsys.readouterr().out


@pytest.mark.parametrize("name", sorted(mutation.SOURCE_READERS))
def test_tests_that_read_the_source_are_left_out_of_the_module_run(name):
    # a test that scans the module's text fails on mutmut's copy (every mutant's text sits beside the original), so
    # nothing would be judged. Planted: the deselect options dropped from _config -> the option is missing below
    import tomllib

    source, tests = mutation.MODULES[name]
    table = tomllib.loads(mutation._config(source, tests, mutation.SOURCE_READERS[name]))["tool"]["mutmut"]
    options = table["pytest_add_cli_args"]
    for test in mutation.SOURCE_READERS[name]:
        path, _, function = test.partition("::")
        assert path in tests and f"def {function}(" in (ROOT / path).read_text()
        assert options[options.index(test) - 1] == "--deselect"


def test_each_run_starts_without_an_earlier_runs_record(tmp_path, monkeypatch):
    # an earlier run's mutants/ kept, mutmut reran only the functions changed since and rewrote the module's record
    # with those alone: the score then counted 23 of settings' 548 mutants. Planted: the rmtree in _scratch removed ->
    # the old record is still there below
    (tmp_path / "repo").mkdir()
    monkeypatch.setattr(mutation, "ROOT", tmp_path / "repo")
    monkeypatch.setattr(mutation, "SCRATCH", tmp_path / "scratch")
    (tmp_path / "repo" / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    old = tmp_path / "scratch" / "advantages" / "mutants" / "qae_lab" / "advantages.py.meta"
    old.parent.mkdir(parents=True)
    old.write_text("{}")
    real_run = mutation.subprocess.run

    def fake_run(command, **kwargs):
        if command[:2] == ["git", "ls-files"]:
            return real_run(["printf", "pyproject.toml\\0"], **kwargs)
        raise AssertionError(command)

    monkeypatch.setattr(mutation.subprocess, "run", fake_run)
    work = mutation._scratch("advantages")
    assert not (work / "mutants").exists() and "[tool.mutmut]" in (work / "pyproject.toml").read_text()
