"""What notebooks 00 and 03 to 06 (the embedded model's rollouts and one update, a live run, the reference and
phenomena runs) must show: figure_checks.py."""

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
    nonincreasing,
    title_number,
    vlines,
    within,
)
from testkit.heatmap_checks import readable_heatmap
from testkit.nbexec import Figure


# ------------------------------------------------------------------ 00: plain GRPO in one update

SIGN_TRACES = ["A > 0", "A = 0", "A < 0"]  # nb00_plain_grpo.change_figure's traces, in this order where present


def _one_step(fig: Figure) -> None:
    axes(fig, "completion", "log π(y) after − before")
    assert fig.names == [n for n in SIGN_TRACES if n in fig.names] and fig.names, fig.names
    labels = [x for t in fig.lines for x in t["x"]]
    assert len(set(labels)) == len(labels) in (8, 16), labels  # one bar per completion of the group (G)
    assert all(re.fullmatch(r"y\d+ [✓✗]", s) for s in labels), labels
    for t in fig.lines:  # each bar is after - before of its hover values, in the trace of its advantage's sign
        sign = 1 - SIGN_TRACES.index(t["name"])
        for y, (before, after, a) in zip(finite(t["y"]), t["customdata"]):
            assert math.isclose(y, after - before, abs_tol=1e-9) and (a > 0) - (a < 0) == sign, (t["name"], y, a)
    bars = {t["name"]: finite(t["y"]) for t in fig.lines}
    pos, neg = bars.get("A > 0", []), bars.get("A < 0", [])
    m = re.fullmatch(r".*A > 0: (\d+) of (\d+) up · A < 0: (\d+) of (\d+) down", fig.title)
    assert m and [int(g) for g in m.groups()] == [
        sum(v > 0 for v in pos),
        len(pos),
        sum(v < 0 for v in neg),
        len(neg),
    ], f"the title's counts are not the bars': {fig.title}"


NB00 = NotebookSpec(
    [
        Shown(
            r"One GRPO step: change of log π\(y_i\) per completion · A > 0: \d+ of \d+ up · A < 0: \d+ of \d+ down",
            _one_step,
        ),
    ],
    probe="""
first = after.clone()
exec(next(cell for cell in reversed(In) if cell.startswith("model.load_state_dict(START)")))
assert torch.equal(after, first)                     # the update cell, run again, takes the same step
again = nb00_plain_grpo.sgd_update(model, tok, START, ro, A, LR, SETTINGS)
assert torch.equal(again.after, change.after)        # the larger step's function is the update cell's step
rows = change.summary_rows()                         # the table: the title's counts, and every completion once
assert sum(r["completions"] for r in rows) == G and sum(r["tokens"] for r in rows) == int(ro.mask.sum())
up, down, n = large.moved("A > 0")
verdicts = {guess: check_prediction(guess, large).split(":")[0] for guess in ("up", "down")}
assert verdicts["down"] == ("Right" if down == n > 0 else "Partly" if 0 < down < n else "Wrong"), verdicts
assert verdicts["up"] == ("Right" if up == n > 0 else "Partly" if 0 < up < n else "Wrong"), verdicts
assert verdicts["down"] == "Right", large.delta      # the Why's answer: at LR_LARGE the rewarded ones fall too
assert [r["R"] for r in nb00_plain_grpo.completion_rows(ro)] == ro.rewards.tolist()
assert bool(((A_qae == 0) | (torch.sign(A_qae) == torch.sign(A))).all())  # QAE zeroes one side, keeps the other's sign
assert int((A_qae != 0).sum()) < int((A != 0).sum()) or int(ro.rewards.sum()) in (0, G)  # a mixed group: fewer move
""",
)


# ------------------------------------------------------------------ 03: token entropy and horizon weights

GROUP = r"prompt (\d+)"  # the group notebook 03 shows (qae_lab.lab.notebooks.nb03_horizon.pick_group): the same in each figure


