"""Tests for the sequence-policy lab's summaries (qae_lab.seqpolicy_lab): estimator tracking, a run's summary."""

from __future__ import annotations

import json
import math

import torch

from qae_lab.ledger import LEDGER_FORMS
import pytest

from qae_lab.seqpolicy import make_tasks, sequence_entropy
from qae_lab.seqpolicy_lab import entropy_after_update, summarise_run, summary_lines, tracking
from qae_lab.seqpolicy_update import UpdateSettings, group_update, simulate
from seqpolicy_setup import F64, peaked


def test_tracking_of_a_perfect_and_of_a_reversed_estimator():
    exact = torch.tensor([[1.0, -2.0, 3.0, 0.5], [2.0, 1.0, -1.0, 4.0]], dtype=F64)
    out = {"dh_first_order": exact, "estimator_npg/dh": 3 * exact, "estimator_pg/dh": -exact,
           "estimator_reinforce/dh": exact + torch.tensor([0.0, 0.0, 0.0, 10.0], dtype=F64),
           "sampled/dh_state": exact / 4, "sampled/dh_visit": 3 * exact / 4}
    t = tracking(out)
    assert t["npg"] == {"corr": [1.0, 1.0], "sign_agree": [1.0, 1.0], "ratio": [3.0, 3.0]}
    assert t["pg"] == {"corr": [-1.0, -1.0], "sign_agree": [0.0, 0.0], "ratio": [-1.0, -1.0]}
    assert t["reinforce"]["ratio"] == [5.0, 2.667] and t["visit_share"] == [0.75, 0.75]
    out.update({k: out[k] * math.nan for k in ("sampled/dh_state", "sampled/dh_visit")})  # Adam: no split
    assert tracking(out)["visit_share"] == [None, None]


def test_summary_of_a_run():
    t = peaked(2, 3, 2, 3)
    out = simulate(t.logits, t.rewards, UpdateSettings(group_size=4, eta=3.0), steps=5, seed=0)
    s = summarise_run(out, every=2, early=2)
    curve = s["entropy_curve"]
    assert curve["steps"] == [0, 2, 4] and curve["n"] == 2
    assert all(math.isclose(a, float(b), rel_tol=1e-3) for a, b in zip(curve["mean"], out["entropy"][:, ::2].mean(0)))
    assert all(math.isclose(a, float(b), rel_tol=1e-3) for a, b in zip(s["early_entropy"], out["entropy"][:, 2]))
    for kind in ("sampled", *(f"estimator_{form}" for form in LEDGER_FORMS)):
        key = "sampled/dh" if kind == "sampled" else f"{kind}/dh"
        assert all(math.isclose(a, float(b), rel_tol=1e-3) for a, b in zip(s["ledger"][kind]["dh"], out[key].sum(-1)))
    tr = s["tracking"]
    assert all(-1 <= c <= 1 for f in LEDGER_FORMS for c in tr[f]["corr"])
    assert all(0 <= v <= 1 for v in tr["visit_share"])
    json.dumps(s, allow_nan=False)  # plain JSON
    lean = summarise_run(out, every=2, early=2, estimators=False)
    assert list(lean["ledger"]) == ["sampled"] and "tracking" not in lean


def test_entropy_after_update_is_the_updated_tables_entropy_from_the_seeds_groups():
    t = make_tasks(4, 2, 3, start="peaked")
    s = UpdateSettings(k=0.8, eta=4.0)
    z, m, _ = group_update(t.logits[None], t.rewards[None], s, generator=torch.Generator().manual_seed(3))
    h = entropy_after_update(t, s, seed=3)
    assert h == pytest.approx(float(sequence_entropy(z[0]).mean()))
    assert h == pytest.approx(float(m["entropy"][0] + m["dh_exact"][0]))  # H before + the exact change
    assert entropy_after_update(t, s, seed=3) == h  # the same seed, the same groups
    with pytest.raises(ValueError, match="seed"):
        entropy_after_update(t, s, seed=-1)


def test_summary_lines_say_what_the_numbers_show():
    m = {"dh_exact": 0.02, "dh_first_order": 0.021, "sampled/dh_state": 0.03, "sampled/dh_visit": -0.009,
         "estimator_npg/dh": -0.5}
    lines = summary_lines(1.5, m, {0.8: 1.49, 0.2: 1.52})
    assert lines[0] == "Before any update: H(pi) = 1.5000 nats, mean over prompts."
    assert "exact change +0.02000 nats, first order +0.02100" in lines[1] and "visitation -0.00900" in lines[1]
    assert "had the opposite sign to the exact first-order change (-0.50000" in lines[2]
    assert lines[3].endswith("H(pi) after = 1.5200 at K = 0.2, 1.4900 at K = 0.8 nats.")  # sorted by K
    with pytest.raises(ValueError, match="one_step lacks"):
        summary_lines(1.5, {"dh_exact": 0.0}, {0.2: 1.0})
    with pytest.raises(ValueError, match="h_after"):
        summary_lines(1.5, m, {})
