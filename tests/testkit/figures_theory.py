"""What notebooks 01, 02, 07 and 09 (the gate, bandits, the exact sequence policy and its appendix) must show:
figure_checks.py."""

from __future__ import annotations

import math
import re

from testkit.figure_checks import (
    NotebookSpec,
    Shown,
    axes,
    band_lines,
    centred_bands,
    finite,
    heatmap,
    lines,
    title_number,
    vlines,
    within,
)
from testkit.heatmap_checks import readable_heatmap
from testkit.nbexec import Figure


# ------------------------------------------------------------------ 01: two-regime gate and sparsity


def _worked_examples(fig: Figure) -> None:
    axes(fig, "response (correct ones first)", "")
    hm = heatmap(fig, 8, 8)
    readable_heatmap(fig, "advantage A")  # labels like "c=7 · QAE K=0.4" clear of the cells, "✗ -2.83" readable
    assert list(hm["y"]) == [f"c={c} · {m}" for c in (1, 3, 5, 7) for m in ("mean", "QAE K=0.4")]
    for label, z, text in zip(hm["y"], hm["z"], hm["text"]):
        c = int(label[2])
        assert [s[0] for s in text] == ["✓"] * c + ["✗"] * (8 - c), (label, text)
        moved = [i for i, v in enumerate(z) if v != 0]
        if label.endswith("· mean"):
            assert moved == list(range(8)), f"{label}: the mean baseline moves every response of a mixed group"
            assert abs(sum(z)) < 1e-6, f"{label}: advantages about the group's mean do not sum to 0: {z}"
        else:  # K = 0.4, G = 8: c <= 4 is hard (only successes move), c > 4 easy (only failures)
            assert moved == (list(range(c)) if c <= 4 else list(range(c, 8))), (label, z)


ZERO_SOURCES = ["all-equal groups: A = 0 under any baseline", "mixed groups: the side the gate leaves at 0"]


def _zero_sources(fig: Figure) -> None:
    axes(fig, "success rate p", "share of responses with A = 0")
    g, k = int(title_number(fig, r"one prompt's (\d+) responses")), title_number(fig, r"\(K = (\S+)\)")
    batch_name = next((n for n in fig.names if n.startswith("a batch, p uniform on (0, 1): ")), "")
    found = lines(fig, ZERO_SOURCES + [batch_name, "the paper's ~80% (Qwen3-8B)"], 101)
    ps = finite(found[ZERO_SOURCES[0]]["x"])
    assert ps[0] == 0 and ps[-1] == 1 and ps == sorted(ps), ps[:5]
    equal, gate = (within(found[n]["y"], 0, 1, n) for n in ZERO_SOURCES)
    total = [a + b for a, b in zip(equal, gate)]
    assert (equal[0], equal[-1], gate[0], gate[-1]) == (1, 1, 0, 0), "p = 0 or 1: every group is all-equal"
    # the gate leaves at least min(ceil(K G), G - ceil(K G) + 1) of a mixed group's G responses at 0
    rank = math.ceil(round(k * g, 9))
    floor = min(rank, g - rank + 1) / g
    within(total, floor, 1, "the stacked share")
    # the batch's line is the drawn curve's average over p uniform on (0, 1) (the trapezoid rule), as its name says
    batch = finite(found[batch_name]["y"])
    average = sum((a + b) / 2 for a, b in zip(total, total[1:])) * (ps[1] - ps[0])
    assert len(set(batch)) == 1 and abs(batch[0] - average) < 2e-3, (batch[0], average)
    assert batch_name.endswith(f"{batch[0]:.1%}") and set(found["the paper's ~80% (Qwen3-8B)"]["y"]) == {0.8}
    vlines(fig, [round(1 - k, 6)])  # the regimes' boundary p = 1 - K