def _token_entropy(fig: Figure) -> None:
    axes(fig, "completion token t", "")
    hm = fig.heatmap
    assert len(hm["y"]) == 8 and all(re.fullmatch(r"y\d ✓|y\d ✗", s) for s in hm["y"]), hm["y"]
    correct = int(title_number(fig, r"(\d+)/8 correct"))
    assert sum(s.endswith("✓") for s in hm["y"]) == correct, f"{correct}/8 in the title, rows {hm['y']}"
    assert 0 < correct < 8, f"the group shown should hold successes and failures: {fig.title}"
    heatmap(fig, 8, len(hm["x"]), 0, 1)  # normalised entropy, empty past each completion's end
    assert len(hm["text"]) == 8 and any(s for row in hm["text"] for s in row), "no token written in the cells"
    readable_heatmap(fig, "H~_t")  # "First" cut to fit its cell ("Fir…"), never to "irst"; dark on yellow


def _pooled(labels, z, keep) -> list[float]:
    """The cells (padding left out) of the heatmap rows whose label ``keep`` accepts."""
    return [
        v
        for name, row in zip(labels, z)
        if keep(name)
        for v in row
        if v is not None and not (isinstance(v, float) and math.isnan(v))
    ]


def _horizon_weights(fig: Figure) -> None:
    axes(fig, "completion token t", "")
    hm = fig.heatmap
    assert [s.split(" · ")[0] for s in hm["y"]] == ["SA-AH"] * 8 + ["AH"] * 8, hm["y"]
    readable_heatmap(fig, "w_t", (0, 1))  # one colour scale at every alpha
    heatmap(fig, 16, len(hm["x"]), 0, 1)  # alpha = 0.5 >= 0: weights in (0, 1]
    labels, z = hm["y"], hm["z"]
    # GRPO's advantages on a mixed group: the failures are exactly the rollouts with A < 0
    assert all(("✗" in s) == ("A=-" in s) for s in labels), labels
    n_neg, neg, n_pos, sa_pos, ah_pos = (
        title_number(
            fig,
            r"mean w on its (\d+) rollouts with A < 0: (\S+) · on its "
            r"(\d+) others: SA-AH (\S+), AH (\S+)",
            g,
        )
        for g in range(1, 6)
    )
    assert n_neg == sum("A=-" in s for s in labels[:8]) and n_neg + n_pos == 8, (fig.title, labels)
    sa_failed = _pooled(labels, z, lambda s: s.startswith("SA-AH") and "A=-" in s)
    assert math.isclose(sum(sa_failed) / len(sa_failed), neg, abs_tol=0.005), (neg, sum(sa_failed) / len(sa_failed))
    assert neg <= 0.8, f"SA-AH's weights on the failed rollouts should fall visibly below 1: {neg}"
    assert set(_pooled(labels, z, lambda s: s.startswith("SA-AH") and "A=-" not in s)) == {1.0} and sa_pos == 1
    ah_kept = _pooled(labels, z, lambda s: s.startswith("AH") and "A=-" not in s)
    assert math.isclose(sum(ah_kept) / len(ah_kept), ah_pos, abs_tol=0.005) and ah_pos < 1  # AH discounts them


def _effective_tokens(fig: Figure) -> None:
    axes(fig, "α", "fraction / mean weight")
    names = [
        "effective tokens: AH",
        "effective tokens: SA-AH, mean baseline",
        "effective tokens: SA-AH, QAE K=0.4",
        "mean w on A<0 tokens",
    ]
    found = lines(fig, names, 66)
    alphas = finite(found[names[0]]["x"])
    assert math.isclose(alphas[0], -0.25) and math.isclose(alphas[-1], 3.0)
    zero = min(range(66), key=lambda i: abs(alphas[i]))
    for name, t in found.items():
        y = finite(t["y"])
        assert math.isclose(y[zero], 1.0), f"{name} at alpha = 0: {y[zero]} (every weight is 1)"
        nonincreasing(y[zero:], name)  # a larger alpha discounts more
    assert found[names[0]]["y"][-1] <= found[names[1]]["y"][-1] <= found[names[2]]["y"][-1]
    vlines(fig, [0.5])


