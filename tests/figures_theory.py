"""What notebooks 01, 02 and 07 (the gate, bandits, the exact sequence policy) must show: figure_checks.py."""

from __future__ import annotations

import math
import re

from figure_checks import (NotebookSpec, Shown, axes, band_lines, centred_bands, finite, heatmap, lines,
                           nonincreasing, title_number, vlines, within)
from nbexec import Figure


# ------------------------------------------------------------------ 02: softmax entropy proofs


def _policy_bars(fig: Figure) -> None:
    axes(fig, "", "pi(y)")
    bars = lines(fig, ["pi(y)"], 12)["pi(y)"]
    labels = list(bars["x"])
    assert all(re.fullmatch(r"y\d+\+?", s) for s in labels), labels
    assert 0 < sum(s.endswith("+") for s in labels) < 12, f"no correct and wrong responses both: {labels}"
    assert abs(sum(within(bars["y"], 0, 1)) - 1) < 1e-6, "the policy's probabilities do not sum to 1"


def _first_order_error(fig: Figure) -> None:
    axes(fig, "eta", "error")
    err = lines(fig, ["|exact - first order|"], 9)["|exact - first order|"]
    assert fig.layout["xaxis"]["type"] == fig.layout["yaxis"]["type"] == "log"
    assert min(finite(err["y"])) > 0 and math.isclose(min(err["x"]), 1e-4) and math.isclose(max(err["x"]), 1)
    slope = title_number(fig, r"slope (\S+)\)")
    assert 1.9 < slope < 2.1  # the error is O(eta^2)
    x, y = (finite(map(math.log, err[a][:5])) for a in ("x", "y"))  # the title's slope, from the drawn points
    mx, my = sum(x) / 5, sum(y) / 5
    fitted = sum((a - mx) * (b - my) for a, b in zip(x, y)) / sum((a - mx) ** 2 for a in x)
    assert abs(fitted - slope) < 0.01, f"the points' slope {fitted:.3f}, the title's {slope}"


def _knob(fig: Figure) -> None:
    axes(fig, "baseline b", "dH")
    dh = lines(fig, ["dH(b), first order"], 51)["dH(b), first order"]
    y, b = finite(dh["y"]), finite(dh["x"])
    assert b[0] == 0 and b[-1] == 1
    slope = (y[-1] - y[0]) / (b[-1] - b[0])
    assert max(abs(v - (y[0] + slope * x)) for x, v in zip(b, y)) < 1e-9 * max(1, abs(slope)), "dH(b) is not linear"
    vlines(fig, [0.3, 0])  # the mean baseline b = p = 0.3, and b_K = 0 (a hard prompt at K = 0.4)
    assert [a["text"] for a in fig.layout["annotations"]] == ["mean b = p", "QAE b_K"]


MC_NAMES = ["sampled, mean baseline (c)", "sampled, QAE baseline (c)", "expected gradient (b)",
            "identity, b = p (a)", "identity, b = b_K (a)"]


def _mc(fig: Figure) -> None:
    axes(fig, "success rate p", "entropy change")
    found = lines(fig, MC_NAMES, 13)
    assert centred_bands(fig) == 2  # the two sampled curves carry their Monte-Carlo error
    assert within(found[MC_NAMES[0]]["x"], 0.05, 0.95) == sorted(found[MC_NAMES[0]]["x"])


def _training(y_title: str, lo: float, hi: float):
    def check(fig: Figure) -> None:
        axes(fig, "step", y_title)
        found = lines(fig, ["mean", "QAE K=0.4", "QAE K=0.6"])
        for name, t in found.items():
            assert list(t["x"]) == list(range(len(t["x"]))) and len(t["x"]) > 10, f"{name}: steps {t['x'][:5]}"
            within(t["y"], lo, hi, name)
    return check


NB02 = NotebookSpec([
    Shown(r"The policy over 12 responses \(\+ marks a correct one\)", _policy_bars),
    Shown(r"First-order error vs step size \(slope \S+\)", _first_order_error),
    Shown(r"slope eta\*Cov\(log pi, pi\) = \S+;\s+b_K = 0 \(hard prompt\)", _knob),
    Shown(r"E\[dH\] after one step, K = 0\.4, G = 8", _mc),
    Shown(r"Mean normalised entropy H / log A", _training("H / log A", 0, 1)),
    Shown(r"Mean success rate E_pi\[r\]", _training("success", 0, 1)),
], probe="""
before = knob.view.figure
knob.controls["p"].value = 0.9                      # an easy prompt: b_K jumps from 0 to 1
after = knob.view.figure
assert after is not before
assert "easy" in after.layout.title.text and "hard" in before.layout.title.text
qae_y = lambda: next(t.y for t in mc.view.figure.data if t.name == "sampled, QAE baseline (c)")
mean_y = lambda: next(t.y for t in mc.view.figure.data if t.name == "sampled, mean baseline (c)")
old_qae, old_mean = qae_y(), mean_y()
mc.controls["K"].value = 0.8
assert "K = 0.8" in mc.view.figure.layout.title.text
assert qae_y() != old_qae and mean_y() == old_mean    # K moves QAE only
""")

