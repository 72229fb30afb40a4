"""The committed data/bandit/prop42.json (benchmarks/bandit_prop42.py): its shape, which another module's scoreboard
reads; its numbers, recomputed and checked against one another; what notebook 02's fixed sentences say of it; and
its loader, qae_lab.analysis.committed_data.load_prop42, in a checkout and in an installed package."""

from __future__ import annotations

import math
import shutil
import statistics
from pathlib import Path

import pytest
import torch

from qae_lab.analysis import committed_data
from qae_lab.analysis.committed_data import load_prop42
from qae_lab.toys.bandit import mean_scale_factor, quantile_scale_factor
from testkit.scripts import load_script

ROOT = Path(__file__).resolve().parents[2]
DATA = load_prop42()
REGIMES = ("hard", "easy")
BASELINES = ("mean", "quantile")
T_975_15 = 2.131  # Student's t, 97.5% quantile, 15 degrees of freedom: a 95% interval over 16 paired replicates


def _benchmark():
    return load_script("benchmarks/bandit_prop42.py")


def _shape(data: dict) -> None:
    """The agreed shape: {"meta", "hard", "easy", ...}, each regime {"p", "identity", "expected_step", "sampled",
    "scale"}, each of those but p {"mean": [...], "quantile": [...]}, one number per bandit."""
    n = data["meta"]["n_bandits"]
    for regime in REGIMES:
        part = data[regime]
        assert sorted(part) == ["expected_step", "identity", "p", "sampled", "scale"], sorted(part)
        assert len(part["p"]) == n
        lo, hi = data["meta"]["p_range"][regime]
        assert all(lo <= p <= hi for p in part["p"]), part["p"]
        for key in ("identity", "expected_step", "sampled", "scale"):
            assert sorted(part[key]) == list(BASELINES)
            assert all(len(v) == n and all(math.isfinite(x) for x in v) for v in part[key].values()), key


def test_the_committed_file_has_the_agreed_shape():
    _shape(DATA)
    assert {"meta", "hard", "easy", "details", "training"} == set(DATA)
    assert {"date", "versions", "seed", "eta", "group_size", "k"} <= set(DATA["meta"])
    assert DATA["meta"]["n_bandits"] == 16


def test_the_committed_numbers_recompute():
    # the first and last bandit of each regime, rebuilt from the file's settings (no Monte Carlo needed here)
    bench = _benchmark()
    meta = {**DATA["meta"], "mc_groups": 2}
    for regime, (p, z, r) in bench.bandits(meta).items():
        assert p.tolist() == pytest.approx(DATA[regime]["p"], rel=1e-9)
        for i in (0, len(p) - 1):
            got = bench.one_bandit(z[i], r[i], meta, "group", 0)
            for key in ("identity", "expected_step", "sampled", "scale"):
                for name in BASELINES:
                    # the file keeps 10 significant digits
                    assert got[name][key] == pytest.approx(DATA[regime][key][name][i], rel=1e-8), (regime, i, key)


def test_the_committed_numbers_agree_with_one_another():
    eta = DATA["meta"]["eta"]
    for regime in REGIMES:
        d, x = DATA[regime], DATA["details"][regime]
        assert d["expected_step"]["mean"] == d["expected_step"]["quantile"]  # one step: a constant b cancels
        for name in BASELINES:
            # sampled = scale x expected step to first order; the rest is O(eta), a few per cent at this eta
            for s, c, b in zip(d["sampled"][name], d["scale"][name], d["expected_step"][name]):
                assert s == pytest.approx(c * b, rel=0.03)
            # the Monte Carlo within 4 of its standard errors (the script refuses to write otherwise)
            for s, mc, se in zip(d["sampled"][name], x["sampled_mc"][name], x["sampled_mc_stderr"][name]):
                assert abs(mc - s) <= 4 * se
            for s, e2 in zip(d["sampled"][name], x["eta2"][name]):
                assert abs(e2) * eta**2 < 0.05 * abs(s)  # the eta^2 term is small at the committed eta
        # without the std, the closed forms: (G-1)/G and 1 - P(Binomial(G-1, p) = G - ceil(KG))
        g, k = DATA["meta"]["group_size"], DATA["meta"]["k"]
        assert x["no_std"]["scale"]["mean"] == pytest.approx([mean_scale_factor(g)] * len(d["p"]), rel=1e-9)
        want = quantile_scale_factor(torch.tensor(d["p"], dtype=torch.float64), g, k).tolist()
        assert x["no_std"]["scale"]["quantile"] == pytest.approx(want, rel=1e-9)