NB01 = NotebookSpec(
    [
        Shown(r"Advantages per response \(✓ correct, ✗ wrong\)", _worked_examples),
        Shown(r"Share of one prompt's 16 responses with A = 0, by its success rate p \(K = 0\.4\)", _zero_sources),
    ],
    probe="""
exact = sparsity.zero_sources_beta(1.0, 1.0, G, K).total
assert abs(measured.total - exact) < 0.02                # the sampled batch agrees with the exact share
share = 100 * measured.total
right = check_estimate(share + 9, share, quantity="x", tolerance=10, unit="%")
off = check_estimate(share - 11, share, quantity="x", tolerance=10, unit="%")
assert right.startswith("Right") and off.startswith("Off"), (right, off)
zeros.controls["K"].value = 0.8
title = zeros.view.figure.layout.title.text.replace("<br>", " ")
assert "(K = 0.8)" in title, title
assert [round(s.x0, 6) for s in zeros.view.figure.layout.shapes] == [0.2]   # the boundary follows K
zeros.controls["G"].value = 4
assert "one prompt's 4 responses" in zeros.view.figure.layout.title.text.replace("<br>", " ")
# the table under the figure follows G and K: its uniform row is the figure's batch line, at every move
for G_, K_ in ((4, 0.8), (16, 0.8), (16, 0.4), (32, 0.25)):
    zeros.controls["G"].value, zeros.controls["K"].value = G_, K_
    line = next(t.name for t in zeros.view.figure.data if t.name.startswith("a batch, p uniform"))
    row = next(r for r in zeros.text.splitlines() if "Beta(1, 1)" in r).strip("| ").split(" | ")
    assert abs(float(line.split(": ")[-1].rstrip("%")) - float(row[2])) < 0.051, (G_, K_, line, row)
    assert f"{G_} responses" in zeros.view.figure.layout.title.text.replace("<br>", " ") and zeros.values == {
        "G": G_, "K": K_}
""",
)

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


MC_NAMES = [
    "sampled, mean baseline (c)",
    "sampled, QAE baseline (c)",
    "computed, mean baseline",
    "computed, QAE baseline",
    "identity, b = p (a)",
    "identity, b = b_K (a)",
]


def _mc(fig: Figure) -> None:
    axes(fig, "success rate p", "entropy change")
    found = lines(fig, MC_NAMES, 13)
    assert centred_bands(fig) == 2  # the two sampled curves carry their Monte-Carlo error
    ps = within(found[MC_NAMES[0]]["x"], 0.05, 0.95)
    assert ps == sorted(ps)
    mc_m, mc_q, m, q, id_m, id_q = (list(found[n]["y"]) for n in MC_NAMES)
    for name, mc, computed, band in ((MC_NAMES[0], mc_m, m, fig.bands[0]), (MC_NAMES[1], mc_q, q, fig.bands[1])):
        se = [(u - v) / 2 for u, v in zip(band["y"][:13], mc)]  # the band is +- two standard errors
        # the computed E[dH] leaves out O(eta^3), about 1e-4 at the figure's eta = 0.5 (docs/notebook-notes.md, 02)
        off = [abs(a - c) / (s + 1e-12) for a, c, s in zip(mc, computed, se) if abs(a - c) > 5e-4]
        assert all(z < 4 for z in off), f"{name}: the Monte Carlo is {max(off):.1f} standard errors from its line"
    for p, *v in zip(ps, m, q, id_m, id_q):
        if p <= 0.2 or p >= 0.8:  # clearly hard or easy (K = 0.4): the identity and the sampled step part ways
            assert (v[3] < v[2]) == (p <= 0.2) and abs(v[1]) > abs(v[0]) and v[0] * v[1] > 0, (p, v)


TRAINING_RUNS = ["mean, SGD", "QAE, SGD", "mean, Adam", "QAE, Adam"]


def _training(fig: Figure) -> None:
    axes(fig, "step", "H / log A")
    found = lines(fig, TRAINING_RUNS)
    for name, t in found.items():
        assert list(t["x"]) == list(range(len(t["x"]))) and len(t["x"]) > 10, f"{name}: steps {t['x'][:5]}"
        within(t["y"], 0, 1, name)
    assert len({t["y"][0] for t in found.values()}) == 1, "the runs do not start from the same bandits"


