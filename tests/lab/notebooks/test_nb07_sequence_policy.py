"""qae_lab.lab.notebooks.nb07_sequence_policy: notebook 07's prefix table, against the logit table and the chain rule, and its
figures, against the committed runs they draw."""

from __future__ import annotations

import plotly.graph_objects as go
import pytest

from qae_lab.analysis.seqpolicy_runs import load_regimes
from qae_lab.lab.notebooks.nb07_sequence_policy import prefix_table, start_rates_figure
from qae_lab.lab.run_figures import regimes_figure
from qae_lab.toys.seqpolicy import make_tasks, sequence_entropy


def test_prefix_table_rows_follow_the_logit_table_and_the_chain_rule_agrees():
    t = make_tasks(1, 3, 2, start="peaked", seed=1, sharpness=1.0)
    lines = prefix_table(t.logits[0])
    assert [line.split()[0] for line in lines[1:5]] == ["(empty)", "0", "1", "2"]  # one row per prefix, in order
    chain, enumerated = (float(x.split("= ")[1].split()[0]) for x in lines[-1].split("; "))
    assert chain == enumerated == pytest.approx(float(sequence_entropy(t.logits[0])), abs=1e-4)
    assert "enumerating the 9 sequences" in lines[-1]
    for bad, match in ((t.logits, "one prompt"), (make_tasks(1, 5, 2).logits[0], "V <= 4")):
        with pytest.raises(ValueError, match=match):
            prefix_table(bad)


def test_start_rates_figure_sorts_each_seed_then_averages_by_rank():
    p0 = [[0.1, 0.9, 0.5, 0.3, 0.7, 0.2], [0.4, 0.2, 0.8, 0.6, 0.0, 1.0]]
    fig = start_rates_figure(p0, 2)
    assert [t.name for t in fig.data] == ["hard: the 2 hardest of 6", "the 2 in between", "easy: the 2 easiest of 6"]
    want = [sum(v) / 2 for v in zip(sorted(p0[0]), sorted(p0[1]))]  # rank by rank, hardest first
    drawn = [y for t in fig.data for y in t.y]
    assert drawn == pytest.approx(want) and [x for t in fig.data for x in t.x] == ["1", "2", "3", "4", "5", "6"]
    assert fig.layout.title.text.replace("<br>", " ") == (
        "Start success rate p of the 6 prompts of each seed, hardest to easiest, mean over 2 seeds"
    )
    assert fig.layout.barmode == "overlay"
    assert [t.name for t in start_rates_figure([[0.1, 0.9]], 1).data] == [
        "hard: the 1 hardest of 2",
        "easy: the 1 easiest of 2",
    ]
    with pytest.raises(ValueError, match="n"):
        start_rates_figure(p0, 4)  # the groups would overlap


def test_start_rates_figure_has_one_notion_of_hard_the_regimes_figures():
    # its groups are named as the regimes figure's panels, and no second "hard" (QAE's 1 - K line) is drawn
    r = load_regimes()
    meta = r["meta"]
    fig = start_rates_figure([[0.1 * i for i in range(meta["n_prompts"])]], meta["n_group"])
    panels = [a.text.split("<br>")[0] for a in regimes_figure(r).layout.annotations]
    names = [t.name for t in fig.data]
    assert [names[0], names[-1]] == panels[:2], (names, panels)
    assert not fig.layout.shapes and not fig.layout.annotations
