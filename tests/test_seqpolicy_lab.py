"""Tests for the sequence-policy lab's summaries (qae_lab.seqpolicy_lab): estimator tracking, a run's summary."""

from __future__ import annotations

import json
import math

import torch

from qae_lab.ledger import LEDGER_FORMS
from qae_lab.seqpolicy_lab import summarise_run, tracking
from qae_lab.seqpolicy_update import UpdateSettings, simulate
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