NB02 = NotebookSpec(
    [
        Shown(r"The policy over 12 responses \(\+ marks a correct one\)", _policy_bars),
        Shown(r"First-order error vs step size \(slope \S+\)", _first_order_error),
        Shown(r"slope eta\*Cov\(log pi, pi\) = \S+;\s+b_K = 0 \(hard prompt\)", _knob),
        Shown(r"E\[dH\] after one step, K = 0\.4, G = 8", _mc),
        Shown(r"Entropy of the prompts that start (hard \(p ≤ 0\.3\)|easy \(p ≥ 0\.7\)), H / log A", _training, 2),
    ],
    probe="""
fig_before = knob.view.figure
knob.controls["p"].value = 0.9                      # an easy prompt: b_K jumps from 0 to 1
fig_after = knob.view.figure
assert fig_after is not fig_before
assert "easy" in fig_after.layout.title.text and "hard" in fig_before.layout.title.text
qae_y = lambda: next(t.y for t in mc.view.figure.data if t.name == "sampled, QAE baseline (c)")
mean_y = lambda: next(t.y for t in mc.view.figure.data if t.name == "sampled, mean baseline (c)")
old_qae, old_mean = qae_y(), mean_y()
mc.controls["K"].value = 0.8
assert "K = 0.8" in mc.view.figure.layout.title.text
assert qae_y() != old_qae and mean_y() == old_mean    # K moves QAE only
verdict = check_direction("same", after[0.0], after[1.0], quantity="H", change="b rose", tolerance=1e-12)
assert verdict.startswith("Right"), verdict          # the exact expected step: a constant b cancels
assert identity[1.0] > identity[0.0]                  # the identity's step: a higher b leaves more entropy
verdict = check_direction("up", sampled["mean"], sampled["QAE"], quantity="E[dH]", change="QAE", tolerance=1e-3)
assert verdict.startswith("Right"), verdict          # the prediction's answer: sampled, QAE moves entropy further
assert rows[1]["identity (a)"] < rows[0]["identity (a)"]   # ... where the identity puts it lower
""",
)

# ------------------------------------------------------------------ 07: the exact sequence policy


def _start_rates(fig: Figure) -> None:
    axes(fig, "prompt, by rank (1 = hardest)", "p at the start")
    prompts, seeds = int(title_number(fig, r"of the (\d+) prompts")), int(title_number(fig, r"mean over (\d+) seed"))
    assert seeds >= 1 and len(fig.names) in (2, 3), fig.names
    # one notion of hard: the groups, named as the regimes figure names its panels ("hard: the 4 hardest of 16")
    assert re.fullmatch(rf"hard: the \d+ hardest of {prompts}", fig.names[0]), fig.names
    assert re.fullmatch(rf"easy: the \d+ easiest of {prompts}", fig.names[-1]), fig.names
    found = lines(fig, fig.names)
    ranks = [x for t in fig.lines for x in t["x"]]
    assert ranks == [str(i + 1) for i in range(prompts)], f"not one bar per prompt, by rank: {ranks}"
    p = [v for t in fig.lines for v in within(t["y"], 0, 1, t["name"])]
    assert p == sorted(p), f"the start success rates are not sorted hardest first: {p}"
    # QAE's regimes at K = 0.4: the hardest group inside "hard" (p <= 0.6), the easiest inside "easy"
    assert max(found[fig.names[0]]["y"]) < 0.6 < min(found[fig.names[-1]]["y"]), p
    assert not fig.layout.get("shapes") and not fig.layout.get("annotations"), "a second notion of hard (1 - K)"


def _regimes(fig: Figure) -> None:
    seeds = int(title_number(fig, r"mean ± std over (\d+) seeds"))
    names = [f"mean baseline ({seeds} seeds)"] * 3 + [f"quantile baseline, K = 0.4 ({seeds} seeds)"] * 3
    assert fig.names == names, f"{fig.title!r}: traces {fig.names}, expected three panels per baseline"
    assert centred_bands(fig) == 6
    titles = [a["text"].replace("<br>", " ") for a in fig.layout["annotations"]]
    assert [t.split(":")[0] for t in titles] == ["hard", "easy", "mixed"], titles
    start_p = [float(re.search(r"start p ([\d.]+)", t).group(1)) for t in titles]
    assert start_p[0] < 0.6 < start_p[1] and start_p[0] < start_p[2] < start_p[1], start_p  # hard, easy, all
    assert all(((fig.layout.get(f"xaxis{i}") or {}).get("title") or {}).get("text") == "step" for i in ("", 2, 3))
    assert fig.axis_title("yaxis") == "H(pi) (nats)"
    for line in fig.lines:
        steps = list(line["x"])
        assert steps[0] == 0 and steps == sorted(set(steps)), f"{line['name']}: steps {steps[:5]}"
        within(line["y"], 0, 5 * math.log(4), line["name"])  # at most L log V nats
    # every panel starts from the same tasks under both baselines: the same entropy at step 0
    for mean, quantile in zip(fig.lines[:3], fig.lines[3:]):
        assert math.isclose(mean["y"][0], quantile["y"][0], rel_tol=1e-9), (mean["y"][0], quantile["y"][0])


