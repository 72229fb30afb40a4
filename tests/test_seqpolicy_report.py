"""Tests for the sequence policy's generated sentences (qae_lab.seqpolicy_report), on a tiny sweep's findings
and on hand-made ones."""

from __future__ import annotations

import math

import pytest

from qae_lab.ledger import LEDGER_FORMS
from qae_lab.seqpolicy import task_batch
from qae_lab.seqpolicy_lab import headline, summarise_run, sweep_settings
from qae_lab.seqpolicy_report import (
    cell_sentences,
    compare_sentence,
    findings_sentences,
    paired,
    summary_sentences,
    tracking_sentences,
    trainer_ledger_sentences,
    variance_sentences,
)
from qae_lab.seqpolicy_update import UpdateSettings, simulate, update_variance


# ---------------------------------------------------------------- the findings and their sentences

@pytest.fixture(scope="module")
def tiny_findings() -> dict:
    """Findings of the whole sweep on a tiny policy (2 seeds, 3 steps), shaped like the committed file's."""
    t = {start: task_batch(2, 3, 2, 2, start=start) for start in ("flat", "peaked")}
    runs = {}
    for name, (start, s) in sweep_settings(eta=5.0, adam_eta=0.05, group_size=4).items():
        out = simulate(t[start].logits, t[start].rewards, s, steps=3, seed=0)
        runs[name] = summarise_run(out, every=1, early=1, estimators=headline(s))
    variants = update_variance(t["peaked"].logits[0], t["peaked"].rewards[0], UpdateSettings(group_size=4),
                               n_draws=4)
    per_start = {"peaked": {n: {k: [v[k], v[k]] for k in v} for n, v in variants.items()}}
    return {"meta": {"early_step": 1, "n_seeds": 2}, "runs": runs, "variance": {"per_start": per_start}}


def test_findings_sentences_are_generated_for_every_result(tiny_findings):
    sentences = findings_sentences(tiny_findings)
    assert len(sentences["entropy"]) == 2 * (4 + 1 + 3) and len(sentences["ledger"]) == 2 * 5
    assert all(" vs " in line and "seeds" in line for line in sentences["entropy"] + sentences["ledger"])
    assert len(sentences["adam"]) == 2 * 3 and all(", Adam, " in line for line in sentences["adam"])
    assert len(sentences["estimator"]) == 2 * 2 + 16
    assert any(line.startswith("peaked start, Adam, quantile: per step") for line in sentences["estimator"])
    assert len(variance_sentences(tiny_findings)) == 2 * 5
    assert len(cell_sentences(tiny_findings)) == 4 and len(summary_sentences(tiny_findings)) == 4 + 4 + 4 + 1
    assert len(trainer_ledger_sentences(tiny_findings)) == 5


def headline_findings(corr: dict, sign: float = 0.9) -> dict:
    """Findings with only the eight headline runs' tracking: corr[(optimizer, form)] on both seeds (0.1 less
    under the quantile baseline)."""
    runs = {}
    for start in ("flat", "peaked"):
        for opt in ("sgd", "adam"):
            for b in ("mean", "quantile"):
                shift = 0.1 if b == "quantile" else 0.0
                track = {f: {"corr": [corr[opt, f] - shift] * 2, "sign_agree": [sign] * 2, "ratio": [2.0, 4.0]}
                         for f in LEDGER_FORMS}
                runs[sweep_settings_name(start, b, opt)] = {"tracking": {**track, "visit_share": [0.1, 0.3]}}
    return {"meta": {"n_seeds": 2}, "runs": runs}


def sweep_settings_name(start, baseline, optimizer):
    return [n for n, (st, s) in sweep_settings(eta=1.0, adam_eta=1.0).items()
            if st == start and s.baseline == baseline and s.optimizer == optimizer and headline(s)][0]