def _touched(fig: Figure) -> None:
    rows = len(fig.heatmap["y"])
    hm = heatmap(fig, rows, 8, 0, 1)
    readable_heatmap(fig, "mean w_t", (0, 1))  # one colour scale whatever K, the baseline and alpha
    assert all(re.fullmatch(r"prompt \d+: p=\d/8 (hard|easy)", s) for s in hm["y"]), hm["y"]
    assert int(title_number(fig, r"(\d+) of (\d+) rollouts", 2)) == 8 * rows
    # a rollout discounted (A < 0) has mean weight < 1 unless its entropies round to 0; the rest keep 1
    assert sum(v < 1 for r in hm["z"] for v in r) <= int(title_number(fig, r"(\d+) of \d+ rollouts discounted"))


NB03 = NotebookSpec(
    [
        Shown(rf"H~_t, {GROUP}: .* \(gold \d+, \d/8 correct\)", _token_entropy),
        Shown(
            rf"w_t at α = 0\.5, {GROUP} \(top: SA-AH, bottom: AH\) · mean w on its \d rollouts with A < 0: \S+ · on "
            r"its \d others: SA-AH 1, AH \S+",
            _horizon_weights,
        ),
        Shown(r"Effective token fraction sum\(w\) / #tokens vs α", _effective_tokens),
        Shown(
            r"quantile baseline, K = 0\.4, α = 0\.5: \d+ of \d+ rollouts discounted, 0 of them in hard groups", _touched
        ),
    ],
    probe="""
from qae_lab.advantages import hard_regime
assert 0 < ro.success_counts[PROMPT] < G                     # the group shown holds successes and failures
assert f"prompt {PROMPT}:" in nb03_horizon.entropy_figure(ro, h, tok, PROMPT).layout.title.text
def weights_shown(alpha):           # the figure and the table under it, at one alpha: the same numbers
    weights.controls["alpha"].value = alpha
    fig, meta = weights.view.figure, weights.view.figure.layout.meta
    title = fig.layout.title.text.replace("<br>", " ")
    head, _, *body = [[c.strip() for c in r.strip("|").split("|")] for r in weights.text.splitlines()]
    table = {row[head.index("weights")]: dict(zip(head, row)) for row in body}
    assert f"α = {alpha:g}," in title and {r["α"] for r in table.values()} == {f"{alpha:.2f}"}, (title, table)
    for name, key in (("SA-AH", "saah"), ("AH", "ah")):
        assert table[name]["mean w"] == f"{meta[key]['neg']:.2f}" and table[name]["their mean w"] == (
            f"{meta[key]['pos']:.2f}"), (name, table[name], meta[key])
    assert f"with A < 0: {meta['saah']['neg']:.2f} ·" in title and table["AH"]["their mean w"] in title
    assert (fig.data[0].zmin, fig.data[0].zmax) == (0, 1)   # the colours mean the same at every alpha
    return meta

low, _, high = weights_shown(0.25), weights_shown(0.65), weights_shown(2.0)   # 0.65: the tester's move
assert "α = 2" in weights.view.figure.layout.title.text and high["prompt"] == PROMPT
assert high["saah"]["neg"] < low["saah"]["neg"] < 1          # a larger alpha discounts more
assert high["ah"]["pos"] < low["ah"]["pos"] < 1 == high["saah"]["pos"]   # AH discounts the successes, SA-AH not
labels, z = weights.view.figure.data[0].y, weights.view.figure.data[0].z
kept = [row for name, row in zip(labels, z) if name.startswith("SA-AH") and "A=-" not in name]
assert kept and all(v == 1.0 for row in kept for v in row if v == v)   # SA-AH: A >= 0 rollouts keep w = 1
weights.controls["alpha"].value = 0.0
assert weights.view.figure.layout.meta["saah"]["neg"] == 1.0   # alpha = 0 is plain GRPO

hard = hard_regime(ro.success_counts, G, 0.4)                # the same tokens on an easy mixed group, none under
for b in range(N_PROMPTS):                                   # QAE on a hard one
    if 0 < ro.success_counts[b] < G:
        assert counts["quantile"][b] == (0 if hard[b] else counts["mean"][b]) and counts["mean"][b] > 0, (b, counts)
assert int(ro.success_counts[PROMPT]) <= 3 and hard_regime(ro.success_counts, G, 0.6)[PROMPT]   # "clearly hard"
verdict = check_direction("down", counts["mean"][PROMPT], counts["quantile"][PROMPT], quantity="x", change="y")
assert verdict.startswith("Right"), verdict                  # the prediction's written answer
mixed = [b for b in range(N_PROMPTS) if 0 < ro.success_counts[b] < G]
assert [r["prompt"] for r in nb03_horizon.discount_rows(counts, G)] == mixed
tokens = [text for text, _, _ in uncertain]                  # section 2: the least sure steps are opening words
assert {"First", "Wait"} <= set(tokens) and all(t.strip()[:1].isupper() for t in tokens[:3]), tokens

def gate(K):                       # QAE + SA-AH touches exactly the failures of easy groups (p > 1 - K)
    touched.controls["K"].value = K
    easy = ~hard_regime(ro.success_counts, G, K)
    want = [i for i in range(len(ro.completions)) if ro.rewards[i] == 0 and easy[i // G]]
    meta = touched.view.figure.layout.meta
    assert meta["K"] == K and meta["touched"] == want and meta["in_hard"] == [], (K, meta, want)
    return set(want)

touched.controls["baseline"].value = "quantile"
low_k, high_k = gate(0.2), gate(0.8)
moved = hard_regime(ro.success_counts, G, 0.2) & ~hard_regime(ro.success_counts, G, 0.8)   # hard -> easy
assert low_k <= high_k and (low_k < high_k) == bool(moved.any())   # raising K only turns prompts easy
touched.controls["baseline"].value = "mean"
mean_touched = set(touched.view.figure.layout.meta["touched"])
hm = touched.view.figure.data[0]
assert len(set(hm.y)) == len(hm.y) == N_PROMPTS          # one row per prompt: no two rows merge under one label
untouched = [v for i, v in enumerate(x for row in hm.z for x in row) if i not in mean_touched]
assert all(v == 1.0 for v in untouched)                 # only the counted rollouts are coloured
mixed_failures = {i for i in range(len(ro.completions)) if ro.rewards[i] == 0 and 0 < ro.success_counts[i // G] < G}
assert mean_touched == mixed_failures
""",
)

