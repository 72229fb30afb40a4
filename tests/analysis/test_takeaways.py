"""Tests for qae_lab.analysis.takeaways: the sentences say what the committed data say (read here independently of
the module), and every place that states one states the same text."""

from __future__ import annotations

import json
import math
import re
import statistics

import nbformat
import pytest

from qae_lab.analysis import takeaways
from qae_lab.analysis.committed_data import data_dir
from qae_lab.analysis.evidence import judge
from tools.readme_results import ROOT

T975_15 = 2.131  # Student's t, 0.975 quantile, 15 degrees of freedom (16 paired replicates)


def _flat(text: str) -> str:
    """Text with its line breaks and runs of spaces as one space: a sentence wrapped anyhow reads the same."""
    return re.sub(r"\s+", " ", text)


def _cells(name: str) -> list:
    [path] = sorted((ROOT / "notebooks").glob(f"{name}_*.ipynb"))
    return nbformat.read(path, as_version=4).cells


def _doc(name: str) -> str:
    return _flat((ROOT / name).read_text(encoding="utf-8"))


def _paired_word(a: list[float], b: list[float], lower: bool) -> str:
    """holds / reversed / no difference of a - b over paired replicates, by hand (t with 15 df)."""
    d = [x - y for x, y in zip(a, b)]
    half = T975_15 * statistics.stdev(d) / math.sqrt(len(d))
    mean = statistics.fmean(d)
    if abs(mean) <= half:
        return "no difference"
    return "holds" if (mean < 0) == lower else "reversed"


def test_the_bandit_training_verdicts_are_the_committed_files():
    data = json.loads((data_dir("bandit") / "prop42.json").read_text(encoding="utf-8"))
    runs = {(r["optimizer"], r["lr"], r["baseline"]): r for r in data["training"]["runs"]}
    got = takeaways.bandit_training()
    assert [lr for lr, _, _ in got] == [0.2, 0.5, 1.0]
    for lr, hard, easy in got:
        q, m = runs["sgd", lr, "quantile"], runs["sgd", lr, "mean"]
        assert len(q["hard_peak"]) == 16 == hard.n
        assert hard.word == _paired_word(q["hard_peak"], m["hard_peak"], lower=True)
        assert easy.word == _paired_word(q["easy_h"], m["easy_h"], lower=False)
    # the reading: reversed at 0.2 and 0.5 (1 and 3 of 16 replicates agree on the hard prompts), none at 1.0
    assert [(h.word, h.agree) for _, h, _ in got] == [("reversed", 1), ("reversed", 3), ("no difference", 7)]
    # Adam, the same rule: Prop. 4.2's direction at every learning rate
    assert {w for _, h, e in takeaways.bandit_training(optimizer="adam") for w in (h.word, e.word)} == {"holds"}
    with pytest.raises(ValueError, match="optimizer must be one the training ran"):
        takeaways.bandit_training(optimizer="rmsprop")


def test_the_sgd_sentence_is_the_data_and_one_story_everywhere():
    sentence = takeaways.sgd_sentence()
    assert "reversed at lr 0.2 and 0.5 and no difference at lr 1" in sentence
    seq = judge("hard_prop42", "sequence policy", "SGD")[1]
    assert f"on notebook 07's sequence policy {seq.word}" in sentence and f"±{seq.half:.2g}" in sentence
    for doc in ("README.md", "docs/workshop.md", "docs/notebook-notes.md"):
        assert sentence in _doc(doc), doc
    summary = next(c.source for c in _cells("02") if c.source.startswith("## What you saw"))
    assert sentence in _flat(summary)
    cells = _cells("07")
    assert takeaways.sgd_short() in _flat(cells[0].source)  # the opening lines
    why = next(c.source for c in cells if "<summary>Why</summary>" in c.source)
    assert sentence in _flat(why)
    stale = ("SGD no", "cannot separate", "SGD: no\ndifference", "Adam yes")
    for doc in ("README.md", "docs/workshop.md", "docs/notebook-notes.md"):
        assert not any(s in (ROOT / doc).read_text(encoding="utf-8") for s in stale), doc


