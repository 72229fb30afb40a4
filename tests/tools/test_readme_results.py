"""The READMEs' result passages: generated from the committed runs, checked against them, and the generators
against hand-computed runs.

If ``test_readme_result_passages_match_the_committed_runs`` fails, the READMEs no longer say what the
committed runs say: run ``python -m tools.readme_results`` and commit the READMEs it rewrites.
"""

from __future__ import annotations

import difflib
import json
import shutil
from pathlib import Path

import pytest

from qae_lab.analysis.compare import Run, find_reference_runs, load_runs, summary_table
from tools import readme_results, workshop_minutes
from tools.readme_results import (
    BLOCKS,
    COMMAND,
    ROOT,
    cpu_demo_text,
    lenient_text,
    main,
    marker,
    reference_text,
    render,
    replace_block,
    stale,
)


def test_readme_result_passages_match_the_committed_runs():
    drift = [(path, now, new) for path, (now, new) in render(ROOT).items() if now != new]
    diffs = "\n".join(
        "".join(
            difflib.unified_diff(
                now.splitlines(True), new.splitlines(True), str(path), f"{path} from the committed runs", n=1
            )
        )
        for path, now, new in drift
    )
    assert not drift, f"the READMEs' result passages drifted from the committed runs: run {COMMAND}\n{diffs}"


def test_every_passage_is_marked_once_in_its_readme():
    for name, passages in BLOCKS.items():
        text = (ROOT / name).read_text(encoding="utf-8")
        for passage in passages:
            begin, end = marker(passage)
            assert text.count(begin) == 1 and text.count(end) == 1 and text.index(begin) < text.index(end), (
                name,
                passage,
            )


def test_every_notebook_states_its_minutes_from_the_measured_times():
    for path in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        head = "".join(json.loads(path.read_text(encoding="utf-8"))["cells"][0]["source"])
        begin, end = marker(readme_results.MINUTES)
        assert head.count(begin) == 1 and head.count(end) == 1, path.name
        said = head.split(begin)[1].split(end)[0]
        assert said == workshop_minutes.minutes_text(path.name[:2])  # the plans' own number
        m = workshop_minutes.notebook_minutes()[path.name[:2]]
        assert said.startswith(
            f"About {m['total']} minutes in a workshop, {m['total_with_exercise']} with its exercise"
        )


def test_replace_block_keeps_everything_outside_the_markers():
    text = "head\n<!-- results:a -->\nold\n<!-- /results:a -->\nmiddle <!-- results:b -->x<!-- /results:b --> tail"
    new = replace_block(replace_block(text, "a", "\nnew\n"), "b", "y")
    assert new == (
        "head\n<!-- results:a -->\nnew\n<!-- /results:a -->\nmiddle <!-- results:b -->y<!-- /results:b --> tail"
    )
    for bad in (
        "<!-- /results:a --> <!-- results:a -->",  # out of order
        "<!-- results:a --> <!-- results:a --> <!-- /results:a -->",  # repeated
        "<!-- results:a -->",
    ):  # not closed
        with pytest.raises(ValueError, match="passage 'a' needs one"):
            replace_block(bad, "a", "x")


# ---------------------------------------------------------------- the cpu-demo passage, by hand


def _write_run(folder: Path, seed: int, rows: list[dict], before: dict, after: dict, levels: dict) -> None:
    folder.mkdir(parents=True)
    config = {"preset": "cpu-demo", "run": {"method": "qae"}, "trainer": {"seed": seed, "temperature": 0.7}}
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    summary = {
        when: {
            "summary": {**ev, "n_problems": 10, "n_samples": 4},
            "by_level": {lv: {"pass@1": p} for lv, p in levels[when].items()},
        }
        for when, ev in (("before", before), ("after", after))
    }
    (folder / "summary.json").write_text(json.dumps(summary))


def _rows(reward, entropy, hard, zero):
    return [
        {"step": t + 1, "reward": r, "entropy": e, "qae/hard_frac": h, "qae/zero_adv_frac": z}
        for t, (r, e, h, z) in enumerate(zip(reward, entropy, hard, zero))
    ]


