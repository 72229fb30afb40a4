"""qae_lab.analysis.regime_runs and qae_lab.lab.run_figures.regime_figure: the held-out groups of runs, by hand and on the
committed regimes experiment."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from qae_lab.analysis.compare import Run
from qae_lab.metric_names import ENTROPY_REGIME_METRICS, REGIME_EVAL_METRICS
from qae_lab.analysis.regime_runs import regime_eval_curve, regime_eval_curves, regime_eval_numbers, regime_eval_table
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
    assert regime_eval_curve(run, "hard") == ([0, 10, 20], [0.2, 0.3, 0.25])  # updates before each measurement
    n = regime_eval_numbers(run, "hard")
    assert (n["start"], n["peak"], n["final"]) == (0.2, 0.3, 0.25)
    assert n["peak/start"] == pytest.approx(1.5) and n["final/start"] == pytest.approx(1.25)
    assert regime_eval_numbers(run, "hard", "success")["final"] == pytest.approx(0.3)
    # no measurement before the first update: no start, so no numbers
    late = Run("r", "qae", 0, {}, [{"step": 5, "regime_eval/entropy_hard": 0.2}], None, None)
    assert regime_eval_numbers(late, "hard") is None
    zero = Run("r", "qae", 0, {}, [{"step": 1, "regime_eval/success_hard": 0.0}], None, None)
    assert regime_eval_numbers(zero, "hard", "success")["peak/start"] is None  # no ratio to a start of 0


def test_table_over_seeds():
    runs = _runs()
    rows = {(r["method"], r["group"]): r for r in regime_eval_table(runs)}
    assert sorted(rows) == [(m, g) for m in ("mean", "qae") for g in ("easy", "hard", "mixed")]
    hard_mean = rows[("mean", "hard")]
    assert hard_mean["seeds"] == 3 and hard_mean["start"].mean == pytest.approx(0.2)
    # peak/start over seeds: 0.30 / 0.2, 0.31 / 0.2, 0.29 / 0.2 -> mean 1.5, population std 0.05 * sqrt(2/3)
    assert hard_mean["peak/start"].mean == pytest.approx(1.5)
    assert hard_mean["peak/start"].std == pytest.approx(0.05 * (2 / 3) ** 0.5)


def test_curves_over_seeds():
    c = regime_eval_curves(_runs(), "hard")
    assert list(c) == ["mean", "qae"] and c["mean"].steps == [0, 10, 20] and c["mean"].n_runs == 3
    assert c["mean"].mean[1] == pytest.approx(0.3) and c["qae"].hi[1] == pytest.approx(0.23)


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


def test_committed_regime_table_covers_every_method_and_group():
    from qae_lab.analysis.compare import find_reference_runs
    from qae_lab.analysis.phenomena import EXPERIMENTS, load_experiment

    runs = load_experiment(find_reference_runs(), "regimes")
    rows = regime_eval_table(runs)
    methods = EXPERIMENTS["regimes"]["methods"]
    assert sorted((r["method"], r["group"]) for r in rows) == sorted(
        (m, g) for m in methods for g in ("hard", "easy", "mixed")
    )
    assert all(r["seeds"] == len(EXPERIMENTS["regimes"]["seeds"]) for r in rows)


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
