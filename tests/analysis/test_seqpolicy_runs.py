"""Tests for the sequence-policy lab's summaries (qae_lab.analysis.seqpolicy_runs): estimator tracking, a run's summary."""

from __future__ import annotations

import json
import math

import torch

from qae_lab.ledger import LEDGER_FORMS
import pytest

from qae_lab.analysis.seqpolicy_runs import (
    REGIMES,
    curve_summary,
    first_move,
    regime_curves,
    regime_settings,
    start_groups,
    summarise_regimes,
    summarise_run,
    tracking,
)
from qae_lab.toys.seqpolicy_training import UpdateSettings, simulate
from testkit.seqpolicy_setup import F64, peaked


def test_tracking_of_a_perfect_and_of_a_reversed_estimator():
    exact = torch.tensor([[1.0, -2.0, 3.0, 0.5], [2.0, 1.0, -1.0, 4.0]], dtype=F64)
    out = {
        "dh_first_order": exact,
        "estimator_npg/dh": 3 * exact,
        "estimator_pg/dh": -exact,
        "estimator_reinforce/dh": exact + torch.tensor([0.0, 0.0, 0.0, 10.0], dtype=F64),
        "sampled/dh_state": exact / 4,
        "sampled/dh_visit": 3 * exact / 4,
    }
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


# ---------------------------------------------------------------- Proposition 4.2 by regime


def test_start_groups_by_hand():
    p0 = torch.tensor(
        [
            [0.3, 0.1, 0.8, 0.5, 0.1, 0.9],  # two hardest: the two 0.1s; two easiest: 0.9, 0.8
            [0.5, 0.5, 0.5, 0.5, 0.5, 0.5],
        ],  # all tied: the lower index counts as harder
        dtype=F64,
    )
    m = start_groups(p0, 2)
    assert m["hard"].nonzero().tolist() == [[0, 1], [0, 4], [1, 0], [1, 1]]
    assert m["easy"].nonzero().tolist() == [[0, 2], [0, 5], [1, 4], [1, 5]]
    assert bool(m["mixed"].all()) and not bool((m["hard"] & m["easy"]).any())
    assert start_groups(p0, 3)["hard"][0].nonzero().flatten().tolist() == [0, 1, 4]  # 0.1, 0.1, then 0.3


def _reference_groups(p0: list, n: int) -> dict[str, list[list[int]]]:
    """The hard / easy / mixed prompts of each seed by a plain sort on (p0, index)."""
    out = {"hard": [], "easy": [], "mixed": []}
    for row in p0:
        order = sorted(range(len(row)), key=lambda q: (row[q], q))
        out["hard"].append(order[:n])
        out["easy"].append(order[-n:])
        out["mixed"].append(order)
    return out


def test_regime_curves_and_summary_match_a_plain_loop():
    gen = torch.Generator().manual_seed(7)
    n_seeds, n_prompts, steps, n = 3, 7, 9, 3
    p0 = (torch.rand(n_seeds, n_prompts, generator=gen, dtype=F64) * 4).round() / 4  # quarters: many ties
    x = torch.rand(n_seeds, n_prompts, steps, generator=gen, dtype=F64) + 0.5
    got = regime_curves(x, p0, n)
    groups = _reference_groups(p0.tolist(), n)
    # float64 values in [0.5, 1.5], means over at most 7 prompts: the two orders of summation differ by a few
    # ulps of 1.5 (eps64 = 2.2e-16); 1e-12 is far above that and far below any planted error
    tol = 1e-12
    for group in REGIMES:
        for s in range(n_seeds):
            want = [sum(x[s, q, t].item() for q in groups[group][s]) / len(groups[group][s]) for t in range(steps)]
            assert got[group][s].tolist() == pytest.approx(want, rel=tol, abs=0), (group, s)
            summary = curve_summary(got[group], 4)
            assert summary["peak_ratio"][s].item() == pytest.approx(max(want) / want[0], rel=tol, abs=0)
            assert (
                summary["start"][s].item(),
                summary["early"][s].item(),
                summary["final"][s].item(),
            ) == pytest.approx((want[0], want[4], want[-1]), rel=tol, abs=0)


