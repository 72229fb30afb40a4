"""Tests for qae_lab.analysis.claims: each claim is measurable on its experiment, verdicts on hand-made runs, the sentence,
and every claim judged on the committed runs."""

from __future__ import annotations

import pytest

from qae_lab.analysis.claims import (
    CLAIMS,
    VERDICTS,
    clip_acted,
    clip_sentence,
    direction,
    evaluation,
    fell,
    held_out,
    judge,
    punished_correct_sentence,
    regime_fell,
    regime_rose,
    rose,
    scoreboard,
    scoreboard_markdown,
    sharpening_sentences,
    summary_lines,
    total,
    variance,
    window,
)
from qae_lab.analysis.compare import Run, find_reference_runs
from qae_lab.analysis.phenomena import EXPERIMENTS, load_experiment, run_names


def _run(method: str, seed: int, value: float, *, k: float = 0.4, steps: int = 6) -> Run:
    rows = [{"step": s, "entropy": value, "reward": value, "qae/neg_correct": 1.0} for s in range(1, steps + 1)]
    return Run(
        f"{method}-{seed}",
        method,
        seed,
        {"trainer": {"quantile_k": k}},
        rows,
        {"pass@1": value},
        {"pass@1": value, "pass@16": value},
    )


@pytest.mark.parametrize("claim", CLAIMS, ids=lambda c: c.key)
def test_every_claim_names_an_experiment_and_its_methods(claim):
    assert claim.experiment in EXPERIMENTS and claim.expect in (">", "<", ">=")
    assert claim.source.startswith(("QAE (arXiv 2509.22611)", "SA-AH-GRPO (arXiv 2606.05434)", "no paper"))
    methods = {m for _, m, _ in run_names(claim.experiment)}
    for method, _ in (claim.a, claim.b):
        name, _, k = method.partition("@")
        assert name in methods, (claim.key, method)
        assert not k or float(k) in EXPERIMENTS[claim.experiment]["k_values"]


def _judged(a_values, b_values, expect=">"):
    claim = next(c for c in CLAIMS if c.key == "pass1")
    claim = type(claim)(**{**claim.__dict__, "expect": expect})
    runs = [_run("qae+clip_higher", s, v) for s, v in enumerate(a_values)]
    runs += [_run("mean+clip_higher", s, v) for s, v in enumerate(b_values)]
    return judge(claim, {"entropy": runs})


def test_verdicts_on_hand_made_runs():
    assert _judged([0.6, 0.62, 0.64], [0.4, 0.42, 0.44]).verdict == "holds"
    assert _judged([0.4, 0.42, 0.44], [0.6, 0.62, 0.64]).verdict == "reversed"
    assert _judged([0.4, 0.6, 0.5], [0.45, 0.55, 0.5]).verdict == "no difference (the seed ranges overlap)"
    assert _judged([0.4, 0.42, 0.44], [0.6, 0.62, 0.64], "<").verdict == "holds"
    # "kept or improved": holds unless every seed is lower
    assert _judged([0.4, 0.6, 0.5], [0.45, 0.55, 0.5], ">=").verdict == "holds (no lower: within the seed spread)"
    assert _judged([0.4, 0.6, 0.5], [0.45, 0.55, 0.5], ">=").why.endswith("within the seed spread, so not lower")
    assert _judged([0.3, 0.31, 0.32], [0.6, 0.62, 0.64], ">=").verdict == "reversed"
    assert _judged([0.6], [0.4]).verdict == "not shown (too few seeds)"


def test_the_sentence_carries_source_claim_numbers_and_seeds():
    j = _judged([0.6, 0.62, 0.64], [0.4, 0.42, 0.44])
    assert j.sentence.startswith('QAE (arXiv 2509.22611): "QAE raises pass@1 over the mean baseline".')
    assert "qae+clip_higher 0.620±0.016 vs mean+clip_higher 0.420±0.016 (3 and 3 seeds)" in j.sentence
    assert "difference +0.200 = 12.2 seed spreads, every seed apart; expected >: holds." in j.sentence
    assert j.why == "qae+clip_higher 0.620 vs mean+clip_higher 0.420: every one of the 3 + 3 seeds apart"
    assert judge(CLAIMS[0], {"entropy": []}).sentence.endswith("no runs of mean+clip_higher or qae+clip_higher.")
    with pytest.raises(ValueError, match="runs hold no experiment 'entropy'"):
        judge(CLAIMS[0], {})


