r"""The lab's results in sentences a participant can repeat, each written from the verdicts of the committed data.

Every sentence here is assembled from :func:`qae_lab.analysis.claims.verdict`'s words on the committed numbers,
never typed by hand, so that notebook 02's and 07's summaries, the README and the docs say one thing, and say what
was measured. A test compares each place that states one with what these functions return.
"""

from __future__ import annotations

from collections.abc import Mapping
from statistics import fmean

from qae_lab.analysis.claims import CLAIMS, FOUND, Verdict, verdict
from qae_lab.analysis.committed_data import load_prop42
from qae_lab.analysis.evidence import judge
from qae_lab.analysis.phenomena import FELL, ROSE, choose_setting, load_search, search_rows, setting_of

__all__ = ["bandit_training", "phenomenon_sentence", "qae_sentence", "saah_sentence", "sgd_sentence", "sgd_short"]


def bandit_training(data: Mapping | None = None, optimizer: str = "sgd") -> list[tuple[float, Verdict, Verdict]]:
    r"""``(lr, hard verdict, easy verdict)`` per learning rate of ``optimizer`` in notebook 02's committed training
    (``data``: :func:`~qae_lab.analysis.committed_data.load_prop42`'s dict): QAE's Prop. 4.2's two halves, quantile
    against mean, paired by replicate: hard prompts' entropy peak / start lower, easy prompts' entropy higher.

    >>> [(lr, h.word, e.word) for lr, h, e in bandit_training()]
    [(0.2, 'reversed', 'reversed'), (0.5, 'reversed', 'reversed'), (1.0, 'no difference', 'no difference')]
    """
    data = load_prop42() if data is None else data
    runs = {(r["optimizer"], r["lr"], r["baseline"]): r for r in data["training"]["runs"]}
    lrs = sorted({lr for opt, lr, _ in runs if opt == optimizer})
    if not lrs:
        raise ValueError(f"optimizer must be one the training ran, {sorted({k[0] for k in runs})}, got {optimizer!r}")
    out = []
    for lr in lrs:
        q, m = runs[optimizer, lr, "quantile"], runs[optimizer, lr, "mean"]
        # Prop. 4.2 (1): the hard prompts' peak rises less; (2): the easy prompts' entropy falls less
        out.append((lr, verdict(q["hard_peak"], m["hard_peak"], "<"), verdict(q["easy_h"], m["easy_h"], ">")))
    return out


def _said(v: Verdict) -> str:
    """A verdict word, with a null's 95% half-width."""
    return f"{v.word} (±{v.half:.2g})" if v.word == "no difference" else v.word


def _one_word(hard: Verdict, easy: Verdict, half: bool = False) -> str:
    """Both halves' word where they agree, else each half's (``half``: with a null's half-widths)."""
    if hard.word == easy.word:
        both = f" (±{max(hard.half, easy.half):.2g})" if half and hard.word == "no difference" else ""
        return hard.word + both
    say = _said if half else (lambda v: v.word)
    return f"{say(hard)} on hard prompts and {say(easy)} on easy ones"


def sgd_sentence(data: Mapping | None = None) -> str:
    r"""What plain SGD gives, in one sentence: notebook 02's bandits per learning rate and 07's sequence policy.

    >>> sgd_sentence()[:60]
    "Under plain SGD the quantile baseline's Prop. 4.2 direction "
    """
    by_word: dict[str, list[float]] = {}
    n = 0
    for lr, hard, easy in bandit_training(data):
        by_word.setdefault(_one_word(hard, easy), []).append(lr)
        n = hard.n
    bandits = " and ".join(f"{word} at lr " + " and ".join(f"{lr:g}" for lr in lrs) for word, lrs in by_word.items())
    hard, easy = (judge(claim, "sequence policy", "SGD")[1] for claim in ("hard_prop42", "easy_prop42"))
    return (
        f"Under plain SGD the quantile baseline's Prop. 4.2 direction does not appear: on notebook 02's trained "
        f"bandits it is {bandits} ({n} replicates, both regimes), and on notebook 07's sequence policy "
        f"{_one_word(hard, easy, half=True)} over {hard.n} seeds."
    )