# ------------------------------------------------------------------ 01: two-regime gate and sparsity

KS = [round(0.05 * i, 2) for i in range(1, 20)]


def _gate(fig: Figure) -> None:
    axes(fig, "correct responses c in the group", "K")
    hm = heatmap(fig, 19, 9, -1, 1)  # the paper's convention: +1 successes move, -1 failures, 0 nobody
    assert list(hm["y"]) == [f"K={k:g}" for k in KS] and list(hm["x"]) == list(range(9))
    for k, row in zip(KS, hm["z"]):  # b_K is the ceil(K G)-th smallest reward: c <= G - ceil(K G) is hard
        want = [0] + [1 if c <= 8 - math.ceil(k * 8) else -1 for c in range(1, 8)] + [0]
        assert list(row) == want, f"K = {k}: gate {row}, expected {want}"


def _worked_examples(fig: Figure) -> None:
    axes(fig, "response (correct ones first)", "")
    hm = heatmap(fig, 8, 8)
    assert list(hm["y"]) == [f"c={c} · {m}" for c in (1, 3, 5, 7) for m in ("GRPO mean", "QAE K=0.4")]
    for label, z, text in zip(hm["y"], hm["z"], hm["text"]):
        c = int(label[2])
        assert [s[0] for s in text] == ["✓"] * c + ["✗"] * (8 - c), (label, text)
        moved = [i for i, v in enumerate(z) if v != 0]
        if label.endswith("GRPO mean"):
            assert moved == list(range(8)), f"{label}: the mean baseline moves every response of a mixed group"
            assert abs(sum(z)) < 1e-6, f"{label}: advantages about the group's mean do not sum to 0: {z}"
        else:  # K = 0.4, G = 8: c <= 4 is hard (only successes move), c > 4 easy (only failures)
            assert moved == (list(range(c)) if c <= 4 else list(range(c, 8))), (label, z)


def _zero_fraction(fig: Figure) -> None:
    axes(fig, "K", "fraction of responses with A = 0")
    found = lines(fig, [f"p = {p}" for p in (0.1, 0.3, 0.5, 0.7, 0.9)], 37)
    for t in found.values():
        within(t["y"], 0, 1, t["name"])


def _averaged(fig: Figure) -> None:
    axes(fig, "K", "zero-advantage fraction")
    found = lines(fig, ["exact, Beta(0.5, 0.5)", "sampled, 2000 prompts"], 19)
    exact, sampled = (within(t["y"], 0, 1) for t in found.values())
    assert max(abs(a - b) for a, b in zip(exact, sampled)) < 0.05, "the sample strays from the exact curve"
    assert [s["y0"] for s in fig.layout["shapes"]] == [0.8]  # the "~80%" line


def _conventions(fig: Figure) -> None:
    axes(fig, "c", "")
    g = int(title_number(fig, r"G = (\d+)"))
    hm = heatmap(fig, 19, g + 1, 0, 1)
    assert {v for row in hm["z"] for v in row} <= {0, 1} and list(hm["x"]) == list(range(g + 1))


def _extremes(fig: Figure) -> None:
    axes(fig, "correct responses c", "advantage")
    names = [f"{m}: {e} A" for m in ("GRPO mean / std", "QAE / std", "QAE, no std") for e in ("largest", "smallest")]
    found = lines(fig, names, 17)
    for name, t in found.items():
        y = finite(t["y"])
        assert y[0] == y[-1] == 0, f"{name}: an all-equal group has a non-zero advantage"
        assert all(v >= 0 for v in y) if "largest" in name else all(v <= 0 for v in y), (name, y)


NB01 = NotebookSpec([
    Shown(r"Which responses get A ≠ 0: G = 8, paper quantile", _gate),
    Shown(r"Advantages per response \(✓ correct, ✗ wrong\)", _worked_examples),
    Shown(r"Expected zero-advantage fraction, one prompt with success rate p \(G = 16\)", _zero_fraction),
    Shown(r"Zero-advantage fraction averaged over prompts, G = 16", _averaged),
    Shown(r"G = (4|8|16): paper vs linear quantile differ \(red\)", _conventions, count=3),
    Shown(r"Extreme advantages in a group, G = 16, K = 0\.4", _extremes),
], probe="""
gate.controls["G"].value = 4
assert len(gate.view.figure.data[0].z[0]) == 5      # c = 0..4
gate.controls["method"].value = "linear"
assert "linear" in gate.view.figure.layout.title.text
before = spread.view.figure.data[0].y
spread.controls["a"].value = 4.0
spread.controls["b"].value = 4.0
assert max(spread.view.figure.data[0].y) < max(before)   # middling difficulty: fewer zeros
""")