def test_tracking_sentences_state_the_numbers():
    corr = {("sgd", "npg"): 0.2, ("sgd", "pg"): 0.5, ("sgd", "reinforce"): 0.9,
            ("adam", "npg"): 0.8, ("adam", "pg"): 0.7, ("adam", "reinforce"): 0.6}
    f = headline_findings(corr)
    lines = tracking_sentences(f)
    assert lines[0] == (
        "flat start, SGD, mean: per step, against the exact first-order change of the whole step (grad H . dz), "
        "npg (the trainer's ledger/*) correlates +0.20±0.00, has its sign on 90%±0% of steps and sums to "
        "+3±1 times it; pg correlates +0.50±0.00, has its sign on 90%±0% of steps and sums to +3±1 times it; "
        "reinforce correlates +0.90±0.00, has its sign on 90%±0% of steps and sums to +3±1 times it; the "
        "reinforce form tracks it best; the states' visitation, which per-state terms cannot see, is 20%±10% of "
        "the exact change")
    assert "the npg form tracks it best (under Adam the sums' scale is nominal" in lines[3]
    assert lines[6].startswith("per-step correlation of the trainer's ledger (npg) with the exact change, mean, "
                               "flat start, Adam vs SGD: 0.80±0.00 vs 0.20±0.00 over 2 seeds: higher")
    said = trainer_ledger_sentences(f)
    assert said[0].startswith("QAETrainer logs the form npg as ledger/*")
    assert "Under SGD, " in said[1] and "the npg form +0.10 to +0.20 (sign right on 90% to 90% of steps)" in said[1]
    assert said[1].endswith("Best on average: reinforce") and said[2].endswith("Best on average: npg")
    assert said[3] == ("The trainer's form (npg) tracked the exact change better under Adam than under SGD in 4 of 4 "
                       "settings (mean correlation +0.75 against +0.15; its sign right on 90% against 90% of steps)")
    assert said[4] == ("Under the quantile baseline the trainer's form correlated less with the exact change than "
                       "under the mean in 4 of 4 (start, optimizer) settings (mean correlation +0.40 against +0.50)")


def test_cell_sentences_name_the_largest_cell_of_each_ledger():
    cells = {"dh_hard_pos": [-0.1, -0.1], "dh_hard_neg": [0.3, 0.5], "dh_easy_pos": [-0.2, -0.2],
             "dh_easy_neg": [0.0, 0.0]}
    ledger = {"sampled": {**cells, "dh": [0.0, 0.2]}, "estimator_npg": {**cells, "dh": [0.0, 0.2]},
              "estimator_pg": {**cells, "dh_easy_pos": [-2.0, -2.0], "dh": [0.0, 0.0]},
              "estimator_reinforce": {**cells, "dh": [0.0, 0.2]}}
    f = {"runs": {sweep_settings_name(st, b, "sgd"): {"ledger": ledger} for st in ("flat", "peaked")
                  for b in ("mean", "quantile")}}
    line = cell_sentences(f)[0]
    assert line == ("flat start, mean: the ledger cell that moved the entropy most is hard prompts' failures "
                    "(dh_hard_neg, +0.400±0.100 of the total +0.100±0.100 nats, first passes summed over training); "
                    "the per-token forms' largest cell: npg the same, pg easy prompts' successes, reinforce the same")


def test_paired_comparison_words():
    f = {"runs": {"a": {"x": [1.0, 2.0, 3.0]}, "b": {"x": [1.5, 1.9, 3.5]}, "c": {"x": [1.0, 2.0, 3.0]}}}
    assert ": no clear difference," in compare_sentence(f, "a", "b", "x", "x")
    assert "(2 of 3 paired seeds lower)" in compare_sentence(f, "a", "b", "x", "x")
    same = compare_sentence(f, "a", "c", "x", "x")
    assert ": no clear difference, 0.0 seed-spreads apart (0 of 3 paired seeds lower)" in same
    p = paired([1.0, None, 3.0], [2.0, 5.0, 4.0])
    assert p.n == 2 and p.n_lower == 2 and math.isclose(p.diff, -1.0)
    with pytest.raises(ValueError, match="^a and b "):
        paired([1.0], [1.0, 2.0])