def _two_seeds(tmp_path, after0, after1, greedy_after=0.6):
    before = {"pass@1": 0.25, "greedy_pass@1": 0.5, "pass@8": 0.75}
    ev = lambda p1: {"pass@1": p1, "greedy_pass@1": greedy_after, "pass@8": 0.9}  # noqa: E731
    entropy = [0.10, 0.08, 0.06, 0.04]
    _write_run(
        tmp_path / "qae-seed0",
        0,
        _rows([0.2, 0.4, 0.6, 0.8], entropy, [1.0, 0.6, 0.4, 0.0], [0.5, 0.5, 1, 1]),
        before,
        ev(after0),
        {"before": {"2": 0.3, "3": 0.2}, "after": {"2": 0.6, "3": 0.4}},
    )
    _write_run(
        tmp_path / "qae-seed1",
        1,
        _rows([0.4, 0.4, 0.8, 0.8], entropy, [0.6, 0.6, 0.2, 0.2], [0.75] * 4),
        before,
        ev(after1),
        {"before": {"2": 0.3, "3": 0.2}, "after": {"2": 0.8, "3": 0.6}},
    )


def test_cpu_demo_text_by_hand(tmp_path):
    _two_seeds(tmp_path, 0.5, 0.7)
    lines = cpu_demo_text(tmp_path, edge=2).splitlines()
    assert "|  | greedy pass@1 | sampled pass@1 (n = 4, T = 0.7) | pass@8 |" in lines
    assert "| embedded model | 0.500±0.000 | 0.250±0.000 | 0.750±0.000 |" in lines  # one model before training
    assert "| after `cpu-demo` | 0.600±0.000 | 0.600±0.100 | 0.900±0.000 |" in lines  # 0.5 and 0.7: population std
    # levels: 0.3 -> mean(0.6, 0.8), 0.2 -> mean(0.4, 0.6)
    assert "| 2 | 0.30±0.00 | 0.70±0.10 |" in lines and "| 3 | 0.20±0.00 | 0.50±0.10 |" in lines
    # first 2 steps vs last 2: reward (0.3, 0.4) -> (0.7, 0.8); entropy 0.09 -> 0.05; hard (0.8, 0.6) -> (0.2, 0.2);
    # zero-advantage (0.5, 0.75) -> (1.0, 0.75)
    assert "| first 2 of 4 steps | 0.350±0.050 | 0.090±0.000 | 0.700±0.100 | 0.625±0.125 |" in lines
    assert "| last 2 of 4 steps | 0.750±0.050 | 0.050±0.000 | 0.200±0.000 | 0.875±0.125 |" in lines
    assert "same 10 held-out problems" in " ".join(lines)
    assert all(len(line) <= 100 for line in lines if not line.startswith("|"))


def test_cpu_demo_text_refuses_missing_runs_and_a_too_long_edge(tmp_path):
    with pytest.raises(ValueError, match="no evaluated qae runs"):
        cpu_demo_text(tmp_path / "nothing")
    _two_seeds(tmp_path, 0.5, 0.7)
    with pytest.raises(ValueError, match="at least 2 \\* edge = 6 steps"):
        cpu_demo_text(tmp_path, edge=3)


# ---------------------------------------------------------------- the other passages


def test_lenient_text():
    ev = {"pass@1": 0.5, "lenient_pass@1": 0.5, "greedy_pass@1": 0.7, "lenient_greedy_pass@1": 0.7}
    run = lambda before, after: Run("qae-seed0", "qae", 0, {}, [], before, after)  # noqa: E731
    assert lenient_text([run(ev, ev)]) == "in the runs above the largest gap is 0.000"
    assert lenient_text([run(ev, ev), run({**ev, "lenient_greedy_pass@1": 0.75}, ev)]).endswith("gap is 0.050")
    with pytest.raises(ValueError, match="no evaluated runs"):
        lenient_text([])


def _eval(p1, greedy, p8):
    return {"pass@1": p1, "greedy_pass@1": greedy, "pass@8": p8}