# ------------------------------------------------------------------ 04: live LoRA GRPO (headless here)

LIVE_PANELS = [
    "easy and hard prompts (QAE)",
    "entropy",
    "zero-advantage completions",
    "token weight, failed completions",
    "reward and pass rate",
    "K and alpha in force",
    "entropy ledger: dH by sign of A",
    "entropy ledger: dH by QAE regime",
]
DASHBOARD = r"waiting for the first step\.\.\. \(\d+ steps to train\)|step \d+ of \d+ · knobs in force: .*"


def _panel(title: str) -> str:
    """A dashboard panel's title as :data:`LIVE_PANELS` names it: the shares' title may say how many prompts a step
    holds, and a 0/1 reward's panel is one line (qae_lab.lab.live.live_panels)."""
    if title.startswith("easy and hard prompts (QAE): "):
        return "easy and hard prompts (QAE)"
    return "reward and pass rate" if title == "mean reward = pass rate (a 0/1 reward)" else title


def _dashboard(fig: Figure) -> None:
    """The live dashboard (qae_lab.lab.live.Dashboard): its panels in order, each line named in plain words in its
    panel's own legend, one colour per metric, a unit on every y axis; every step up to the title's."""
    panels = [_panel(a["text"]) for a in fig.layout.get("annotations", []) if _panel(a.get("text", "")) in LIVE_PANELS]
    assert panels == LIVE_PANELS, f"dashboard panels {panels}"
    named = [(t["name"], t.get("legend")) for t in fig.lines]
    assert all("/" not in name and legend for name, legend in named), named  # plain words, in a panel's legend
    colours = {}
    for t in fig.lines:
        assert colours.setdefault(t["meta"], t["line"]["color"]) == t["line"]["color"], (t["meta"], colours)
    assert len(set(colours.values())) == len(colours), colours  # no two metrics share a colour
    assert all(fig.layout[ax]["title"]["text"] for ax in fig.layout if ax.startswith("yaxis")), "a y axis without unit"
    if fig.title.startswith("step "):  # a redraw after step n: every step up to n, in each panel's curves
        n = int(title_number(fig, r"step (\d+) of "))
        steps = [list(t["x"]) for t in fig.lines if t["meta"] == "reward"]
        assert steps == [list(range(1, n + 1))], f"{fig.title!r}: reward drawn at steps {steps}"
        assert all(finite(t["y"], t["name"]) for t in fig.lines if t["x"] != [None])
    else:  # before the first step: each panel names what it will draw, and waits
        assert all(t["x"] == [None] for t in fig.lines), fig.lines
        notes = [a["text"] for a in fig.layout["annotations"] if a["text"] == "waiting for the first step..."]
        assert len(notes) == len(LIVE_PANELS), notes