# ------------------------------------------------------------------ 07: the exact sequence policy


def _success_bars(fig: Figure) -> None:
    axes(fig, "prompt", "p")
    found = lines(fig, ["flat", "peaked"])
    for t in found.values():
        assert list(t["x"]) == [f"q{i}" for i in range(len(t["x"]))]
        within(t["y"], 0, 1, t["name"])


def _ledger_shares(fig: Figure) -> None:
    axes(fig, "part of the ledger", "share of the ledger's |change|")
    found = lines(fig, ["exact", "npg (trainer)", "pg", "reinforce"], 5)
    for name, t in found.items():
        assert list(t["x"]) == ["dh", "dh_hard_pos", "dh_hard_neg", "dh_easy_pos", "dh_easy_neg"], t["x"]
        y = finite(t["y"])
        assert math.isclose(sum(map(abs, y[1:])), 1), f"{name}: the cells' shares do not sum to 1 in size"
        assert math.isclose(y[0], sum(y[1:]), abs_tol=1e-9), f"{name}: dh is not the sum of its four cells"


def _tracking(fig: Figure) -> None:
    axes(fig, "per-token form", "")
    hm = heatmap(fig, len(fig.heatmap["y"]), 3, -1, 1)  # correlations
    assert len(hm["y"]) >= 2 and all(re.fullmatch(r"[+-]\d\.\d\d", s) for row in hm["text"] for s in row)


CELLS = ["hard, A > 0", "hard, A < 0", "easy, A > 0", "easy, A < 0"]


def _cumulative_ledger(fig: Figure) -> None:
    found = band_lines(fig, CELLS + ["all"], 2, "first-order dH summed over steps (nats)")
    total = [sum(v) for v in zip(*(finite(found[f"{c} (2 runs)"]["y"]) for c in CELLS))]
    assert all(math.isclose(a, b, abs_tol=1e-9) for a, b in zip(total, found["all (2 runs)"]["y"])), \
        "the four cells do not add up to the whole update"


def _committed_runs(fig: Figure) -> None:
    seeds = int(re.search(r"\((\d+) runs\)", fig.names[0]).group(1)) if fig.names else 0
    assert seeds >= 2, f"{fig.title!r}: {fig.names}"
    band_lines(fig, ["mean", "quantile"], seeds, "H(pi) (nats)", 0)


def _variance_bars(fig: Figure) -> None:
    axes(fig, "", "ratio")
    found = lines(fig, ["alpha = 0", "SA-AH, alpha = 0.5", "AH, alpha = 0.5"], 2)
    assert list(found["alpha = 0"]["x"]) == ["tr Cov(dz) / GRPO's", "|E dz| / GRPO's"]
    assert finite(found["alpha = 0"]["y"]) == [1, 1], "GRPO against itself is not 1"
    assert all(v > 0 for t in found.values() for v in t["y"])


NB07 = NotebookSpec([
    Shown(r"Initial success rate p of each prompt \(hard for K = 0\.4 when p <= 0\.6\)", _success_bars),
    Shown(r"One update's first-order entropy change by part, each ledger as a share of its summed \|cells\| "
          r"\(mean baseline, peaked start\)", _ledger_shares),
    Shown(r"Committed sweep: per-step correlation of each form's total with the exact first-order change, "
          r"mean over \d+ seeds \(K = 0\.4, Clip-Higher, std\)", _tracking),
    Shown(r"first-order dH summed over steps \(nats\): baseline = quantile, K = 0\.4, Clip-Higher on, std on, "
          r"peaked start, α = 0, optimizer sgd", _cumulative_ledger),
    Shown(r"committed runs, entropy: mean vs quantile, flat start \(mean ± std over seeds\)", _committed_runs),
    Shown(r"The update against GRPO's \(alpha = 0\) on the same \d+ batches, α = 0\.5, peaked start",
          _variance_bars),
], probe="""
ledger_view.controls["K"].value = 0.8
assert "K = 0.8" in ledger_view.view.figure.layout.title.text
findings_view.controls["curve"].value = "success"
assert findings_view.view.figure.layout.yaxis.title.text == "success rate"
assert all(0 <= v <= 1 for t in findings_view.view.figure.data if t.name for v in t.y)
""")