def test_the_saah_sentence_is_the_same_in_the_readme_the_workshop_07_and_09_and_says_what_was_measured():
    sentence = takeaways.saah_sentence()
    for doc in ("README.md", "docs/workshop.md"):
        assert sentence in _doc(doc), doc
    for name in ("07", "09"):
        saw = next(c.source for c in _cells(name) if c.source.startswith("## What you saw"))
        assert sentence in _flat(saw), name
    # what it says is the verdicts: the update's variance raised from a flat start, the training variance no different
    flat = judge("saah_update_variance", "sequence policy", "flat start")[1]
    assert flat.word == "reversed" and "raised one update's variance from a flat start" in sentence
    assert {judge("saah_variance", s)[1].word for s in ("sums model", "CPU preset")} == {"no difference"}
    assert "training variance and pass@1 could not be told apart from plain GRPO's" in sentence
    assert "no different" not in sentence
    assert "raised training variance" not in _doc("README.md")


def test_notebook_07_ends_with_what_you_saw_a_claim_card_and_the_whole_vocabulary():
    cells = _cells("07")
    exercise = next(i for i, c in enumerate(cells) if c.source.startswith("## Exercise"))
    saw = cells[exercise - 1]
    assert saw.cell_type == "markdown" and saw.source.startswith("## What you saw")
    assert takeaways.qae_sentence() in _flat(saw.source)
    assert any("claims.claim_card(" in c.source for c in cells if c.cell_type == "code")
    note = next(c.source for c in cells if c.source.startswith("**Scoreboard.**"))
    words = (
        "holds",
        "reversed",
        "no difference",
        "outside the stated size",
        "at the band's edge",
        "cannot be\ntested here",
    )
    for word in words:
        assert word.replace("\n", " ") in _flat(note), word


def test_the_qae_sentence_states_its_scope_from_the_data():
    sentence = takeaways.qae_sentence()
    hard = judge("hard_prop42", "sequence policy", "Adam")[1]
    assert hard.word == "holds" and f"({hard.agree} of {hard.n} seeds)" in sentence
    assert "under plain SGD, no difference" in sentence and "a search chose" in sentence
    from qae_lab.analysis.claims import FOUND

    lm = judge("hard_prop42", FOUND)[1]  # the sums model where the search made the mean baseline's entropy explode
    assert (lm.why if lm.word == "cannot be tested here" else f"it is {takeaways._said(lm)} on the prompts") in sentence


def test_notebook_09_predicts_and_checks_the_update_variance_by_the_tables_rule():
    cells = _cells("09")
    code = [c.source for c in cells if c.cell_type == "code"]
    assert any(s.startswith("PREDICTION = None") for s in code)
    check = next(s for s in code if "check_direction(" in s)
    assert "saah_update_variance" in check and "interval=(flat.lo, flat.hi)" in check
    assert not any("whichever way it went" in c.source for c in cells)


def test_notebook_05_judges_its_prediction_by_the_tables_interval():
    cells = _cells("05")
    check = next(c.source for c in cells if c.cell_type == "code" and "check_direction(" in c.source)
    assert "interval=(change.lo, change.hi)" in check and "compare.seed_difference(" in check
    assert "tolerance" not in check


def test_notebook_09_shows_the_update_variance_claim_it_measures():
    # the section's table selects its claim by key: a reworded statement cannot leave it empty
    from qae_lab.analysis import claims, evidence

    source = next(c.source for c in _cells("09") if c.cell_type == "code" and "claims.scoreboard(" in c.source)
    assert 'SAAH = "saah_update_variance"' in source and "key[0] == SAAH" in source
    judged = evidence.judge_all(["sequence policy"])
    rows = claims.scoreboard({key: v for key, v in judged.items() if key[0] == "saah_update_variance"})
    assert len(rows) == 2 and all(r["claim"].startswith("update variance at a fixed policy") for r in rows), rows


