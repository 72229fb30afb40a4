"""Tests for qae_lab.task.evaluate: pass@k against brute force, evaluate end to end on a tiny random
Qwen2, its bookkeeping with a stubbed generator, JSON round-trip, bad input (generation itself:
tests/task/test_sampling.py)."""

from __future__ import annotations

import itertools
import json
import math
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

import qae_lab.task.evaluate as ev
from qae_lab.task.data import synthetic_task, xml_completion
from qae_lab.task.answers import is_correct
from qae_lab.task.evaluate import EvalResult, evaluate, pass_at_k

# ---------------------------------------------------------------- pass@k: hand cases


def test_pass_at_k_hand():
    assert pass_at_k(8, 0, 1) == 0.0 and pass_at_k(8, 0, 8) == 0.0
    assert pass_at_k(8, 8, 1) == 1.0 and pass_at_k(8, 8, 8) == 1.0
    for c in range(9):
        assert pass_at_k(8, c, 1) == pytest.approx(c / 8, abs=1e-15)
    assert pass_at_k(8, 2, 4) == pytest.approx(1 - 15 / 70, abs=1e-15)  # C(6,4)/C(8,4) = 15/70
    assert pass_at_k(8, 1, 8) == 1.0  # n - c = 7 < k
    assert pass_at_k(8, 5, 4) == 1.0  # n - c = 3 < k: exactly 1, no rounding
    assert pass_at_k(1, 1, 1) == 1.0 and pass_at_k(1, 0, 1) == 0.0


# ---------------------------------------------------------------- pass@k: brute force


def brute_force_pass_at_k(n: int, c: int, k: int) -> Fraction:
    """The fraction of k-subsets of n samples (the first c correct) holding a correct one."""
    subsets = list(itertools.combinations(range(n), k))
    return Fraction(sum(any(i < c for i in s) for s in subsets), len(subsets))


def test_pass_at_k_matches_brute_force():
    for n in range(1, 11):
        for c in range(n + 1):
            for k in range(1, n + 1):
                assert abs(pass_at_k(n, c, k) - float(brute_force_pass_at_k(n, c, k))) <= 1e-12, (n, c, k)


@given(st.integers(1, 2000).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n), st.integers(1, n))))
def test_pass_at_k_matches_exact_binomials_large_n(nck):
    n, c, k = nck
    exact = 1 - Fraction(math.comb(n - c, k), math.comb(n, k))  # exact rational (huge integers, reference only)
    assert pass_at_k(n, c, k) == pytest.approx(float(exact), rel=1e-9, abs=1e-12)


@given(st.integers(1, 300).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n), st.integers(1, n))))
def test_pass_at_k_monotone_in_k_and_c(nck):
    n, c, k = nck
    p = pass_at_k(n, c, k)
    assert 0.0 <= p <= 1.0
    if k < n:
        assert pass_at_k(n, c, k + 1) >= p
    if c < n:
        assert pass_at_k(n, c + 1, k) >= p


@pytest.mark.parametrize(
    "n,c,k,name",
    [
        (0, 0, 1, "n"),
        (-1, 0, 1, "n"),
        (8, -1, 1, "c"),
        (8, 9, 1, "c"),
        (8, 2, 0, "k"),
        (8, 2, 9, "k"),
        (8.0, 2, 1, "n"),
        (8, 2.5, 1, "c"),
        (8, 2, True, "k"),
        ("8", 2, 1, "n"),
        (8, None, 1, "c"),
    ],
)
def test_pass_at_k_bad_input(n, c, k, name):
    with pytest.raises(ValueError, match=rf"^{name} must"):
        pass_at_k(n, c, k)


# ---------------------------------------------------------------- end to end, a tiny model