def test_measures_by_hand():
    rows = [{"step": s, "entropy": float(s), "reward": float(s % 2)} for s in range(1, 10)]
    run = Run("r", "mean", 0, {}, rows, {"pass@1": 0.2}, {"pass@1": 0.5})
    assert window("entropy", "first").number(run) == 2.0 and window("entropy", "middle").number(run) == 5.0
    assert evaluation("before", "pass@1").number(run) == 0.2 and total("entropy").number(run) == 45.0
    assert variance("reward", 2).number(run) == pytest.approx(0.25)
    with pytest.raises(ValueError, match="part must be one of"):
        window("entropy", "end")
    with pytest.raises(ValueError, match="when must be 'before' or 'after'"):
        evaluation("later", "pass@1")


def test_the_k_sweep_side_picks_runs_by_k():
    claim = next(c for c in CLAIMS if c.key == "k_entropy")
    runs = [_run("qae", s, 0.5 + 0.01 * s, k=0.8) for s in range(3)] + [
        _run("qae", s, 0.2 + 0.01 * s, k=0.2) for s in range(3)
    ]
    runs += [_run("qae", s, 9.0, k=0.4) for s in range(3)]  # neither side
    j = judge(claim, {"k_sweep": runs})
    assert j.verdict == "holds" and j.effect.a.mean == pytest.approx(0.51) and j.effect.b.mean == pytest.approx(0.21)


@pytest.mark.parametrize("claim", CLAIMS, ids=lambda c: c.key)
def test_every_claim_is_judged_on_the_committed_runs(claim):
    runs = {claim.experiment: load_experiment(find_reference_runs(), claim.experiment)}
    j = judge(claim, runs)
    assert j.effect is not None and j.effect.a.n >= 3 and j.effect.b.n >= 3, j.sentence
    assert j.kind in VERDICTS[:4] and claim.statement in j.sentence and j.why


def test_sharpening_words_follow_the_numbers():
    ev = lambda p1, p32, d: {"pass@1": p1, "pass@32": p32, "distinct_correct": d}  # noqa: E731
    before = ev(0.4, 0.9, 10.0)
    cases = {
        "pass@1 fell: unlearned": ev(0.3, 0.9, 10.0),
        "pass@1 and pass@32 both rose": ev(0.5, 0.95, 8.0),
        "sharpened: pass@1 up, pass@32 not, fewer distinct correct texts": ev(0.5, 0.9, 8.0),
        "no sign of sharpening": ev(0.5, 0.88, 11.0),
    }
    ceiling = ev(0.4, 1.0, 10.0)  # pass@32 cannot rise from 1.000: only the distinct texts can say
    for after, word in ((ev(0.5, 1.0, 8.0), "fewer of them, sharpened"), (ev(0.5, 1.0, 11.0), "no sign of it")):
        [line] = sharpening_sentences([Run("r", "qae", 0, {}, [], ceiling, after)])
        assert "pass@32 was already 1.000 before training and could not rise" in line and line.endswith(word + "."), (
            line
        )
    for word, after in cases.items():
        [line] = sharpening_sentences([Run("r", "qae", 0, {}, [], before, after)])
        assert line.endswith(word + "."), line
    assert sharpening_sentences([Run("r", "qae", 0, {}, [], None, None)]) == []  # no evaluation: nothing to say


def test_punished_correct_counts_and_clip_shares():
    cfg = {"trainer": {"generation_batch_size": 8}}
    rows = [{"step": s, "reward": 6.0, "qae/neg_correct": 1.0, "qae/success_rate": 0.5} for s in (1, 2)]
    runs = [Run(f"q{s}", "qae", s, cfg, rows, None, None) for s in range(2)] + [
        Run("m", "mean", 0, cfg, rows, None, None)
    ]
    text = punished_correct_sentence(runs)
    assert "qae gave 2.0±0.0 correct answers a negative advantage per run (2 seeds), 25.00% of the 8 correct" in text
    assert punished_correct_sentence(runs, "sa_ah") == "no sa_ah runs"
    clip_rows = [
        {"step": 1, "reward": 1.0, "clip_ratio/region_mean": 0.0},
        {"step": 2, "clip_ratio/region_mean": 0.01},
        {"step": 3, "clip_ratio/region_mean": 0.03},
    ]
    assert "mean 2.00%±0.00% (1 seeds)" in clip_sentence([Run("m", "mean", 0, {}, clip_rows, None, None)])