def _pairs(values: dict) -> list[tuple[float, float]]:
    return list(zip(values["quantile"], values["mean"]))


def test_what_notebook_02_says_of_one_step():
    eta_notebook = 0.5  # the step of the notebook's figures
    for regime in REGIMES:
        d, x, hard = DATA[regime], DATA["details"][regime], regime == "hard"
        # the identity: QAE's dH below the mean's on every hard bandit, above on every easy one (Prop. 4.2)
        assert all((q < m) == hard for q, m in _pairs(d["identity"]))
        # sampled groups, with and without the std: the same direction as the exact step, QAE further, every bandit
        for sampled, scale in ((d["sampled"], d["scale"]), (x["no_std"]["sampled"], x["no_std"]["scale"])):
            assert all(q > m for q, m in _pairs(scale))
            signs = [math.copysign(1, b) for b in d["expected_step"]["mean"]]
            assert all(q * s > m * s > 0 for (q, m), s in zip(_pairs(sampled), signs))
        # the update's noise (the eta^2 term) does not turn the order, even at the notebook's step
        first = [(q - m) / DATA["meta"]["eta"] for q, m in _pairs(d["sampled"])]
        second = [q - m for q, m in _pairs(x["eta2"])]
        assert all(f * (f + eta_notebook * s) > 0 for f, s in zip(first, second))
        # the RMS-normalised step (where Adam tends): Prop. 4.2's direction on every bandit
        assert all((q < m) == hard for q, m in _pairs(x["rms_step"]))


def _interval(a: list[float], b: list[float]) -> tuple[float, float]:
    """The 95% interval of mean(a - b) over paired replicates."""
    d = [x - y for x, y in zip(a, b)]
    half = T_975_15 * statistics.stdev(d) / math.sqrt(len(d))
    return statistics.fmean(d) - half, statistics.fmean(d) + half


def test_what_notebook_02_says_of_training():
    runs = {(r["optimizer"], r["lr"], r["baseline"]): r for r in DATA["training"]["runs"]}
    grid = DATA["training"]["settings"]["grid"]
    assert sorted(grid) == ["adam", "adam_scalar", "sgd"] and DATA["training"]["settings"]["n_replicates"] == 16
    for opt, lrs in grid.items():
        for lr in lrs:
            m, q = runs[(opt, lr, "mean")], runs[(opt, lr, "quantile")]
            hard = _interval(q["hard_peak"], m["hard_peak"])  # Prop. 4.2 predicts < 0
            easy = _interval(q["easy_h"], m["easy_h"])  # ... and > 0
            if opt == "adam":  # the proposition's direction, in every replicate
                assert all(a < b for a, b in zip(q["hard_peak"], m["hard_peak"])), lr
                assert all(a > b for a, b in zip(q["easy_h"], m["easy_h"])), lr
            elif opt == "sgd":  # not the proposition's direction: no difference, or the other way
                assert hard[1] > 0 and easy[0] < 0, (lr, hard, easy)
            else:  # one RMS per prompt: these replicates cannot tell the two apart
                assert hard[0] < 0 < hard[1] and easy[0] < 0 < easy[1], (lr, hard, easy)


def test_the_benchmarks_smoke_mode_writes_a_readable_file(tmp_path, capsys):
    out = tmp_path / "prop42.json"
    assert _benchmark().main(["--smoke", "--out", str(out)]) == 0
    data = load_prop42(out)
    _shape(data)
    assert data["meta"]["n_bandits"] == 2 and data["training"]["runs"]
    assert "wrote" in capsys.readouterr().out


def test_load_prop42_finds_the_installed_copy(tmp_path, monkeypatch):
    # an installed package: qae_lab/bandit_data in site-packages, no data/ beside it and none above the cwd
    site = tmp_path / "site" / "qae_lab"
    shutil.copytree(ROOT / "data" / "bandit", site / "bandit_data")
    monkeypatch.setattr(committed_data, "_PACKAGE", site)
    monkeypatch.chdir(tmp_path)
    assert load_prop42() == DATA
    with pytest.raises(ValueError, match="^path must be a prop42.json file.*bandit_prop42.py"):
        load_prop42(tmp_path / "prop42.json")