def test_evaluate_end_to_end_tiny_model(tiny_qwen2, tmp_path):
    model, tok = tiny_qwen2
    records = synthetic_task(3, levels=(1, 2), seed=1) + [
        {"id": "gsm8k-test-0", "question": "A pen costs 3 dollars. What do 4 pens cost?", "gold": "12", "level": None}
    ]
    kw = {"num_samples": 2, "ks": (1, 2), "max_new_tokens": 4, "batch_size": 4, "progress": False}
    res = evaluate(model, tok, records, **kw)
    assert set(res.summary) == {
        "n_problems",
        "n_samples",
        "greedy_pass@1",
        "pass@1",
        "pass@2",
        "extracted_frac",
        "distinct_correct",
        "top_share",
    }
    assert res.summary["n_problems"] == 4 and sorted(res.by_level) == [0, 1, 2]
    assert [p["id"] for p in res.problems] == [r["id"] for r in records]
    assert all(len(p["samples"]) == 2 for p in res.problems) and len(res.success_rates()) == 4
    assert evaluate(model, tok, records, **kw).problems == res.problems  # deterministic by seed
    assert tok.padding_side == "right"


# ---------------------------------------------------------------- evaluate's bookkeeping, stubbed generator


class FakeTokenizer:
    """Just enough for qae_lab.task.data.prompt_text: the 'prompt' is the question itself."""

    chat_template = "fake"

    def apply_chat_template(self, messages, tokenize=False, add_generation_prompt=True):
        return messages[-1]["content"]


RECORDS = synthetic_task(4, levels=(1, 2), seed=11) + [
    {"id": "gsm8k-test-5", "question": "How many legs do 3 cats have?", "gold": "12", "level": None}
]
# per problem: greedy right?, and (right, wrong, unformatted) among its n = 4 samples
#        level    greedy   c   samples
PLAN = [
    (1, False, 0, ["wrong", "wrong", "junk", "wrong"]),
    (2, True, 1, ["wrong", "right", "wrong", "junk"]),
    (1, False, 2, ["right", "wrong", "right", "junk"]),
    (2, True, 4, ["right", "right", "right", "right"]),
    (0, True, 3, ["right", "junk", "right", "right"]),
]


def completion(record: dict, kind: str) -> str:
    if kind == "junk":  # no number at all: nothing to extract
        return "<reasoning>\nI am not sure.\n</reasoning>\n<answer>\nno idea\n</answer>"
    gold = int(record["gold"])
    return xml_completion({"steps": ["..."], "gold": record["gold"]}, answer=str(gold if kind == "right" else gold + 1))


@pytest.fixture
def stub(monkeypatch):
    calls = []
    by_question = {r["question"]: (r, plan) for r, plan in zip(RECORDS, PLAN)}

    def fake_generate(model, tokenizer, prompts, *, num_samples=1, do_sample=False, **kwargs):
        calls.append({"num_samples": num_samples, "do_sample": do_sample, **kwargs})
        out = []
        for p in prompts:
            rec, (_, greedy_right, _, kinds) = by_question[p]
            out.append(
                [completion(rec, k) for k in kinds]
                if do_sample
                else [completion(rec, "right" if greedy_right else "wrong")]
            )
        return out

    monkeypatch.setattr(ev, "generate", fake_generate)
    return calls


