"""qae_lab.analysis.regime_runs and qae_lab.lab.run_figures.regime_figure: the held-out groups of runs, by hand and on the
committed regimes experiment."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from qae_lab.analysis.compare import Run
from qae_lab.methods import ENTROPY_REGIME_METRICS, REGIME_EVAL_METRICS
from qae_lab.analysis.regime_runs import (
    format_regime_table,
    regime_curve,
    regime_curves,
    regime_numbers,
    regime_sentences,
    regime_table,
    seeds_agreeing,
    training_split,
)
from qae_lab.lab.run_figures import regime_figure

ROOT = Path(__file__).resolve().parents[2]


def _run(method: str, seed: int, curves: dict[str, list[float]], every: int = 10, clip: float = 0.01) -> Run:
    """A run whose ``regime_eval/entropy_<group>`` takes the values of ``curves[group]`` before steps 1, 1 + every,
    ...; success 0.2 (hard), 0.9 (easy), 0.5 (all) at the start and +0.1 at the end; ``clip`` on the steps that
    reuse a generation."""
    n = len(next(iter(curves.values())))
    rows = []
    for i in range(n):
        step = 1 + i * every
        row = {
            "step": step,
            "reward": 0.5,
            "clip_ratio/region_mean": 0.0,
            "clip_ratio/high_mean": 0.0,
            "entropy/hard": 0.3 + 0.01 * i,
            "entropy/easy": 0.1,
        }
        for group, values in curves.items():
            row[f"regime_eval/entropy_{group}"] = values[i]
            start = {"hard": 0.2, "easy": 0.9, "all": 0.5}[group]
            row[f"regime_eval/success_{group}"] = start + (0.1 if i == n - 1 else 0.0)
        rows.append(row)
        rows.append({"step": step + 1, "loss": 0.0, "clip_ratio/region_mean": clip, "clip_ratio/high_mean": clip / 4})
    return Run(f"{method}-seed{seed}", method, seed, {}, rows, None, None)


# by hand: the mean baseline's hard group peaks at 1.5 x its start, the quantile's at 1.1 x (every seed); the easy
# group ends at 0.5 x (mean) and 0.8 x (quantile); the mixed set alike under both
def _runs() -> list[Run]:
    runs = []
    for seed, wobble in ((0, 0.0), (1, 0.01), (2, -0.01)):
        runs.append(
            _run(
                "mean",
                seed,
                {
                    "hard": [0.2, 0.3 + wobble, 0.25],
                    "easy": [0.1, 0.08, 0.05 + wobble / 10],
                    "all": [0.15, 0.16, 0.15 + wobble],
                },
            )
        )
        runs.append(
            _run(
                "qae",
                seed,
                {
                    "hard": [0.2, 0.22 + wobble, 0.21],
                    "easy": [0.1, 0.09, 0.08 + wobble / 10],
                    "all": [0.15, 0.155, 0.15 - wobble],
                },
                clip=0.02,
            )
        )
    return runs


def test_curve_and_numbers_by_hand():
    run = _runs()[0]
    assert regime_curve(run, "hard") == ([0, 10, 20], [0.2, 0.3, 0.25])  # updates before each measurement
    n = regime_numbers(run, "hard")
    assert (n["start"], n["peak"], n["final"]) == (0.2, 0.3, 0.25)
    assert n["peak/start"] == pytest.approx(1.5) and n["final/start"] == pytest.approx(1.25)
    assert regime_numbers(run, "hard", "success")["final"] == pytest.approx(0.3)
    # no measurement before the first update: no start, so no numbers
    late = Run("r", "qae", 0, {}, [{"step": 5, "regime_eval/entropy_hard": 0.2}], None, None)
    assert regime_numbers(late, "hard") is None
    zero = Run("r", "qae", 0, {}, [{"step": 1, "regime_eval/success_hard": 0.0}], None, None)
    assert regime_numbers(zero, "hard", "success")["peak/start"] is None  # no ratio to a start of 0


def test_table_over_seeds_and_agreement_by_seed():
    runs = _runs()
    rows = {(r["method"], r["group"]): r for r in regime_table(runs)}
    assert sorted(rows) == [(m, g) for m in ("mean", "qae") for g in ("easy", "hard", "mixed")]
    hard_mean = rows[("mean", "hard")]
    assert hard_mean["seeds"] == 3 and hard_mean["start"].mean == pytest.approx(0.2)
    # peak/start over seeds: 0.30 / 0.2, 0.31 / 0.2, 0.29 / 0.2 -> mean 1.5, population std 0.05 * sqrt(2/3)
    assert hard_mean["peak/start"].mean == pytest.approx(1.5)
    assert hard_mean["peak/start"].std == pytest.approx(0.05 * (2 / 3) ** 0.5)
    assert seeds_agreeing(runs, "qae", "mean", "hard", "peak/start") == (3, 0, 3)
    assert seeds_agreeing(runs, "mean", "qae", "easy", "final/start") == (3, 0, 3)
    # the mixed set: seed 0 ties (counted in neither), seed 1 lower under qae, seed 2 higher
    assert seeds_agreeing(runs, "qae", "mean", "all", "final/start") == (1, 1, 3)
    table = format_regime_table(regime_table(runs))
    assert table.splitlines()[0].split() == ["method", "group", "seeds", "start", "peak/start", "final", "final/start"]
    assert "1.500 ± 0.041" in table


def test_curves_over_seeds():
    c = regime_curves(_runs(), "hard")
    assert list(c) == ["mean", "qae"] and c["mean"].steps == [0, 10, 20] and c["mean"].n_runs == 3
    assert c["mean"].mean[1] == pytest.approx(0.3) and c["qae"].hi[1] == pytest.approx(0.23)


def test_training_split_first_and_last_fifth():
    s = training_split(_runs()[0])
    # 6 rows over steps 1..22, the last fifth: steps 18..22 (one regime row, step 21); the first: steps 1..5
    assert s["hard_first"] == pytest.approx(0.3) and s["hard_last"] == pytest.approx(0.32)
    assert s["easy_first"] == s["easy_last"] == pytest.approx(0.1)
    with pytest.raises(ValueError, match="last"):
        training_split(_runs()[0], last=0.0)


def test_sentences_say_what_holds_and_what_does_not():
    runs = _runs()
    hard, easy, mixed, training, outcome = regime_sentences(runs, "mean", "qae")
    assert hard.startswith("Hard prompts") and "lower under the quantile baseline in 3 of 3 seeds" in hard
    assert "no-explosion side holds here" in hard and "mean baseline (mean) 1.500 ± 0.041" in hard
    assert "start success 0.200 ± 0.000" in hard
    # the net change too: final/start 1.25 (mean) vs 1.05 (qae) in every seed
    assert "final/start mean baseline (mean) 1.250 ± 0.000, quantile (qae) 1.050 ± 0.000" in hard
    assert "direction on hard prompts (an entropy change at most the mean baseline's) holds here" in hard
    assert "higher under the quantile baseline in 3 of 3 seeds" in easy and "no-collapse side holds here" in easy
    assert "lower under the quantile baseline in 1 of 3 seeds, equal in 1" in mixed and "overlap" in mixed
    assert "quantile hard" in training and "0.320 ± 0.000" in training
    assert "mean 1.00% ± 0.00% (at the upper end, Clip-Higher's, 0.25% ± 0.00%)" in outcome
    assert "qae 2.00% ± 0.00%" in outcome
    # reversed: swap the two methods' roles
    reversed_hard = regime_sentences(runs, "qae", "mean")[0]
    assert "in 0 of 3 seeds" in reversed_hard and "side reversed here" in reversed_hard
    with pytest.raises(ValueError, match="both"):
        regime_sentences([r for r in runs if r.method == "mean"], "mean", "qae")


def test_sentences_say_not_shown_when_seeds_disagree():
    runs = [
        _run("mean", 0, {"hard": [0.2, 0.3], "easy": [0.1, 0.1], "all": [0.1, 0.1]}),
        _run("qae", 0, {"hard": [0.2, 0.25], "easy": [0.1, 0.1], "all": [0.1, 0.1]}),
        _run("mean", 1, {"hard": [0.2, 0.25], "easy": [0.1, 0.1], "all": [0.1, 0.1]}),
        _run("qae", 1, {"hard": [0.2, 0.3], "easy": [0.1, 0.1], "all": [0.1, 0.1]}),
    ]
    hard, easy = regime_sentences(runs, "mean", "qae")[:2]
    assert "1 of 2 seeds" in hard and "not shown here" in hard
    # the easy group's entropy never moved under the mean baseline: no collapse to prevent
    assert "0 of 2 seeds, equal in 2" in easy and "no-collapse side is not tested here" in easy


def test_sentences_say_not_tested_when_the_mean_baseline_never_rises():
    flat = {"hard": [0.2, 0.18, 0.17], "easy": [0.1, 0.09, 0.08], "all": [0.15, 0.14, 0.13]}
    runs = [_run(m, s, flat) for m in ("mean", "qae") for s in (0, 1)]
    hard = regime_sentences(runs, "mean", "qae")[0]
    assert "equal in 2" in hard and "no explosion to prevent" in hard and "is not tested here" in hard


def test_regime_figure_has_three_panels_and_one_legend_entry_per_method():
    fig = regime_figure(_runs(), "mean", "qae")
    named = [t.name for t in fig.data if t.showlegend is not False]
    assert named == ["mean (3 seeds)", "qae (3 seeds)"]
    assert len(fig.data) == 2 * 2 * 3  # band + line, two methods, three panels
    titles = [a.text for a in fig.layout.annotations]
    assert titles[0].startswith("hard: hardest quarter") and "start success 0.20" in titles[0]
    assert titles[2].startswith("mixed: all held-out prompts")
    assert "over 3 seeds" in fig.layout.title.text.replace("<br>", " ") and fig.layout.xaxis.title.text == "updates"
    assert regime_figure(_runs(), "mean", "qae", "success").layout.yaxis.title.text == "success rate"
    with pytest.raises(ValueError, match="quantity"):
        regime_figure(_runs(), "mean", "qae", "reward")


def test_docs_name_every_regime_metric_and_constant():
    text = (ROOT / "docs/metrics.md").read_text()
    for metric in ENTROPY_REGIME_METRICS + REGIME_EVAL_METRICS:
        assert f"`{metric}`" in text or re.search(rf"`{re.escape(metric.rsplit('_', 1)[0])}_\w+`", text), metric
    for constant in (
        "ENTROPY_HARD",
        "ENTROPY_EASY",
        "ENTROPY_UPDATED_HARD",
        "ENTROPY_UPDATED_EASY",
        "REGIME_EVAL_METRICS",
    ):
        assert constant in text, constant
    glossary = (ROOT / "docs/glossary.md").read_text()
    assert all(
        name in glossary
        for name in (
            "regime_eval_steps",
            "regime_eval_samples",
            "regime_eval_prompts",
            "entropy/hard",
            "regime_split.json",
        )
    )


# ---------------------------------------------------------------- the committed regimes experiment


def test_committed_regime_runs_share_split_and_start_per_seed():
    from qae_lab.analysis.compare import find_reference_runs
    from qae_lab.analysis.phenomena import EXPERIMENTS, PHENOMENA_DIR, load_experiment

    ref = find_reference_runs()
    runs = load_experiment(ref, "regimes")
    exp = EXPERIMENTS["regimes"]
    assert sorted({r.method for r in runs}) == sorted(exp["methods"])
    for seed in exp["seeds"]:
        same_seed = [r for r in runs if r.seed == seed]
        assert len(same_seed) == len(exp["methods"])
        # one split per seed, whatever the method: the start model's, drawn with the run's seed
        splits = {(ref / PHENOMENA_DIR / "regimes" / r.name / "regime_split.json").read_text() for r in same_seed}
        assert len(splits) == 1
        # and the same start measurements, to the last bit (the same draws of the same model)
        starts = {tuple(r.rows[0][m] for m in REGIME_EVAL_METRICS) for r in same_seed}
        assert len(starts) == 1 and same_seed[0].rows[0]["step"] == 1
    for r in runs:  # measured before the first and the last step, and every regime_eval_steps steps between
        measured = [row["step"] for row in r.rows if REGIME_EVAL_METRICS[0] in row]
        every = r.config["trainer"]["regime_eval_steps"]
        last = r.rows[-1]["step"]
        assert measured == sorted({*range(1, last + 1, every), last})


def test_committed_regime_table_and_sentences_agree():
    from qae_lab.analysis.compare import find_reference_runs
    from qae_lab.analysis.phenomena import EXPERIMENTS, load_experiment

    runs = load_experiment(find_reference_runs(), "regimes")
    rows = regime_table(runs)
    methods = EXPERIMENTS["regimes"]["methods"]
    assert sorted((r["method"], r["group"]) for r in rows) == sorted(
        (m, g) for m in methods for g in ("hard", "easy", "mixed")
    )
    assert all(r["seeds"] == len(EXPERIMENTS["regimes"]["seeds"]) for r in rows)
    by = {(r["method"], r["group"]): r for r in rows}
    for mean_method, quantile_method in zip(methods[::2], methods[1::2]):  # with Clip-Higher, then without
        sentences = regime_sentences(runs, mean_method, quantile_method)
        assert len(sentences) == 5
        hard_mean = by[(mean_method, "hard")]["peak/start"]
        assert f"({mean_method}) {hard_mean.mean:.3f} ± {hard_mean.std:.3f}" in sentences[0]
        easy_q = by[(quantile_method, "easy")]["final/start"]
        assert f"({quantile_method}) {easy_q.mean:.3f} ± {easy_q.std:.3f}" in sentences[1]
        agree = seeds_agreeing(runs, quantile_method, mean_method, "hard", "peak/start")
        assert f"in {agree.below} of {agree.n} seeds" in sentences[0]


def test_regime_figure_of_the_committed_runs():
    from qae_lab.analysis.compare import find_reference_runs
    from qae_lab.analysis.phenomena import load_experiment

    fig = regime_figure(load_experiment(find_reference_runs(), "regimes"), "mean+clip_higher", "qae+clip_higher")
    assert [t.name for t in fig.data if t.showlegend is not False] == [
        "mean+clip_higher (3 seeds)",
        "qae+clip_higher (3 seeds)",
    ]
    lines = [t for t in fig.data if t.mode == "lines+markers"]
    assert len(lines) == 6 and all(list(t.x)[0] == 0 and list(t.x)[-1] == 479 for t in lines)  # 0 .. 479 updates