def _seed_differences(fig: Figure) -> None:
    # each seed's quantile - mean as the committed file holds them (read here, not through the lab's modules)
    import json

    from qae_lab.analysis.committed_data import data_dir

    runs = json.loads((data_dir("seqpolicy") / "regimes.json").read_text())["runs"]
    axes(fig, "quantile - mean", "")
    dots = [t for t in fig.traces if t.get("mode") == "markers"]
    assert len(dots) == 4, f"{len(dots)} rows of seeds"
    for t, (opt, group, key) in zip(
        dots,
        [
            ("adam", "hard", "peak_ratio"),
            ("sgd", "hard", "peak_ratio"),
            ("adam", "easy", "early_h"),
            ("sgd", "easy", "early_h"),
        ],
    ):
        q, m = (runs[f"{opt}/{b}/clip-higher"]["groups"][group][key] for b in ("quantile K=0.4", "mean"))
        assert [round(x, 9) for x in t["x"]] == [round(a - b, 9) for a, b in zip(q, m)], (opt, group)
    verdicts = [t["name"].split(":")[0] for t in fig.traces if t.get("mode") == "lines+markers" and t.get("name")]
    assert set(verdicts) == {"holds", "no difference"}, verdicts  # Adam holds on both halves, SGD does not


NB07 = NotebookSpec(
    [
        Shown(
            r"Start success rate p of the \d+ prompts of each seed, hardest to easiest, mean over \d+ seeds?",
            _start_rates,
        ),
        Shown(
            r"Each seed's quantile minus mean baseline \(same tasks, same start\), with the 95% interval",
            _seed_differences,
        ),
        Shown(
            r"Entropy H\(pi\) of the prompts hard / easy at the start, mean vs quantile baseline "
            r"Adam, learning rate 0\.02, 4 passes, Clip-Higher on; mean ± std over \d+ seeds",
            _regimes,
        ),
    ],
    probe="""
regimes_view.controls["optimizer"].value = "sgd"
assert "SGD, learning rate 40," in regimes_view.view.figure.layout.title.text   # a step size, not a training step
regimes_view.controls["clip_higher"].value = False
assert "Clip-Higher off" in regimes_view.view.figure.layout.title.text
assert len(regimes_view.view.figure.data) == 12   # three panels, two baselines, a line and its band each
""",
)

# ------------------------------------------------------------------ 09: appendix to 07 (ledgers, sweep, variance)


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
    assert all(math.isclose(a, b, abs_tol=1e-9) for a, b in zip(total, found["all (2 runs)"]["y"])), (
        "the four cells do not add up to the whole update"
    )


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


NB09 = NotebookSpec(
    [
        Shown(
            r"One update's first-order entropy change by part, each ledger as a share of its summed \|cells\| "
            r"\(mean baseline, peaked start\)",
            _ledger_shares,
        ),
        Shown(
            r"Committed sweep: per-step correlation of each form's total with the exact first-order change, "
            r"mean over \d+ seeds \(K = 0\.4, Clip-Higher, std\)",
            _tracking,
        ),
        Shown(
            r"first-order dH summed over steps \(nats\): baseline = quantile, K = 0\.4, Clip-Higher on, std on, "
            r"peaked start, α = 0, optimizer sgd",
            _cumulative_ledger,
        ),
        Shown(r"committed runs, entropy: mean vs quantile, flat start \(mean ± std over seeds\)", _committed_runs),
        Shown(
            r"The update against GRPO's \(alpha = 0\) on the same \d+ batches, α = 0\.5, peaked start", _variance_bars
        ),
    ],
    probe="""
ledger_view.controls["K"].value = 0.8
assert "K = 0.8" in ledger_view.view.figure.layout.title.text
findings_view.controls["curve"].value = "success"
assert findings_view.view.figure.layout.yaxis.title.text == "success rate"
assert all(0 <= v <= 1 for t in findings_view.view.figure.data if t.name for v in t.y)
""",
)