def test_evaluate_bookkeeping_hand(stub):
    assert [r["level"] for r in RECORDS] == [p[0] or None for p in PLAN]
    res = evaluate(
        None,
        FakeTokenizer(),
        RECORDS,
        num_samples=4,
        ks=(4, 1, 2),
        temperature=0.7,
        top_p=0.9,
        max_new_tokens=32,
        batch_size=2,
        seed=3,
        progress=False,
    )
    # one greedy pass, then one sampled pass, with the options passed through
    assert [(c["num_samples"], c["do_sample"]) for c in stub] == [(1, False), (4, True)]
    assert stub[1]["temperature"] == 0.7 and stub[1]["top_p"] == 0.9 and stub[1]["seed"] == 3
    assert all(c["max_new_tokens"] == 32 and c["batch_size"] == 2 for c in stub)

    assert [p["n_correct"] for p in res.problems] == [0, 1, 2, 4, 3]
    assert res.success_rates() == [0.0, 0.25, 0.5, 1.0, 0.75]
    assert [p["level"] for p in res.problems] == [1, 2, 1, 2, 0]
    assert [p["greedy"]["correct"] for p in res.problems] == [False, True, False, True, True]
    p1 = res.problems[1]
    assert p1["gold"] == RECORDS[1]["gold"] and p1["id"] == RECORDS[1]["id"]
    assert [s["correct"] for s in p1["samples"]] == [False, True, False, False]
    assert p1["samples"][1]["extracted"] == RECORDS[1]["gold"]
    assert p1["samples"][0]["extracted"] == str(int(RECORDS[1]["gold"]) + 1)
    assert p1["samples"][3]["extracted"] is None

    # diversity, counted here from the judged samples: different right texts, and the most frequent text's share
    for summary, problems in [(res.summary, res.problems)] + [
        (res.by_level[lv], [p for p in res.problems if p["level"] == lv]) for lv in res.by_level
    ]:
        texts = [[s["completion"].strip() for s in p["samples"]] for p in problems]
        right = [{t for t, s in zip(ts, p["samples"]) if s["correct"]} for ts, p in zip(texts, problems)]
        assert summary.pop("distinct_correct") == pytest.approx(sum(map(len, right)) / len(problems))
        assert summary.pop("top_share") == pytest.approx(
            sum(max(map(ts.count, ts)) / 4 for ts in texts) / len(problems)
        )
    # pass@2 per problem, 1 - C(4-c, 2)/C(4, 2): c=0 -> 0, 1 -> 1/2, 2 -> 5/6, 3 -> 1, 4 -> 1
    assert res.summary == pytest.approx(
        {
            "n_problems": 5,
            "n_samples": 4,
            "greedy_pass@1": 3 / 5,
            "pass@1": (0 + 0.25 + 0.5 + 1 + 0.75) / 5,
            "pass@2": (0 + 1 / 2 + 5 / 6 + 1 + 1) / 5,
            "pass@4": 4 / 5,
            "extracted_frac": 16 / 20,
        },
        abs=1e-12,
    )
    assert list(res.by_level) == [0, 1, 2]
    assert res.by_level[1] == pytest.approx(
        {
            "n_problems": 2,
            "n_samples": 4,
            "greedy_pass@1": 0.0,
            "pass@1": 0.25,
            "pass@2": 5 / 12,
            "pass@4": 0.5,
            "extracted_frac": 6 / 8,
        },
        abs=1e-12,
    )
    assert res.by_level[2] == pytest.approx(
        {
            "n_problems": 2,
            "n_samples": 4,
            "greedy_pass@1": 1.0,
            "pass@1": 0.625,
            "pass@2": 0.75,
            "pass@4": 1.0,
            "extracted_frac": 7 / 8,
        },
        abs=1e-12,
    )
    assert res.by_level[0] == pytest.approx(
        {
            "n_problems": 1,
            "n_samples": 4,
            "greedy_pass@1": 1.0,
            "pass@1": 0.75,
            "pass@2": 1.0,
            "pass@4": 1.0,
            "extracted_frac": 3 / 4,
        },
        abs=1e-12,
    )


