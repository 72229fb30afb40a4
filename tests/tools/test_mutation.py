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