NB04 = NotebookSpec(
    [Shown(DASHBOARD, _dashboard, count=None)],
    probe="""
assert headless() and not lab.running
rows = lab.logged_steps()
assert [r["step"] for r in rows] == list(range(1, STEPS + 1)), [r["step"] for r in rows]
assert all(r["qae/k"] == 0.4 for r in rows)                 # nobody moved K
knobs = {"K": "0.40", "baseline": "K-quantile (QAE)", "token weighting": "none", "α": "—"}
assert nb04_live_run.knob_ranges(rows, lab.token_weightings()) == [{"steps": f"1-{STEPS}", **knobs}]
assert nb04_live_run.knob_changes_table(rows, lab.token_weightings()) == []
last = lab.dashboard.view.figure
assert last.layout.title.text == (
    f"step {STEPS} of {STEPS} · knobs in force:<br>steps 1-{STEPS}: K 0.40 · K-quantile (QAE) baseline · no token weighting"
), last.layout.title.text
assert [list(t.x) for t in last.data if t.meta == "reward"] == [list(range(1, STEPS + 1))]
assert any(o.get("text", "").startswith("after:") for o in lab.messages.outputs)   # the evaluation after training
assert (OUT / "eval_before.json").is_file() and (OUT / "eval_after.json").is_file()
assert not OUT.is_absolute() and (Path.cwd() / OUT / "log.jsonl").is_file()   # in the notebook's own folder
import json, torch                                          # "Save and export": the run's model, exported
from transformers import AutoModelForCausalLM
assert (OUT / "model").is_dir() and EXPORT == OUT / "export" and (EXPORT / "model.safetensors").is_file()
assert AutoModelForCausalLM.from_pretrained(EXPORT).dtype == (torch.bfloat16 if ON_GPU else torch.float32)
old, new = (json.loads((OUT / f"eval_{w}.json").read_text())["problems"][:4] for w in ("before", "after"))
assert [p["question"] for p in old] == [p["question"] for p in new]   # the table pairs the same problems
import html
table = nb04_live_run.completions_html(paired_completions(before, OUT / "eval_after.json", n=4))   # the one shown
assert table.count("<tr>") == 1 + len(old) and all(html.escape(p["greedy"]["completion"]) in table for p in new)
after = json.loads((OUT / "eval_after.json").read_text())["summary"]
assert f"| greedy pass@1 | " in (EXPORT / "README.md").read_text()
assert f"{after['greedy_pass@1']:.3f} |" in (EXPORT / "README.md").read_text()   # the card's numbers: the run's
""",
)

# ------------------------------------------------------------------ 05: comparing runs

METHODS = ["mean", "qae", "sa_ah", "qae_sa_ah"]
SMOOTHED = r"mean over seeds ± std, trailing average over 20 step\(s\)"


def _pass_bars(fig: Figure) -> None:
    axes(fig, "", "pass@1")
    found = lines(fig, ["before", "after"], 4)
    for t in found.values():
        assert list(t["x"]) == METHODS, t["x"]
        within(t["y"], 0, 1, t["name"])
        within(t["error_y"]["array"], 0, 1, f"{t['name']} seed spread")


def _detrended(fig: Figure) -> None:
    axes(fig, "step", "mean reward of the step's completions")
    found = lines(fig, ["reward per step", "trailing average, 20 steps"])
    for t in found.values():
        within(t["y"], 0, 1, t["name"])
    detrended, plain = (title_number(fig, r"detrended variance (\S+) .* plain variance (\S+)", g) for g in (1, 2))
    assert 0 < detrended < plain, "removing the learning trend should leave less variance"


