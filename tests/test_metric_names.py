"""Tests for qae_lab.metric_names: each constant named after its metric, documented, and the names the trainer really
logs and the committed reference logs hold."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from qae_lab import advantages, metric_names
from qae_lab.metric_names import (
    ADVANTAGE_STAT_METRICS,
    COV_METRICS,
    DYNAMIC_SAMPLING_METRICS,
    QAE_METRICS,
    QAE_NEG_CORRECT,
    QAE_NEG_CORRECT_FRAC,
    QAE_NEG_CORRECT_IF_MEAN,
    QAE_ZERO_ADV_FRAC,
    SAAH_METRICS,
)
from qae_lab.task.behaviour import behaviour_stats

ROOT = Path(__file__).resolve().parents[1]


# ---------------------------------------------------------------- metric names


def test_metric_constants_are_named_after_their_metric():
    names = QAE_METRICS + SAAH_METRICS + COV_METRICS + DYNAMIC_SAMPLING_METRICS
    assert len(set(names)) == len(names) == 22
    assert all(m.startswith("qae/") for m in QAE_METRICS) and all(m.startswith("saah/") for m in SAAH_METRICS)
    assert all(m.startswith("cov/") for m in COV_METRICS)
    assert all(m.startswith("dynamic_sampling/") for m in DYNAMIC_SAMPLING_METRICS)
    for metric in names:  # "qae/zero_adv_frac" is QAE_ZERO_ADV_FRAC
        constant = metric.upper().replace("/", "_")
        assert getattr(metric_names, constant) == metric and constant in metric_names.__all__
    assert QAE_ZERO_ADV_FRAC == "qae/zero_adv_frac"


def test_advantage_stat_metrics_cover_advantage_stats():
    r = torch.tensor([1.0, 0, 0, 0, 1, 1, 1, 0])
    stats = advantages.advantage_stats(r, advantages.group_advantages(r, 4, k=0.4), 4, 0.4)
    assert set(ADVANTAGE_STAT_METRICS) == set(stats)
    assert all(ADVANTAGE_STAT_METRICS[key] == f"qae/{key}" for key in stats)


def test_docs_list_every_metric_and_constant():
    text = (ROOT / "docs/metrics.md").read_text()
    for metric in QAE_METRICS + SAAH_METRICS + COV_METRICS + DYNAMIC_SAMPLING_METRICS:
        assert f"`{metric}`" in text and f"`{metric.upper().replace('/', '_')}`" in text, metric
    for key in behaviour_stats([3, 5], ["wait", "ok"], [True, False]):
        assert f"`behaviour/{key}`" in text or f"`behaviour/{key[:-4]}_q10`" in text, key


def test_reference_logs_use_only_the_constants():
    logs = sorted((ROOT / "data/reference_runs").glob("*/log.jsonl"))
    assert logs
    seen = set()
    for log in logs:
        for line in log.read_text().splitlines():
            seen |= {k for k in json.loads(line) if k.startswith(("qae/", "saah/", "cov/"))}
    # the first reference runs predate qae/neg_correct*; the later ones log every constant
    assert set(QAE_METRICS + SAAH_METRICS) - {QAE_NEG_CORRECT, QAE_NEG_CORRECT_FRAC, QAE_NEG_CORRECT_IF_MEAN} <= seen
    assert seen <= set(QAE_METRICS + SAAH_METRICS + COV_METRICS)


@pytest.fixture(scope="module")
def tok():
    from qae_lab.task.models import load_policy

    return load_policy("embedded", device="cpu")[1]


def test_trainer_logs_exactly_the_constants(tmp_path, tok):
    from testkit.step_setup import REWARDS, make_trainer, rows, trainer_grads

    t = make_trainer(tmp_path, tok, loss_type="bnpo", token_weighting="sa_ah", sparse_update=False)
    trainer_grads(t, t._generate_and_score_completions(rows(REWARDS)))  # the loss logs saah/*
    logged = {k for k in t._metrics["train"] if k.startswith(("qae/", "saah/"))}
    assert logged == set(QAE_METRICS + SAAH_METRICS)
    assert {k for k in t._metrics["train"] if k.startswith("behaviour/")} >= {
        "behaviour/length_mean",
        "behaviour/reflect_frac",
    }
    assert all(len(t._metrics["train"][m]) == 1 for m in logged)  # one value per metric for one step