def sgd_short(data: Mapping | None = None) -> str:
    r"""The verdict words plain SGD gets anywhere (02's bandits, 07's sequence policy), for a notebook's opening lines.

    >>> sgd_short()
    'under plain SGD it is reversed or no difference'
    """
    words = [w for _, h, e in bandit_training(data) for w in (h.word, e.word)]
    words += [judge(c, "sequence policy", "SGD")[1].word for c in ("hard_prop42", "easy_prop42")]
    return f"under plain SGD it is {' or '.join(dict.fromkeys(words))}"


def _agree(v: Verdict) -> str:
    return f"{v.agree} of {v.n} seeds" if v.agree is not None else f"{v.n} seeds"


def qae_sentence() -> str:
    r"""Notebook 07's "What you saw": QAE's effect on the exact sequence policy and its scope (the optimiser, the
    searched setting, why the lab's language models cannot show it), in two sentences.

    >>> qae_sentence()[:59]
    "Under Adam, QAE's quantile baseline kept the hard prompts' "
    """
    hard, easy = (judge(c, "sequence policy", "Adam")[1] for c in ("hard_prop42", "easy_prop42"))
    if hard.word == easy.word == "holds":
        effect = (
            f"Under Adam, QAE's quantile baseline kept the hard prompts' entropy from rising as far as under the mean "
            f"baseline ({_agree(hard)}) and the easy prompts' from falling as fast ({_agree(easy)})"
        )
    else:
        effect = f"Under Adam, Prop. 4.2 on the hard prompts: {hard.word}; on the easy ones: {easy.word}"
    sgd = _one_word(*(judge(c, "sequence policy", "SGD")[1] for c in ("hard_prop42", "easy_prop42")), half=True)
    lm = judge("hard_prop42", FOUND)[1]
    lm_part = (
        f"the lab's language models cannot show it (on the sums model {lm.why})"
        if lm.word == "cannot be tested here"
        else f"on the sums model, where a search made the mean baseline's entropy explode (notebook 06), it is "
        f"{_said(lm)} on the prompts that start hardest"
    )
    return (
        f"{effect}; under plain SGD, {sgd}. The setting is the favourable one a search chose (where the mean "
        f"baseline's hard-prompt entropy rose most), and {lm_part}."
    )


# what SA-AH's weights did to one update's variance (the claim: lowered it), by verdict word
_MOVED = {"holds": "lowered", "reversed": "raised", "no difference": "did not measurably change"}


def _on(v: Verdict, what: str = "") -> str:
    """A null's 95% half-width on the scale of plain GRPO's value (``what``: the quantity, named once)."""
    return f"±{v.half:.2g} on {what}{v.b:.2g}"


