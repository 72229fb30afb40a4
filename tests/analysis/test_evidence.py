"""Tests for qae_lab.analysis.evidence: each claim's numbers in each setting are the committed data's (read here
independently of the module), every verdict is of the one vocabulary, and the controls decide what cannot be tested."""

from __future__ import annotations

import json
import re
import statistics

import pytest

from qae_lab.analysis import evidence
from qae_lab.analysis.claims import CLAIMS, SETTINGS, VERDICTS, matrix, scoreboard
from qae_lab.analysis.committed_data import data_dir
from qae_lab.analysis.compare import Run, find_reference_runs

KEYS = {c.key for c in CLAIMS}


def _json(folder: str, name: str) -> dict:
    return json.loads((data_dir(folder) / name).read_text(encoding="utf-8"))


def _log(run: str, metric: str) -> list[float]:
    path = find_reference_runs() / run / "log.jsonl"
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [r[metric] for r in rows if r.get(metric) is not None and "reward" in r]


def test_every_entry_names_a_claim_and_a_setting():
    assert {k for k, _, _ in evidence.EVIDENCE} <= KEYS and {s for _, s, _ in evidence.EVIDENCE} <= set(SETTINGS)
    assert KEYS - {k for k, _, _ in evidence.EVIDENCE} == set()  # every claim measured somewhere


@pytest.mark.parametrize("optimizer, variant", [("adam", "Adam"), ("sgd", "SGD")])
def test_the_sequence_policy_numbers_are_the_committed_runs(optimizer, variant):
    runs = _json("seqpolicy", "regimes.json")["runs"]
    e, v = evidence.judge("hard_prop42", "sequence policy", variant)
    assert e.values_a == runs[f"{optimizer}/quantile K=0.4/clip-higher"]["groups"]["hard"]["peak_ratio"]
    assert e.values_b == runs[f"{optimizer}/mean/clip-higher"]["groups"]["hard"]["peak_ratio"]
    assert v.n == 16 and v.a == pytest.approx(statistics.fmean(e.values_a))


def test_the_headline_verdicts_of_the_sequence_policy():
    # QAE's Prop. 4.2 shows in training under Adam on both regimes, and not under plain SGD; SA-AH raises the update's
    # variance from a flat start, a row of its own (not the training-variance claim)
    words = {
        (c, var): evidence.judge(c, "sequence policy", var)[1].word
        for c, s, var in evidence.EVIDENCE
        if s == "sequence policy"
    }
    assert words["hard_prop42", "Adam"] == words["easy_prop42", "Adam"] == "holds"
    assert words["hard_prop42", "SGD"] == words["easy_prop42", "SGD"] == "no difference"
    assert words["saah_update_variance", "flat start"] == "reversed"
    assert not any(c == "saah_variance" for c, _ in words)
    variance = _json("seqpolicy", "findings.json")["variance"]["per_start"]["flat"]
    e, v = evidence.judge("saah_update_variance", "sequence policy", "flat start")
    assert v.a == pytest.approx(statistics.fmean(variance["SA-AH, alpha = 0.5"]["trace_var"]))
    assert v.b == pytest.approx(statistics.fmean(variance["alpha = 0"]["trace_var"])) and v.agree == 0