def test_summarise_regimes_keeps_the_groups_numbers():
    t = peaked(2, 6, 2, 3)
    out = simulate(t.logits, t.rewards, UpdateSettings(group_size=4, eta=3.0), steps=6, seed=1)
    keep = summarise_regimes(out, 2, early=2, every=3)
    json.dumps(keep, allow_nan=False)  # plain JSON
    h = regime_curves(out["entropy_curves"], out["success_curves"][..., 0], 2)
    p = regime_curves(out["success_curves"], out["success_curves"][..., 0], 2)
    # the file keeps 4 significant digits: a kept number is within 5e-4 of the value, relative
    close = lambda a, b: all(math.isclose(x, float(y), rel_tol=5e-4) for x, y in zip(a, b))  # noqa: E731
    for group in REGIMES:
        g = keep[group]
        assert close(g["start_p"], p[group][:, 0]) and close(g["final_p"], p[group][:, -1])
        assert close(g["peak_ratio"], h[group].amax(1) / h[group][:, 0]) and close(g["early_h"], h[group][:, 2])
        assert g["entropy_curve"]["steps"] == [0, 3, 6] and g["entropy_curve"]["n"] == 2
        assert close(g["entropy_curve"]["mean"], h[group][:, ::3].mean(0))
    assert close(keep["mixed"]["final_h"], out["entropy"][:, -1])  # every prompt: the run's own mean curve
    assert all(a < b for a, b in zip(keep["hard"]["start_p"], keep["easy"]["start_p"]))


def test_regime_grid():
    g = regime_settings(adam_eta=0.02, adam_passes=4, sgd_eta=40.0, sgd_passes=2)
    assert sorted(g) == sorted(
        f"{o}/{b}/{c}" for o in ("adam", "sgd") for b in ("mean", "quantile K=0.4") for c in ("clip-higher", "clip-0.2")
    )
    adam = g["adam/quantile K=0.4/clip-higher"]
    assert (adam.optimizer, adam.eta, adam.num_iterations, adam.epsilon_high, adam.k) == ("adam", 0.02, 4, 0.28, 0.4)
    sgd = g["sgd/mean/clip-0.2"]
    assert (sgd.optimizer, sgd.eta, sgd.num_iterations, sgd.epsilon_high, sgd.baseline) == ("sgd", 40.0, 2, 0.2, "mean")


@pytest.mark.parametrize(
    "call,name",
    [
        (lambda: start_groups(torch.zeros(2, 4), 3), "n"),
        (lambda: start_groups(torch.zeros(2, 4), 0), "n"),
        (lambda: start_groups(torch.zeros(4), 1), "p0"),
        (lambda: start_groups(torch.zeros(2, 1), 1), "p0"),
        (lambda: regime_curves(torch.zeros(2, 3, 5), torch.zeros(2, 4), 1), "curves"),
        (lambda: curve_summary(torch.ones(2, 5), 5), "early"),
        (lambda: curve_summary(torch.ones(5), 0), "curve"),
    ],
)
def test_regime_errors_name_the_argument(call, name):
    with pytest.raises(ValueError, match=rf"^{name} must"):
        call()


def test_first_move_up_down_flat_and_a_return_to_the_start():
    steps = [0, 5, 10, 15, 20]
    assert first_move([1.0, 1.2, 1.5, 0.9, 2.0], steps) == (1.0, 1.5, 10)  # the later, higher peak: a second move
    assert first_move([1.0, 0.9, 0.6, 0.8, 0.5], steps) == (1.0, 0.5, 20)  # below the start throughout: one fall
    assert first_move([1.0, 0.9, 0.6, 1.0, 0.2], steps) == (1.0, 0.6, 10)  # back at the start ends the move
    assert first_move([1.0, 1.0, 1.0, 1.3, 1.3], steps) == (1.0, 1.3, 15)  # flat, then up: the first of equal peaks
    assert first_move([2.0] * 5, steps) == (2.0, 2.0, 0)  # never moves
    with pytest.raises(ValueError, match="one per step"):
        first_move([1.0, 2.0], [0])
    with pytest.raises(ValueError, match="finite"):
        first_move([1.0, math.nan], [0, 1])


def test_first_move_of_the_committed_hard_prompts_under_the_mean_baseline_is_a_rise():
    from qae_lab.analysis.seqpolicy_findings import load_regimes, regime_curve

    c = regime_curve(load_regimes(), "hard", "mean", "adam", True)
    move = first_move(c["mean"], c["steps"])
    assert move.start == c["mean"][0] and move.extreme == max(c["mean"]) > move.start and move.step > 0