NB05 = NotebookSpec(
    [
        Shown(
            rf"entropy \(nats per token\) {SMOOTHED}",
            lambda f: band_lines(f, METHODS, 3, "entropy (nats per token)", 0),
        ),
        Shown(r"pass@1 before and after training \(mean over seeds ± std\)", _pass_bars),
        Shown(r"mean-seed0: detrended variance \S+ \(window 20\), plain variance \S+", _detrended),
        Shown(
            rf"zero-advantage fraction {SMOOTHED}", lambda f: band_lines(f, METHODS, 3, "zero-advantage fraction", 0, 1)
        ),
    ],
    probe="""
def line(method):
    return next(t for t in curves.view.figure.data if t.name and t.name.startswith(method + " ("))
def wiggle(y):
    return sum(abs(b - a) for a, b in zip(y[:-1], y[1:]))
curves.controls["window"].value = 1
rough = wiggle(line("mean").y)
curves.controls["window"].value = 50
assert "over 50 step(s)" in curves.view.figure.layout.title.text
assert wiggle(line("mean").y) < rough / 2                 # a longer trailing average smooths the curve
curves.controls["metric"].value = "saah/w_mean_neg"
assert "SA-AH" in curves.view.figure.layout.yaxis.title.text
assert {t.name.split(" (")[0] for t in curves.view.figure.data if t.name} == {"sa_ah", "qae_sa_ah"}
curves.controls["metric"].value = "qae/zero_adv_frac"
assert all(0 <= v <= 1 for t in curves.view.figure.data if t.name for v in t.y)
assert min(line("qae").y) > max(line("mean").y)           # the quantile gate's zeros on top of all-equal groups
passes.controls["metric"].value = "greedy pass@1"
assert "greedy" in passes.view.figure.layout.title.text
old = detrend.view.figure.layout.title.text
detrend.controls["window"].value = 5
assert "window 5" in detrend.view.figure.layout.title.text and detrend.view.figure.layout.title.text != old
""",
)

# ------------------------------------------------------------------ 08: write it yourself

RUNS08 = ["QAETrainer, K = 0.4", "TRL GRPOTrainer, mean"]


def _two_runs(fig: Figure) -> None:
    axes(fig, "step", "mean reward")
    steps = int(title_number(fig, r"(\d+) steps per run"))
    for name, t in lines(fig, RUNS08, steps).items():
        assert list(t["x"]) == list(range(1, steps + 1)), (name, t["x"])
        within(t["y"], 0, 1, name)


NB08 = NotebookSpec(
    [
        Shown(r"Mean reward per step, \d+ steps per run", _two_runs),
    ],
    probe="""
first = [rewards[0] for rewards in REWARD.values()]
assert first[0] == first[1], first                 # step 1 scores the same completions (the prediction's Why)
assert all(r["qae/k"] == 0.4 for r in qae.state.log_history if "qae/k" in r)
assert not any(k.startswith("qae/") for r in grpo.state.log_history for k in r)   # plain TRL logs no QAE metric
assert len(REWARD["TRL GRPOTrainer, mean"]) == len(REWARD["QAETrainer, K = 0.4"]) == STEPS
assert correct_answer([[{"content": "<answer>7</answer> more"}]], gold=["7"]) == [0.0]   # nothing after the block
""",
)


# ------------------------------------------------------------------ 06: phenomena in miniature

ENTROPY_METHODS = ["mean", "qae", "mean+clip_higher", "qae+clip_higher"]


def _pass_at_k(fig: Figure) -> None:
    axes(fig, "k (samples)", "pass@k")
    found = lines(fig, [f"{m}, after" for m in ENTROPY_METHODS] + ["before (every method)"])
    ks = list(found["before (every method)"]["x"])
    assert ks == [2**i for i in range(len(ks))] and ks[-1] == 32, ks  # powers of two up to 32
    assert fig.layout["xaxis"]["type"] == "log" and list(fig.layout["xaxis"]["tickvals"]) == ks  # a tick per k
    assert found["before (every method)"]["line"]["dash"] == "dash"
    assert centred_bands(fig) == len(ENTROPY_METHODS)
    for name, t in found.items():
        assert list(t["x"]) == ks
        nonincreasing([-v for v in within(t["y"], 0, 1, name)], f"{name}: pass@k falls with k")