def test_evaluate_judges_by_the_verdict_it_is_given(monkeypatch):
    rec = RECORDS[:1]
    right = completion(rec[0], "right")
    samples = [right, right + "\nAnd one more thing.", completion(rec[0], "wrong")]  # the 2nd runs on

    def fake_generate(model, tokenizer, prompts, *, num_samples=1, do_sample=False, **kwargs):
        return [samples if do_sample else [right + " and on"]]

    monkeypatch.setattr(ev, "generate", fake_generate)
    kw = {"num_samples": 3, "ks": (1, 3), "progress": False}
    strict = evaluate(None, FakeTokenizer(), rec, **kw)  # default: qae_lab.task.answers.strict_is_correct
    assert [s["correct"] for s in strict.problems[0]["samples"]] == [True, False, False]
    assert strict.summary["greedy_pass@1"] == 0.0 and strict.summary["pass@1"] == 1 / 3
    assert "lenient_pass@1" not in strict.summary and "correct_lenient" not in strict.problems[0]["samples"][0]
    lenient = evaluate(None, FakeTokenizer(), rec, verdict=is_correct, **kw)
    assert [s["correct"] for s in lenient.problems[0]["samples"]] == [True, True, False]
    both = evaluate(None, FakeTokenizer(), rec, lenient=is_correct, **kw)
    assert both.problems[0]["samples"][1] == {
        "completion": samples[1],
        "extracted": rec[0]["gold"],
        "correct": False,
        "correct_lenient": True,
    }
    assert both.summary == {
        **strict.summary,
        "lenient_pass@1": lenient.summary["pass@1"],
        "lenient_greedy_pass@1": lenient.summary["greedy_pass@1"],
    }
    assert both.by_level == strict.by_level  # the lenient figures are overall only
    for bad in ({"verdict": "strict"}, {"verdict": None}, {"lenient": "yes"}):
        with pytest.raises(ValueError, match="verdict"):
            evaluate(None, FakeTokenizer(), rec, **bad, **kw)


def test_evaluate_pass1_equals_mean_success_rate_exactly(stub):
    res = evaluate(None, FakeTokenizer(), RECORDS, num_samples=4, ks=(1,), progress=False)
    assert res.summary["pass@1"] == sum(res.success_rates()) / len(RECORDS)
    assert "pass@4" not in res.summary


def test_evaluate_without_greedy(stub):
    res = evaluate(None, FakeTokenizer(), RECORDS, num_samples=4, ks=(1, 4), greedy=False, progress=False)
    assert [c["do_sample"] for c in stub] == [True]
    assert "greedy_pass@1" not in res.summary and all(p["greedy"] is None for p in res.problems)
    assert res.summary["pass@4"] == pytest.approx(0.8)


def test_to_json_round_trip(stub, tmp_path):
    res = evaluate(None, FakeTokenizer(), RECORDS, num_samples=4, ks=(1, 2, 4), progress=False)
    path = res.to_json(tmp_path / "eval.json")
    raw = json.loads(path.read_text(encoding="utf-8"))
    assert set(raw) == {"summary", "by_level", "problems"} and set(raw["by_level"]) == {"0", "1", "2"}
    back = EvalResult.from_json(path)
    assert back == res
    assert back.success_rates() == res.success_rates()


# ---------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "kwargs,name",
    [
        ({"num_samples": 0}, "num_samples"),
        ({"num_samples": 2.0}, "num_samples"),
        ({"ks": (1, 9)}, "ks"),
        ({"ks": (0,)}, "ks"),
        ({"ks": (1.5,)}, "ks"),
        ({"ks": "8"}, "ks"),
        ({"ks": None}, "ks"),
        ({"temperature": 0}, "temperature"),
        ({"temperature": -1.0}, "temperature"),
        ({"temperature": float("nan")}, "temperature"),
        ({"temperature": float("inf")}, "temperature"),
        ({"top_p": 0}, "top_p"),
        ({"top_p": 1.5}, "top_p"),
        ({"top_p": "0.9"}, "top_p"),
        ({"max_new_tokens": 0}, "max_new_tokens"),
        ({"batch_size": 0}, "batch_size"),
        ({"batch_size": True}, "batch_size"),
        ({"seed": -1}, "seed"),
        ({"greedy": 1}, "greedy"),
    ],
)
def test_evaluate_bad_options(kwargs, name, stub):
    with pytest.raises(ValueError, match=rf"^{name} must"):
        evaluate(None, FakeTokenizer(), RECORDS, **kwargs)
    assert stub == []  # rejected before any generation


@pytest.mark.parametrize("records", [[], None, "abc", [{"question": "q"}], [{"gold": "1"}], [RECORDS[0], 3]])
def test_evaluate_bad_records(records, stub):
    with pytest.raises(ValueError, match="records"):
        evaluate(None, FakeTokenizer(), records)