def test_the_saah_sentence_gives_each_half_width_on_its_settings_scale_and_the_papers_effect():
    sentence = takeaways.saah_sentence()
    assert sentence.count(". ") == 0 and sentence.endswith("(notebook 09).")  # one sentence
    for claim in ("saah_variance", "saah_pass1"):
        for setting in ("CPU preset", "sums model"):
            v = judge(claim, setting)[1]
            # each half-width beside plain GRPO's value in its own setting, not half-widths of mixed scales in a row
            assert f"±{v.half:.2g} on " in sentence and f"{v.b:.2g}" in sentence, (claim, setting)
    cpu = judge("saah_variance", "CPU preset")[1]
    assert f"±{cpu.half:.2g} on a variance of {cpu.b:.2g}" in sentence
    assert "3.6x lower" in sentence and "+0.018" in sentence
    assert "half-widths ±0.072 and ±0.053" not in sentence


def _search_row(name, peak_start, final_start, seed=100, method="mean+clip_higher"):
    sets = ["--method " + method, f"seed={seed}", *(["learning_rate=3e-4"] if name.startswith("fast") else [])]
    return {
        "name": name,
        "method": method,
        "seed": seed,
        "sets": sets,
        "peak/start": peak_start,
        "final/start": final_start,
        "reward_first": 0.4,
        "reward_last": 0.1,
        "train_s": 1800.0,
    }


def test_the_phenomenon_sentence_says_so_when_the_search_found_nothing():
    rows = [_search_row("base", 1.02, 0.9), _search_row("fast", 1.3, 0.8), _search_row("fast-seed101", 1.0, 0.7, 101)]
    rows.append(_search_row("fast-seed102", 1.05, 0.6, 102))  # fast: 1 of 3 seeds past 1.1x: not most
    sentence = takeaways.phenomenon_sentence(rows)
    assert sentence.startswith("A search of 4 runs of the mean baseline (2 settings, 2.0 hours")
    assert "found no setting where its entropy rose to 1.1x its start or fell to 0.5x in most seeds" in sentence
    assert "(the farthest: peak / start 1.30 in fast, final / start 0.60 in fast-seed102)" in sentence
    assert sentence.endswith("cannot be produced.")


def test_the_phenomenon_sentence_reads_the_committed_search_and_the_fresh_seeds():
    from qae_lab.analysis.claims import FOUND
    from qae_lab.analysis.phenomena import PHENOMENON_CHOSEN, load_search

    rows = load_search("phenomenon")
    sentence = takeaways.phenomenon_sentence()
    assert f"A search of {len(rows)} runs of the mean baseline" in sentence
    chosen = sorted((r for r in rows if r["name"].split("-seed")[0] == PHENOMENON_CHOSEN), key=lambda r: r["seed"])
    past = [r for r in chosen if r["peak/start"] >= 1.1]
    assert 2 * len(past) > len(chosen) >= 3
    assert (
        f"rising past 1.1x its start in {len(past)}/{len(chosen)} seeds only with learning_rate=3e-4 on the sums model"
        in sentence
    )
    assert ", ".join(f"{r['peak/start']:.3f}" for r in chosen) in sentence
    others = max(r["peak/start"] for r in rows if r not in chosen)
    assert others < 1.1 and f"every other setting at most {others:.3f}" in sentence
    net, hard, easy = (judge(c, FOUND)[1] for c in ("explosion", "hard_prop42", "easy_prop42"))
    assert f"on {net.n} fresh seeds" in sentence and net.n >= 8
    assert f"peak / start was {net.a:.2f} against the mean's {net.b:.2f}: {takeaways._said(net)};" in sentence
    assert f"start hardest: {takeaways._said(hard)}; on the easiest: {takeaways._said(easy)}." in sentence
    # where a participant and a researcher read it: the README and the notebooks' notes say the same
    assert sentence in _doc("README.md") and sentence in _doc("docs/notebook-notes.md")