def saah_sentence() -> str:
    r"""SA-AH-GRPO's result in one sentence: its training variance and pass@1 on the lab's two small language models,
    and one update's variance on the exact sequence policy. Nulls give their half-width on the scale of plain
    GRPO's value (the settings' scales differ some tenfold), beside the paper's effect.

    >>> saah_sentence()[:56]
    "On the lab's small language models SA-AH-GRPO's training"
    """
    claims = {c.key: c for c in CLAIMS}
    settings = ("CPU preset", "sums model")
    tv, p1 = ({s: judge(claim, s)[1] for s in settings} for claim in ("saah_variance", "saah_pass1"))
    if {v.word for v in (*tv.values(), *p1.values())} == {"no difference"}:
        first, second = settings
        halves = (
            f"{_on(tv[first], 'a variance of ')} and {_on(p1[first], 'a pass@1 of ')} on the {first}, "
            f"{_on(tv[second])} and {_on(p1[second])} on the {second}"
        )
        paper = f"the paper: {claims['saah_variance'].effect} variance and {claims['saah_pass1'].effect} pass@1"
        models = (
            f"training variance and pass@1 could not be told apart from plain GRPO's ({tv[first].n} seeds; 95% "
            f"half-width {halves}; {paper})"
        )
    else:
        tv_said, p1_said = (
            f"{_said(v['sums model'])} on the sums model and {_said(v['CPU preset'])} on the CPU preset"
            for v in (tv, p1)
        )
        models = f"training variance was {tv_said} and its pass@1 {p1_said}"
    flat, peaked = (judge("saah_update_variance", "sequence policy", f"{s} start")[1] for s in ("flat", "peaked"))
    update = (
        f"at a fixed policy its weights {_MOVED.get(flat.word, flat.word)} one update's variance from a flat start "
        f"and {_MOVED.get(peaked.word, peaked.word)} it from a peaked one"
    )
    return f"On the lab's small language models SA-AH-GRPO's {models}; {update} (notebook 09)."


def phenomenon_sentence(search: list[dict] | None = None) -> str:
    r"""What the search for the entropy phenomenon on the sums model found (``search``: its rows, default the
    committed ones), and, found, the verdicts of its test on fresh seeds: the net entropy's peak and the held-out
    prompts by the regime they start in.

    >>> phenomenon_sentence()[:42]
    'A search of 17 runs of the mean baseline ('
    """
    rows = load_search("phenomenon") if search is None else search
    choice = choose_setting(rows)
    extent = choice["extent"]
    hours = sum(r.get("train_s") or 0.0 for r in rows) / 3600
    (top, top_name), (low, low_name) = extent["largest peak/start"], extent["smallest final/start"]
    head = (
        f"A search of {extent['tries']} runs of the mean baseline ({extent['settings']} settings, "
        f"{hours:.1f} hours of run time on a 2-core CPU) over DAPO's axes"
    )
    if choice["chosen"] is None:
        return (
            f"{head} found no setting where its entropy rose to {ROSE:.1f}x its start or fell to {FELL:.1f}x in most "
            f"seeds (the farthest: peak / start {top:.2f} in {top_name}, final / start {low:.2f} in {low_name}): at "
            f"this scale the explosion and the collapse that QAE prevents cannot be produced."
        )
    chosen = [r for r in rows if setting_of(r["name"]) == choice["chosen"]]
    explosion = choice["phenomenon"] == "explosion"
    key = "peak/start" if explosion else "final/start"
    rest = [r[key] for r in rows if r not in chosen and r.get(key) is not None and r["method"].startswith("mean")]
    changed = {r["try"]: r["changed"] for r in search_rows(rows)}[choice["chosen"]]
    net = judge(choice["phenomenon"], FOUND)[1]
    hard, easy = (judge(c, FOUND)[1] for c in ("hard_prop42", "easy_prop42"))
    said = key.replace("/", " / ")
    first, last = (fmean(r[k] for r in chosen) for k in ("reward_first", "reward_last"))
    return (
        f"{head} found its entropy {'rising past' if explosion else 'falling to'} "
        f"{ROSE if explosion else FELL:.1f}x its start "
        f"in {choice['showed']} seeds only with {changed} on the sums model ({said} {', '.join(f'{r[key]:.3f}' for r in chosen)}; "
        f"every other setting {'at most' if explosion else 'at least'} {max(rest) if explosion else min(rest):.3f}), "
        f"while its training reward went from {first:.2f} to {last:.2f}"
        f" (first and last fifth of the steps). There, on {net.n} fresh seeds, the quantile baseline's entropy "
        f"{said} was {net.a:.2f} against the mean's {net.b:.2f}: {_said(net)}; on the held-out prompts that start "
        f"hardest: {_said(hard)}; on the easiest: {_said(easy)}."
    )