def test_the_cpu_preset_numbers_are_the_committed_runs():
    e, v = evidence.judge("qae_pass1", "CPU preset")
    after = [
        json.loads((find_reference_runs() / f"{m}-seed{s}" / "summary.json").read_text())["after"]["summary"]["pass@1"]
        for m in ("qae", "mean")
        for s in (0, 1, 2)
    ]
    assert e.values_a == after[:3] and e.values_b == after[3:]
    zero = evidence.judge("sparsity", "CPU preset")[0].values_a[0]
    values = _log("qae-seed0", "qae/zero_adv_frac")
    n = len(values)  # one row per step: the last third of the 400 steps
    assert zero == pytest.approx(statistics.fmean(values[2 * n // 3 :]), rel=1e-9)


def test_a_control_that_never_explodes_makes_the_claim_untestable(monkeypatch):
    e, v = evidence.judge("explosion", "sequence policy", "Adam")
    assert v.word == "cannot be tested here" and "no explosion to prevent" in v.why
    assert max(e.values_b) < evidence.ROSE  # the reason is the data's
    # a control that does explode makes it testable
    flat = _json("seqpolicy", "regimes.json")
    for name in ("adam/mean/clip-higher",):
        flat["runs"][name]["groups"]["mixed"]["peak_ratio"] = [1.5] * 16
    monkeypatch.setattr(evidence, "_regimes", lambda: flat)
    assert evidence.judge("explosion", "sequence policy", "Adam")[1].word == "holds"


def test_every_verdict_is_of_the_one_vocabulary_and_the_tables_cover_every_entry():
    judged = evidence.judge_all()
    assert {v.word for _, v in judged.values()} <= set(VERDICTS)
    assert len(scoreboard(judged)) == len(evidence.EVIDENCE)
    rows = matrix(judged)
    assert len(rows) == len(KEYS) and all(set(r) == {"claim", *SETTINGS} for r in rows)


def test_the_bandit_numbers_are_the_committed_file_and_the_expected_step_is_equal_by_construction():
    data = _json("bandit", "prop42.json")
    for regime in ("hard", "easy"):
        e, v = evidence.judge(f"{regime}_prop42", "expected step")
        assert e.values_a == data[regime]["expected_step"]["quantile"]
        assert e.values_b == data[regime]["expected_step"]["mean"]
        assert v.word == "equal by construction" and "cancels" in v.why
        e, v = evidence.judge(f"{regime}_prop42", "sampled groups")
        assert e.values_a == data[regime]["sampled"]["quantile"] and v.n == data["meta"]["n_bandits"]
        # in expectation over sampled groups the quantile baseline moves entropy more, the same way as the mean
        assert v.word == "reversed"


def test_the_zero_advantage_share_is_judged_against_about_80_percent():
    # the quantile baseline's share alone, against the band [0.70, 0.90]: notebook 09's sweep measures 0.987
    runs = _json("seqpolicy", "findings.json")["runs"]
    e, v = evidence.judge("sparsity", "sequence policy", "SGD")
    assert e.values_a == runs["peaked/quantile K=0.4/clip-higher/std"]["zero_adv_frac"] and e.values_b == []
    assert v.a == pytest.approx(statistics.fmean(e.values_a)) and v.a > 0.9
    assert v.word == "outside the stated size"
    assert evidence.judge("sparsity", "CPU preset")[1].word == "holds"  # 0.81 [0.80, 0.82]


def _entropy_run(method: str, seed: int, later: float) -> Run:
    """A run of 30 steps whose entropy is 1.0 for the first 10 and ``later`` after (peak / start = ``later``, the
    trailing 10-step average reaching it), and one pass that reuses a generation with 1% of the tokens clipped."""
    rows = [{"step": s, "reward": 0.5, "entropy": 1.0 if s <= 10 else later} for s in range(1, 31)]
    return Run(
        f"{method}-seed{seed}", method, seed, {}, [*rows, {"step": 30, "clip_ratio/region_mean": 0.01}], None, None
    )


@pytest.mark.parametrize(
    "mean_later, quantile_later, word",
    [
        # the mean baseline's peak / start 1.0, 1.05, 1.09 (< ROSE = 1.1): no explosion to prevent, whatever the
        # quantile side does (its 2.0 would be an explosion)
        ([1.0, 1.05, 1.09], [2.0, 2.0, 2.0], "cannot be tested here"),
        # the mean baseline explodes (2.0, 2.1, 2.2), the quantile baseline stays flat (1.0): testable, and it holds
        ([2.0, 2.1, 2.2], [1.0, 1.0, 1.0], "holds"),
    ],
)
def test_the_sums_models_explosion_claim_reads_the_mean_baselines_control(
    monkeypatch, mean_later, quantile_later, word
):
    # Planted bug: _trend's control read the quantile side, `why = _control(a, which == 1) or ...` -> both cases
    # fail (the first is judged "reversed", the second "cannot be tested here")
    runs = [_entropy_run("mean+clip_higher", s, x) for s, x in enumerate(mean_later)]
    runs += [_entropy_run("qae+clip_higher", s, x) for s, x in enumerate(quantile_later)]
    monkeypatch.setattr(evidence, "_experiment", lambda name: runs)
    e, v = evidence.judge("explosion", "sums model")
    assert e.values_a == pytest.approx(quantile_later, rel=1e-12) and e.values_b == pytest.approx(mean_later, rel=1e-12)
    assert v.word == word
    if word == "cannot be tested here":
        assert v.why == "the mean baseline's entropy never rose to 1.1x its start: no explosion to prevent"
    else:  # quantile 1.0 against the mean's (2.0 + 2.1 + 2.2) / 3 = 2.1, lower in each seed
        assert not v.why and v.a == 1.0 and v.b == pytest.approx(2.1, rel=1e-12) and v.agree == 3


def _masked(text: str) -> str:
    """A table cell with each number's digits zeroed: what stays is the label and how many decimals are shown."""
    return re.sub(r"[+-]?\d+\.(\d+)", lambda m: "0." + "0" * len(m.group(1)), text)


_NEVER_ROSE = "the mean baseline's entropy{} never rose to 1.1x its start: no explosion to prevent"
_NEVER_FELL = "the mean baseline's entropy{} never fell to 0.5x its start: no collapse to prevent"
_FOUND = "sums model, lr 3e-4"  # the setting where the search made the mean baseline's entropy explode
_CANCEL = "a constant baseline cancels in the exact expected gradient: E_pi[grad log pi] = 0"
# the scoreboard's rows as a participant reads them, in CLAIMS' and SETTINGS' order: setting, what is measured, side a
# and side b (label, and the number with the decimals shown, digits zeroed), the verdict on the committed data, and
# the reason where the verdict is "cannot be tested here" or "equal by construction" (None: not compared here)
_SCOREBOARD = [
    ("expected step", "entropy change of the exact expected step, hard bandits", "quantile 0.000000",
     "mean 0.000000", "equal by construction", _CANCEL),
    ("sampled groups", "expected entropy change of sampled groups, hard bandits", "quantile 0.000000",
     "mean 0.000000", "reversed", None),
    ("sequence policy, Adam", "entropy peak / start, the 4 hardest prompts", "quantile 0.000", "mean 0.000", "holds",
     None),
    ("sequence policy, SGD", "entropy peak / start, the 4 hardest prompts", "quantile 0.000", "mean 0.000",
     "no difference", None),
    ("sums model", "held-out entropy peak / start, hardest quarter", "quantile 0.000", "mean 0.000",
     "cannot be tested here", _NEVER_ROSE.format(" on the prompts that start hardest")),
    (_FOUND, "held-out entropy peak / start, hardest quarter", "quantile 0.000", "mean 0.000", "no difference",
     None),
    ("expected step", "entropy change of the exact expected step, easy bandits", "quantile 0.000000",
     "mean 0.000000", "equal by construction", _CANCEL),
    ("sampled groups", "expected entropy change of sampled groups, easy bandits", "quantile 0.000000",
     "mean 0.000000", "reversed", None),
    ("sequence policy, Adam", "entropy at step 10, the 4 easiest prompts", "quantile 0.000", "mean 0.000", "holds",
     None),
    ("sequence policy, SGD", "entropy at step 10, the 4 easiest prompts", "quantile 0.000", "mean 0.000",
     "no difference", None),
    ("sums model", "held-out entropy final / start, easiest quarter", "quantile 0.000", "mean 0.000",
     "cannot be tested here", _NEVER_FELL.format(" on the prompts that start easiest")),
    (_FOUND, "held-out entropy final / start, easiest quarter", "quantile 0.000", "mean 0.000",
     "cannot be tested here", _NEVER_FELL.format(" on the prompts that start easiest")),
    ("sequence policy, Adam", "entropy peak / start, all prompts", "quantile 0.000", "mean 0.000",
     "cannot be tested here", _NEVER_ROSE.format("")),
    ("sums model", "entropy peak / start (10-step averages)", "quantile 0.000", "mean 0.000",
     "cannot be tested here", _NEVER_ROSE.format("")),
    (_FOUND, "entropy peak / start (10-step averages)", "quantile 0.000", "mean 0.000", "no difference", None),
    ("CPU preset", "entropy peak / start (10-step averages)", "quantile 0.000", "mean 0.000",
     "cannot be tested here", _NEVER_ROSE.format("")),
    ("sequence policy, Adam", "entropy at step 200, all prompts", "quantile 0.000", "mean 0.000", "holds", None),
    ("sums model", "entropy over the last third / start", "quantile 0.000", "mean 0.000", "cannot be tested here",
     _NEVER_FELL.format("")),
    (_FOUND, "entropy over the last third / start", "quantile 0.000", "mean 0.000", "cannot be tested here",
     _NEVER_FELL.format("")),
    ("CPU preset", "entropy over the last third / start", "quantile 0.000", "mean 0.000", "no difference", None),
    ("sequence policy, SGD", "share of responses with zero advantage", "quantile 0.000",
     "the stated size [0.00, 0.00]", "outside the stated size", None),
    ("sums model", "share of responses with zero advantage (last third)", "quantile 0.000",
     "the stated size [0.00, 0.00]", "at the band's edge", None),
    (_FOUND, "share of responses with zero advantage (last third)", "quantile 0.000",
     "the stated size [0.00, 0.00]", "outside the stated size", None),
    ("CPU preset", "share of responses with zero advantage (last third)", "quantile 0.000",
     "the stated size [0.00, 0.00]", "holds", None),
    ("sequence policy, SGD", "entropy at the last step", "K = 0.0 0.000", "K = 0.0 0.000", "holds", None),
    ("sums model", "entropy over the last third", "K = 0.0 0.0000", "K = 0.0 0.0000", "no difference", None),
    ("sums model", "pass@1 after training", "quantile 0.000", "mean 0.000", "no difference", None),
    (_FOUND, "pass@1 after training", "quantile 0.000", "mean 0.000", "no difference", None),
    ("CPU preset", "pass@1 after training", "quantile 0.000", "mean 0.000", "no difference", None),
    ("sums model", "pass@16 after training", "quantile 0.000", "mean 0.000", "no difference", None),
    (_FOUND, "pass@8 after training", "quantile 0.000", "mean 0.000", "no difference", None),
    ("CPU preset", "pass@8 after training", "quantile 0.000", "mean 0.000", "no difference", None),
    ("sums model", "training variance of the reward", "SA-AH 0.0000", "plain 0.0000", "no difference", None),
    ("CPU preset", "training variance of the reward", "SA-AH 0.0000", "plain 0.0000", "no difference", None),
    ("sequence policy, flat start", "trace of the update's covariance (1,000 sampled updates)", "SA-AH 0.000",
     "plain 0.000", "reversed", None),
    ("sequence policy, peaked start", "trace of the update's covariance (1,000 sampled updates)", "SA-AH 0.000",
     "plain 0.000", "no difference", None),
    ("sums model", "mean completion length (tokens)", "last third 0.0", "first third 0.0", "no difference", None),
    ("CPU preset", "mean completion length (tokens)", "last third 0.0", "first third 0.0", "no difference", None),
    ("sums model", "mean horizon weight of failed rollouts", "last third 0.000", "first third 0.000",
     "no difference", None),
    ("CPU preset", "mean horizon weight of failed rollouts", "last third 0.000", "first third 0.000", "holds", None),
    ("sums model", "pass@1 after training", "SA-AH 0.000", "plain 0.000", "no difference", None),
    ("CPU preset", "pass@1 after training", "SA-AH 0.000", "plain 0.000", "no difference", None),
    ("sums model", "correct answers given A < 0, summed over the steps", "mean 0.0", "quantile 0.0",
     "no difference", None),
]  # fmt: skip


def test_the_scoreboard_shows_each_entrys_quantity_labels_digits_and_verdict():
    # What a participant reads in the scoreboard: each row's measured quantity, the two sides' labels, the decimals
    # each side is shown with (Evidence.digits: 6 for the bandit's tiny entropy changes, 4 for the K sweep and the
    # training variance, 1 for lengths and counts, else 3), the verdict, and the controls' reasons in words.
    # Planted (each -> fails): a label, a measured text or digits of _bandit, _seqpolicy, _findings_runs, _held_out,
    # _trend, _share, _two, _within, _update_variance changed or dropped (e.g. "quantile" -> "QUANTILE", digits=6 ->
    # 7); _held_out's control: `explode = key != "peak/start"`, `why = None`, where-text dropped or
    # "hardest"/"easiest" fixed; _seqpolicy's `key == "peak_ratio" or group == "mixed"`, `_control(ratios, True)`;
    # _trend checking the clip for the CPU preset too (`if clip or True`)
    judged = evidence.judge_all()
    rows = [
        (r["setting"], r["measured"], _masked(r["a"]), _masked(r["b"]), r["verdict"], r["why"])
        for r in scoreboard(judged)
    ]
    assert [row[:5] for row in rows] == [row[:5] for row in _SCOREBOARD]
    for row, expected in zip(rows, _SCOREBOARD):
        if expected[5] is not None:
            assert row[5] == expected[5], row


def test_a_testable_entry_has_no_why_and_a_size_has_no_b_side():
    # Evidence.why: "None: it can" (test the claim), not an empty string; a claim of a size: values_b empty (a list)
    # Planted: _seqpolicy's `why = ""` -> fails; _share's values_b None -> fails
    judged = evidence.judge_all()
    for key, (e, v) in judged.items():
        if v.word != "cannot be tested here":
            assert e["why"] is None, key
        if e["b"] == "the stated size":
            assert e["values_b"] == [], key


def test_judge_all_keeps_the_settings_asked_for():
    # Planted: `key[2] in settings` (the variant) -> fails; `key[1] not in settings` -> fails
    judged = evidence.judge_all(["CPU preset", "expected step"])
    expected = {k for k in evidence.EVIDENCE if k[1] in ("CPU preset", "expected step")}
    assert set(judged) == expected and len(expected) == 11


def _run(method: str, seed: int, values: list[float], metric: str = "entropy", k: float | None = None, **last) -> Run:
    """A run whose ``metric`` is ``values[i]`` at step i + 1 (with a reward, so each row is a training step), and one
    more row at the last step with ``last`` (e.g. a reused generation's clip share); ``k``: its quantile_k."""
    rows = [{"step": s, "reward": 0.5, metric: x} for s, x in enumerate(values, 1)]
    rows += [{"step": len(values), **last}] if last else []
    config = {} if k is None else {"trainer": {"quantile_k": k}}
    return Run(f"{method}-seed{seed}", method, seed, config, rows, None, None)


# 30 steps of entropy: 3.0 for steps 1-9, 0.0 at step 10, 1.0 for steps 11-20, 2.0 for 21-23, 0.0 for 24-30.
# start (steps 1-10) = 27 / 10 = 2.7; the highest full 10-step trailing average is steps 1-10's own, 2.7 (the partial
# average of steps 1-9, 3.0, is no full window), so peak / start = 1.0; the last third (steps 21-30) = 6 / 10 = 0.6,
# final / start = 0.6 / 2.7 = 2 / 9
_SHAPED = [3.0] * 9 + [0.0] + [1.0] * 10 + [2.0] * 3 + [0.0] * 7


@pytest.mark.parametrize("claim, ratio", [("explosion", 1.0), ("collapse", 2 / 9)])
def test_the_entropy_ratios_are_hand_computed_from_start_peak_and_last_third(monkeypatch, claim, ratio):
    # Planted (each -> fails): the peak over moving_average(...)[_START + 1 :] (2.3 / 2.7) or [_START - 2 :] (a 9-step
    # partial window, 3.0 / 2.7); the final over the last quarter (`// 4`: 0.0), over values[+third:] (steps 11-30:
    # 0.8), `sum(...) * third`; _ratio's `got[which] * got[0]`
    runs = [_run(m, s, _SHAPED) for m in ("mean+clip_higher", "qae+clip_higher") for s in (0, 1)]
    monkeypatch.setattr(evidence, "_experiment", lambda name: runs)
    e, _ = evidence.judge(claim, "sums model")
    assert e.values_a == e.values_b == pytest.approx([ratio, ratio], rel=1e-12)


@pytest.mark.parametrize("steps, measured", [(19, False), (20, True)])
def test_a_run_needs_twice_the_start_window_of_steps_for_its_entropy_ratios(monkeypatch, steps, measured):
    # a start (10 steps) and a peak over full 10-step windows need at least 2 x 10 = 20 steps; a shorter run has no
    # ratio (None), and a control with none is "not measured"
    # Planted (each -> fails): `len(values) <= 2 * _START` (20 steps: None), `< 3 * _START` (20 steps: None),
    # `< 2 / _START` (19 steps: a number); _ratio's `None if (got is None) and False` (19 steps: TypeError)
    runs = [_run(m, s, [1.0] * steps) for m in ("mean", "qae") for s in (0, 1)]
    monkeypatch.setattr(evidence, "_cpu_runs", lambda: runs)
    e, v = evidence.judge("collapse", "CPU preset")
    if measured:  # a flat entropy: final / start = 1.0
        assert e.values_b == pytest.approx([1.0, 1.0], rel=1e-12)
    else:
        assert e.values_a == e.values_b == [None, None]
        assert v.why == "the mean baseline's entropy was not measured"


@pytest.mark.parametrize(
    "share, why",
    [(0.0005, "the clip acted on under 0.1% of the tokens"), (0.001, None)],  # CLIPPED = 0.001: at it, the clip acts
)
def test_the_sums_models_clip_higher_claim_needs_the_clip_to_act(monkeypatch, share, why):
    # the mean baseline explodes (peak / start 2.0), so only the clip decides whether Clip-Higher's claim is testable
    # Planted (each -> fails): _trend's `_clip(runs) if clip and False`; _clip's `None if ... or True`,
    # `max(shares) > CLIPPED` (0.001: untestable), `100 / CLIPPED` in the reason ("100000.0%")
    later = {"mean+clip_higher": 2.0, "qae+clip_higher": 1.0}
    runs = [
        _run(m, s, [1.0] * 10 + [x] * 20, **{"clip_ratio/region_mean": share})
        for m, x in later.items()
        for s in (0, 1, 2)
    ]
    monkeypatch.setattr(evidence, "_experiment", lambda name: runs)
    e, v = evidence.judge("explosion", "sums model")
    assert e.why == why
    assert v.word == ("cannot be tested here" if why else "holds")


def test_the_k_sweep_pairs_k_08_against_k_02_by_seed(monkeypatch):
    # the last third's entropy of the quantile runs at K = 0.8 against K = 0.2, on the seeds both ran (0 and 1; K = 0.8
    # also ran seed 2), ignoring K = 0.5; each run's entropy is K + seed / 100 throughout
    # Planted (each -> fails): _by_seed's `quantile_k != k`; _sides' k_a or k_b dropped (None: any K, the last run of
    # each seed); `set(a) | set(b)` (seed 2 has no K = 0.2 run: KeyError)
    runs = [
        _run("qae", s, [k + s / 100] * 30, k=k)
        for k, seeds in ((0.8, (0, 1, 2)), (0.5, (0, 1, 2)), (0.2, (0, 1)))
        for s in seeds
    ]
    monkeypatch.setattr(evidence, "_experiment", lambda name: runs)
    e, _ = evidence.judge("k_entropy", "sums model")
    assert e.values_a == pytest.approx([0.80, 0.81], rel=1e-12) and e.values_b == pytest.approx([0.20, 0.21], rel=1e-12)


def test_within_a_run_the_last_third_is_against_the_first(monkeypatch):
    # the mean completion length of SA-AH's runs: seed 0 logs length = step over 30 steps (first third, steps 1-10:
    # 5.5; last third, steps 21-30: 25.5); seed 1 over 3 steps (first third: step 1, 1.0; last: step 3, 3.0); seed 2
    # logged no step (no number); a mean run is not read
    # Planted (each -> fails): _third's stop `max(1, (part + 2) * n // 3)` (first third 10.5), `max(2, ...)` (seed 1's
    # first third 1.5), stop None or dropped (to the end: 15.5), `if run.rows or True` (no rows: IndexError); _within's
    # thirds (3, 0) (last: None) or (2, 1) (first: the middle third, 15.5), metric None, method None
    metric = "completions/mean_length"
    runs = [
        _run("sa_ah", 0, [float(s) for s in range(1, 31)], metric),
        _run("sa_ah", 1, [1.0, 2.0, 3.0], metric),
        _run("sa_ah", 2, [], metric),
        _run("mean", 0, [100.0] * 30, metric),
    ]
    monkeypatch.setattr(evidence, "_cpu_runs", lambda: runs)
    e, _ = evidence.judge("saah_length", "CPU preset")
    assert e.values_a == [25.5, 3.0, None] and e.values_b == [5.5, 1.0, None]  # means of whole numbers: exact


def test_the_composite_sums_are_hand_computed(monkeypatch):
    # the correct answers given A < 0, summed over 30 steps (mean: 1 + 2 + 3 = 6, quantile 4 + 0 + 5 = 9), and the
    # training variance of the reward (a constant reward: 0.0; a run that logs no reward: no number)
    # Planted (each -> fails): _total's `lambda run: None`, `series(run, None)` (0); _variance's `and False`
    # (always None), `or True` (no reward: ValueError), series of None / "XXrewardXX" / "REWARD" (always None)
    neg = "qae/neg_correct"
    runs = [_run("mean", s, [1.0, 2.0, 3.0] + [0.0] * 27, neg) for s in (0, 1)]
    runs += [_run("qae", s, [4.0, 0.0, 5.0] + [0.0] * 27, neg) for s in (0, 1)]
    runs += [_run(m, 2, [0.0] * 30, neg) for m in ("mean", "qae")]
    no_reward = Run("sa_ah-seed2", "sa_ah", 2, {}, [{"step": 1, "entropy": 1.0}], None, None)
    runs += [_run("sa_ah", s, [1.0] * 30) for s in (0, 1)] + [no_reward, _run("mean", 3, [1.0] * 30)]
    monkeypatch.setattr(evidence, "_experiment", lambda name: runs)
    e, _ = evidence.judge("neg_correct", "sums model")
    assert e.values_a == [6.0, 6.0, 0.0] and e.values_b == [9.0, 9.0, 0.0]
    e, _ = evidence.judge("saah_variance", "sums model")
    assert e.values_a == [0.0, 0.0, None]


@pytest.mark.parametrize(
    "claim, key, values, start, why",
    [
        # the control's entropy ends at 0.45 of a start of 0.5 (final / start 0.9, above FELL = 0.5): no collapse
        (
            "collapse",
            "final_h",
            [0.45] * 16,
            [0.5] * 16,
            "the mean baseline's entropy never fell to 0.5x its start: no collapse to prevent",
        ),
        # final / start exactly FELL = 0.5: a collapse ("at most half its start"), testable
        ("collapse", "final_h", [0.5] * 16, [1.0] * 16, None),
        # peak / start exactly ROSE = 1.1: an explosion ("at least 1.1x its start"), testable
        ("explosion", "peak_ratio", [1.1] * 16, None, None),
    ],
)
def test_the_sequence_policys_controls_read_final_over_start_and_count_the_edges(
    monkeypatch, claim, key, values, start, why
):
    # Planted (each -> fails): _seqpolicy's collapse branch skipped (`key != "final_h"`, `group != "mixed"`, "FINAL_H",
    # "MIXED", ..., `why = None`), `f * h` (0.225: a collapse); _control's `max(seen) <= ROSE`, `min(seen) >= FELL`
    regimes = _json("seqpolicy", "regimes.json")
    mixed = regimes["runs"]["adam/mean/clip-higher"]["groups"]["mixed"]
    mixed[key] = values
    if start is not None:
        mixed["start_h"] = start
    monkeypatch.setattr(evidence, "_regimes", lambda: regimes)
    e, _ = evidence.judge(claim, "sequence policy", "Adam")
    assert e.why == why


@pytest.mark.parametrize(
    "claim, key, values, start",
    [
        # peak / start 1.0 in fifteen seeds, 1.2 (above ROSE = 1.1) in one: the control exploded in some seed
        ("explosion", "peak_ratio", [1.0] * 15 + [1.2], None),
        # half the seeds at exactly ROSE, the other half at 0.9
        ("explosion", "peak_ratio", [1.1, 0.9] * 8, None),
        # final / start 0.9 in fifteen seeds, 0.4 (below FELL = 0.5) in one: the control collapsed in some seed
        ("collapse", "final_h", [0.9] * 15 + [0.4], [1.0] * 16),
    ],
)
def test_a_control_that_exploded_or_collapsed_in_one_seed_only_makes_the_claim_testable(
    monkeypatch, claim, key, values, start
):
    # the module's rule: untestable only where the control never explodes (peak below ROSE x its start in EVERY seed)
    # or never collapses (final above FELL x its start in every seed); seeds mixed on both sides of the line are a
    # control that did explode (collapse) in some seed, so no reason is given.
    # Planted: _control's `max(seen) < ROSE` -> `min(seen) < ROSE` -> the explosion cases fail
    regimes = _json("seqpolicy", "regimes.json")
    mixed = regimes["runs"]["adam/mean/clip-higher"]["groups"]["mixed"]
    mixed[key] = values
    if start is not None:
        mixed["start_h"] = start
    monkeypatch.setattr(evidence, "_regimes", lambda: regimes)
    e, _ = evidence.judge(claim, "sequence policy", "Adam")
    assert e.values_b == values and e.why is None


def test_runs_that_never_reuse_a_generation_are_why_the_clip_cannot_act(monkeypatch):
    # a run with no clip share (no step reuses a generation: clipped_fraction is None) is the reason read out, word for
    # word; one whose clip acted on 0.1% or more of the tokens gives none. Planted: the reason text changed
    # ("XX...XX", upper case) -> the first assert fails
    monkeypatch.setattr(evidence, "clipped_fraction", lambda run: None)
    assert evidence._clip([object()]) == "no step reuses a generation, so the clip never acts"
    monkeypatch.setattr(evidence, "clipped_fraction", lambda run: 0.001)
    assert evidence._clip([object()]) is None