def test_reference_text_by_hand():
    def run(method, seed, zero, after):
        rows = [{"step": t, "reward": 0.1 * t, "qae/zero_adv_frac": zero} for t in range(1, 31)]
        return Run(
            f"{method}-seed{seed}",
            method,
            seed,
            {"preset": "cpu-demo", "run": {"method": method}, "trainer": {"seed": seed}},
            rows,
            _eval(0.25, 0.5, 0.75),
            after,
        )

    runs = [
        run("mean", 0, 0.2, _eval(0.5, 0.6, 0.8)),
        run("mean", 1, 0.3, _eval(0.6, 0.6, 0.9)),
        run("qae", 0, 0.8, _eval(0.5, 0.7, 0.9)),
        run("qae", 1, 0.7, _eval(0.52, 0.7, 1.0)),
        run("sa_ah", 0, 0.2, _eval(0.3, 0.5, 0.8)),
        run("sa_ah", 1, 0.2, _eval(0.4, 0.5, 0.8)),
    ]
    lines = reference_text(runs).splitlines()
    head = "| method | pass@1 before | pass@1 after | greedy pass@1 after | pass@8 after | zero-adv frac | train var |"
    assert lines[3] == head + " pass@1 after - mean |"
    # a linear reward: nothing left around its trailing average
    assert lines[5].startswith("| mean | 0.250±0.000 | 0.550±0.050 | 0.600±0.000 | 0.850±0.050 | 0.250±0.050 | 0.000")
    assert lines[5].endswith("| — |")  # the baseline itself
    # qae after: 0.50, 0.52 against 0.5, 0.6: Welch's interval over two seeds each includes zero
    assert lines[6].startswith("| qae | 0.250±0.000 | 0.510±0.010 |") and "| -0.040 [" in lines[6]


def test_reference_text_matches_the_summary_table_of_the_committed_runs():
    runs = [r for r in load_runs(find_reference_runs()) if r.config.get("preset") == "cpu-demo"]
    row = next(r for r in summary_table(runs) if r["method"] == "qae_sa_ah")
    after = row["pass@1 after"]
    assert (
        f"| qae_sa_ah | {row['pass@1 before'].mean:.3f}±0.000 | {after.mean:.3f}±{after.std:.3f} |"
        in reference_text(runs)
    )


# ---------------------------------------------------------------- the command


def _copy_checkout(tmp_path: Path) -> Path:
    root = tmp_path / "checkout"
    for name in BLOCKS:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, root / name)
    for run in (ROOT / readme_results.REFERENCE_RUNS).glob("*-seed*"):
        shutil.copytree(run, root / readme_results.REFERENCE_RUNS / run.name)
    ds = readme_results.REFERENCE_RUNS / "phenomena" / "dynamic_sampling"  # docs/dynamic-sampling.md's runs
    shutil.copytree(ROOT / ds, root / ds)
    search = readme_results.REFERENCE_RUNS / "phenomena" / "search_phenomenon.json"  # docs/notebook-notes.md's table
    shutil.copy(ROOT / search, root / search)
    (root / readme_results.HOST_COSTS).parent.mkdir(parents=True)
    shutil.copy(ROOT / readme_results.HOST_COSTS, root / readme_results.HOST_COSTS)  # the T4 time estimate's input
    # docs/workshop.md's plans and answer key: the measured notebook times and the notebooks themselves
    shutil.copy(ROOT / readme_results.NOTEBOOK_TIMES, root / readme_results.NOTEBOOK_TIMES)
    shutil.copy(ROOT / readme_results.THREAD_POLICY, root / readme_results.THREAD_POLICY)  # the CPU times
    shutil.copytree(
        ROOT / readme_results.NOTEBOOKS,
        root / readme_results.NOTEBOOKS,
        ignore=shutil.ignore_patterns("runs", ".ipynb_checkpoints"),
    )
    return root


def test_the_command_finds_a_drifted_number_and_writes_it_back(tmp_path, capsys):
    root = _copy_checkout(tmp_path)
    readme = root / "README.md"
    good = readme.read_text(encoding="utf-8")
    assert "| embedded model | 0.705±0.000 | 0.278±0.000 | 0.830±0.000 |" in good
    readme.write_text(good.replace("| embedded model | 0.705±", "| embedded model | 0.700±"), encoding="utf-8")
    assert stale(root) == [readme]
    assert main(["--check", "--root", str(root)]) == 1
    assert f"README.md: its result passages differ from the committed runs; run {COMMAND}" in capsys.readouterr().out
    assert readme.read_text(encoding="utf-8") != good  # --check writes nothing
    assert main(["--root", str(root)]) == 0
    assert readme.read_text(encoding="utf-8") == good and stale(root) == []
    assert sorted(p.name for p in readme.parent.iterdir() if p.name.startswith(".")) == []  # no temporary file left