def _k_sweep(fig: Figure) -> None:
    axes(fig, "K", "final entropy")
    sweep = lines(fig, ["final entropy"], 4)["final entropy"]
    assert list(sweep["x"]) == [0.2, 0.4, 0.6, 0.8], sweep["x"]
    within(sweep["y"], 0, math.inf)
    assert centred_bands(fig) == 1, "no seed spread on the K sweep"


def _regimes(fig: Figure) -> None:
    methods = ["mean+clip_higher (8 seeds)", "qae+clip_higher (8 seeds)"]  # the phenomenon experiment's fresh seeds
    assert fig.names == methods * 3, fig.names  # hard | easy | mixed, each panel both methods (one legend entry each)
    assert sum(t.get("showlegend") is not False for t in fig.lines) == 2
    assert len(fig.bands) == 6  # each line's ± std band over seeds
    for t in fig.lines:
        within(t["y"], 0, math.inf, t["name"])
        assert list(t["x"])[0] == 0, t["x"]  # measured before the first update


def _phenomenon(fig: Figure) -> None:
    bars = [t for t in fig.traces if t.get("type") == "bar"]
    assert len(bars) == 1 and len(bars[0]["y"]) == 17, "a bar per search try of the mean baseline"
    assert sum(v >= 1.1 for v in bars[0]["x"]) == 3  # the three seeds of lr 3e-4, past the explosion's line
    curves = ["mean+clip_higher (8 seeds)", "qae+clip_higher (8 seeds)"]
    assert fig.names == ["peak / start", *curves], fig.names
    for t in fig.lines[1:]:
        assert len(t["x"]) == len(t["y"]) >= 200, t["name"]  # a point per optimizer step
        within(t["y"], 0.5, 3, t["name"])  # entropy over its start
    assert centred_bands(fig) == 2


NB06 = NotebookSpec(
    [
        Shown(r"The mean baseline's entropy explodes where its peak passes 1\.1x its start .*", _phenomenon),
        Shown(r"Held-out prompts grouped by start success: .*", _regimes),
        Shown(
            r"entropy \(nats per token\), mean over seeds ± std \(trailing 10-step average\)",
            lambda f: band_lines(f, ENTROPY_METHODS, 3, "entropy (nats per token)", 0),
        ),
        Shown(r"pass@k before and after training, mean over seeds ± std", _pass_at_k),
        Shown(
            r"completion length \(tokens\), mean over seeds ± std \(20-step average\)",
            lambda f: band_lines(f, ["mean", "sa_ah"], 3, "completion length (tokens)", 1),
        ),
        Shown(r"final entropy after training against K", _k_sweep),
    ],
    probe="""
old = entropy_view.view.figure
entropy_view.controls["metric"].value = "reward"
assert entropy_view.view.figure is not old and "reward" in entropy_view.view.figure.layout.title.text
names = {t.name.split(" (")[0] for t in entropy_view.view.figure.data if t.name}
assert names == {"mean", "qae", "mean+clip_higher", "qae+clip_higher"}, names
entropy_view.controls["metric"].value = "ledger/dh_hard_neg"
assert "hard prompts, A < 0" in entropy_view.view.figure.layout.title.text
# QAE's gate empties this cell with 0/1 rewards: its curve is exactly 0, the mean baseline's is not
qae = next(t for t in entropy_view.view.figure.data if t.name and t.name.split(" (")[0] == "qae")
assert all(v == 0 for v in qae.y)
saah_view.controls["metric"].value = "saah/w_mean_neg"
assert {t.name.split(" (")[0] for t in saah_view.view.figure.data if t.name} == {"sa_ah"}  # only SA-AH logs it
sweep.controls["quantity"].value = "pass@32"
assert "pass@32" in sweep.view.figure.layout.title.text and list(sweep.view.figure.data[-1].x) == [0.2, 0.4, 0.6, 0.8]
assert {key for key, setting, _ in evidence.EVIDENCE if setting == "sums model"} == {key for key, _, _ in JUDGED}
assert all(v.word in claims.VERDICTS for _, v in JUDGED.values())
assert 0 < phenomena.clipped_share(ENTROPY) < 0.01  # the prediction's measurement: the clip acts on few tokens
""",
)