def test_direction_is_side_a_to_side_b_with_the_pooled_seed_std():
    d = direction(_judged([0.6, 0.62, 0.64], [0.4, 0.42, 0.44]))  # pass1: qae+clip_higher vs mean+clip_higher
    assert (d.before, d.after) == (pytest.approx(0.62), pytest.approx(0.42))
    assert d.tolerance == pytest.approx((0.02 * 0.02 * 2 / 3) ** 0.5)  # both sides' population std
    assert d.quantity == "the pass@1 after training"
    assert d.change == "the method changed from qae+clip_higher to mean+clip_higher"
    length = next(c for c in CLAIMS if c.key == "length")  # one method, two windows of its run
    rows = [{"step": s, "completions/mean_length": 100.0 - s} for s in range(1, 10)]
    runs = [Run(f"sa_ah-{s}", "sa_ah", s, {}, rows, None, None) for s in range(2)]
    d = direction(judge(length, {"composite": runs}))
    assert (d.before, d.after, d.tolerance) == (98.0, 92.0, 0.0)
    assert d.change.startswith("sa_ah's mean completions/mean_length over the first third")
    with pytest.raises(ValueError, match="has no runs on a side"):
        direction(judge(CLAIMS[0], {"entropy": []}))
    with pytest.raises(ValueError, match="judgement must be"):
        direction("holds")


def test_summary_counts_verdicts_per_paper_and_gives_the_numbers_of_the_decided_ones():
    held, overlap = _judged([0.6, 0.62, 0.64], [0.4, 0.42, 0.44]), _judged([0.4, 0.6, 0.5], [0.45, 0.55, 0.5])
    lines = summary_lines([held, overlap, judge(CLAIMS[-1], {"composite": []})])
    assert lines[0] == "3 claims judged: 1 holds, 0 reversed, 1 no difference, 0 cannot be tested here, 1 not shown."
    assert lines[1:3] == [
        "  QAE: 2 claims: 1 holds, 0 reversed, 1 no difference, 0 cannot be tested here, 0 not shown.",
        "  no paper: 1 claim: 0 hold, 0 reversed, 0 no difference, 0 cannot be tested here, 1 not shown.",
    ]
    assert lines[3:] == ["holds: pass1: qae+clip_higher 0.620 vs mean+clip_higher 0.420 (+12.2 seed spreads)."]
    with pytest.raises(ValueError, match="Judgement"):
        summary_lines(["holds"])


def test_summary_of_the_committed_runs_adds_up():
    runs = {name: load_experiment(find_reference_runs(), name) for name in EXPERIMENTS}
    judged = [judge(c, runs) for c in CLAIMS]
    lines = summary_lines(judged)
    assert lines[0].startswith(f"{len(CLAIMS)} claims judged: ")
    decided = [j for j in judged if j.kind in ("holds", "reversed")]
    assert len(lines) == 1 + 3 + len(decided)  # the total, three sources, one line per decided claim


def _entropy_run(method: str, values, seed: int = 0, clip: float | None = None) -> Run:
    rows = [{"step": t, "reward": 0.5, "entropy": v} for t, v in enumerate(values, 1)]
    if clip is not None:
        rows += [{"step": len(values) + 1, "clip_ratio/region_mean": clip}]  # a pass that reuses the generation
    return Run(f"{method}-{seed}", method, seed, {}, rows, None, None)


def test_rose_needs_a_control_that_explodes():
    flat = [0.17] * 30
    assert rose("mean")([_entropy_run("mean", flat)]).startswith("mean's entropy never rose above 1.00x its start")
    spike = [0.17] * 10 + [0.3] * 10 + [0.17] * 10  # a 10-step average of 0.3: 1.76x the start
    assert rose("mean")([_entropy_run("mean", flat, 0), _entropy_run("mean", spike, 1)]) is None  # one run suffices
    assert rose("mean", factor=2.0)([_entropy_run("mean", spike)]).startswith("mean's entropy never rose above 1.76x")
    assert rose("mean")([_entropy_run("qae", spike)]) == "no run of mean logs entropy for 20 steps or more"
    assert rose("mean")([_entropy_run("mean", [0.1, 9.0] * 5)]).startswith("no run of mean")  # 10 steps: too short


def test_fell_needs_a_control_that_collapses():
    assert fell("mean")([_entropy_run("mean", [0.2] * 10 + [0.05] * 20)]) is None  # the last third at 0.25x
    slow = [0.2] * 10 + [0.15] * 20  # 0.75x
    assert fell("mean")([_entropy_run("mean", slow)]).startswith("mean's entropy fell only from 0.200 to 0.150 (0.75x")
    assert fell("mean", to=0.8)([_entropy_run("mean", slow)]) is None


def test_clip_acted_needs_a_clip_that_acts():
    runs = [_entropy_run("m", [0.1] * 3, s, clip) for s, clip in enumerate([0.0003, 0.0002])]
    assert clip_acted()(runs) == (
        "the clip acted on at most 0.03% of the tokens: widening it (Clip-Higher) could not matter"
    )
    assert clip_acted()(runs + [_entropy_run("m", [0.1] * 3, 2, 0.004)]) is None
    assert clip_acted()([_entropy_run("m", [0.1] * 3)]) == "no run reuses a generation, so the clip never acts"


def test_a_claim_whose_checks_fail_cannot_be_tested_whatever_the_numbers():
    explosion = next(c for c in CLAIMS if c.key == "explosion")
    # every seed apart in the expected direction, but the control never rose and the clip never acted
    runs = [_entropy_run("mean+clip_higher", [0.3 + 0.01 * s] * 30, s, 0.0001) for s in range(3)]
    runs += [_entropy_run("qae+clip_higher", [0.2 + 0.01 * s] * 30, s, 0.0001) for s in range(3)]
    j = judge(explosion, {"entropy": runs})
    assert j.effect.apart and j.kind == "cannot be tested here"
    assert j.why.startswith("mean+clip_higher's entropy never rose above 1.00x its start") and "0.01%" in j.why
    assert j.sentence.endswith(f"expected >: cannot be tested here: {j.why}.")


def test_the_scoreboard_says_each_verdict_in_plain_words():
    held, overlap = _judged([0.6, 0.62, 0.64], [0.4, 0.42, 0.44]), _judged([0.4, 0.6, 0.5], [0.45, 0.55, 0.5])
    rows = scoreboard([held, overlap, judge(CLAIMS[-1], {"composite": []})])
    assert [r["verdict"] for r in rows] == ["holds", "tested, no difference", "not shown"]
    assert [r["paper"] for r in rows] == ["QAE", "QAE", "the lab"]
    assert rows[0]["claim"] == "QAE ends with a higher pass@1" and rows[1]["why"].endswith(
        "the seeds overlap, 0.0 seed spreads"
    )
    table = scoreboard_markdown(rows).splitlines()
    assert table[0] == "| claim | paper | verdict | why |" and len(table) == 2 + len(rows)
    assert "| **tested, no difference** |" in table[3]
    with pytest.raises(ValueError, match="Judgement"):
        scoreboard(["holds"])


def test_the_committed_scoreboard_separates_untestable_from_no_difference():
    runs = {name: load_experiment(find_reference_runs(), name) for name in EXPERIMENTS}
    rows = {c.key: r for c, r in zip(CLAIMS, scoreboard(judge(c, runs) for c in CLAIMS))}
    assert all(r["claim"] and r["why"] for r in rows.values())
    # what the committed entropy runs can and cannot test, from their own logs (see the checks' tests above)
    for key in ("explosion", "collapse"):
        if rows[key]["verdict"] == "cannot be tested here":
            assert "to prevent" in rows[key]["why"] and "Clip-Higher" in rows[key]["why"]


def _held_out_run(method: str, seed: int, hard, easy) -> Run:
    rows = [
        {"step": 1 + 10 * i, "regime_eval/entropy_hard": h, "regime_eval/entropy_easy": e}
        for i, (h, e) in enumerate(zip(hard, easy))
    ]
    return Run(f"{method}-{seed}", method, seed, {}, rows, None, None)


def test_the_regime_checks_need_a_held_out_control_that_explodes_or_collapses():
    calm = _held_out_run("mean+clip_higher", 0, [0.2, 0.21, 0.2], [0.2, 0.19, 0.18])
    wild = _held_out_run("mean+clip_higher", 1, [0.2, 0.3, 0.25], [0.2, 0.1, 0.05])
    assert regime_rose("mean+clip_higher")([calm]).endswith("1.05x its start: there was no explosion to prevent")
    assert regime_rose("mean+clip_higher")([calm, wild]) is None  # one run that rose 1.5x suffices
    assert regime_fell("mean+clip_higher")([calm]).startswith(
        "mean+clip_higher's entropy on the prompts that start easiest fell only to 0.90x its start"
    )
    assert regime_fell("mean+clip_higher")([calm, wild]) is None  # 0.25x
    assert regime_rose("qae")([calm]) == "no run of qae measured its held-out hard prompts"


def test_the_regime_claims_compare_the_held_out_groups():
    hard_claim = next(c for c in CLAIMS if c.key == "hard_regime")
    runs = [_held_out_run("mean+clip_higher", s, [0.2, 0.3 + 0.01 * s, 0.2], [0.2] * 3) for s in range(3)]
    runs += [_held_out_run("qae+clip_higher", s, [0.2, 0.22 + 0.01 * s, 0.2], [0.2] * 3) for s in range(3)]
    j = judge(hard_claim, {"regimes": runs})
    assert j.kind == "holds" and j.effect.a.mean == pytest.approx(1.55) and j.effect.b.mean == pytest.approx(1.15)
    assert held_out("hard", "peak/start").number(runs[0]) == pytest.approx(1.5)
