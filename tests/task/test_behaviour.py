"""Tests for qae_lab.task.behaviour: hand-computed cases, plain-Python references, properties, bad input."""

from __future__ import annotations

import math
import random
import re

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from qae_lab.task.behaviour import (
    diversity_stats,
    REFLECTION_WORDS,
    behaviour_stats,
    length_stats,
    pearson,
    reflection_counts,
    reflection_pattern,
)

T = torch.tensor


# ---------------------------------------------------------------- independent references


def ref_pearson(x: list[float], y: list[float]) -> float | None:
    """r = sum (x - mx)(y - my) / sqrt(sum (x - mx)^2 * sum (y - my)^2), one loop; None if undefined."""
    n = len(x)
    if n < 2 or len(set(x)) == 1 or len(set(y)) == 1:
        return None
    mx, my = sum(x) / n, sum(y) / n
    sxy = sxx = syy = 0.0
    for a, b in zip(x, y):
        sxy += (a - mx) * (b - my)
        sxx += (a - mx) ** 2
        syy += (b - my) ** 2
    return sxy / math.sqrt(sxx * syy)


def ref_quantile(values: list[float], q: float) -> float:
    """Linear interpolation between the sorted values at position q * (n - 1)."""
    s = sorted(values)
    pos = q * (len(s) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (pos - lo) * (s[hi] - s[lo])


# ---------------------------------------------------------------- reflective words, by hand


@pytest.mark.parametrize(
    "text,count",
    [
        ("Wait, let me check.", 3),
        ("checked", 0),
        ("checking, rechecking, waited, verified", 0),
        ("re-check", 1),  # once, not also as "check"
        ("double-check", 1),
        ("double-checked", 0),
        ("self-check", 1),  # a hyphen separates words: "check" counts
        ("LET   ME", 1),
        ("let\n\tme", 1),
        ("letme", 0),
        ("Hmm, actually a MISTAKE. However, VERIFY.", 5),
        ("hmmm wait_for wait2 éwait", 0),  # glued to a letter, underscore, digit or a non-ASCII letter
        ("however,however;wait—verify", 4),
        ("recheck RECHECK Recheck", 3),
        ("", 0),
        ("The answer is 42.", 0),
    ],
)
def test_reflection_counts_hand(text, count):
    got = reflection_counts([text])
    assert got.dtype == torch.float64 and got.shape == (1,)
    assert got.item() == count


def test_reflection_counts_shape_and_tuple_input():
    got = reflection_counts(("Wait, let me check.", "checked", "re-check", "LET   ME"))
    assert torch.equal(got, T([3.0, 0, 1, 1], dtype=torch.float64))
    assert reflection_counts([]).shape == (0,)
    assert reflection_counts([]).dtype == torch.float64


def test_pattern_is_compiled_and_case_insensitive():
    pat = reflection_pattern()
    assert isinstance(pat, re.Pattern) and pat.flags & re.IGNORECASE
    assert [m.group() for m in pat.finditer("WAIT wait WaIt")] == ["WAIT", "wait", "WaIt"]
    # the default list: lowercase, each once, and each found by the pattern, alone and inside a sentence
    assert REFLECTION_WORDS and len(set(REFLECTION_WORDS)) == len(REFLECTION_WORDS)
    assert all(w == w.lower().strip() and w for w in REFLECTION_WORDS)
    for word in REFLECTION_WORDS:
        assert [m.group().lower() for m in pat.finditer(f"So, {word.upper()}: 4.")] == [word], word


def test_longest_alternative_wins_and_whole_words_fall_back():
    words = ["let", "let me", "me"]
    assert reflection_counts(["let me"], words).item() == 1  # "let me", not "let" and "me"
    assert reflection_counts(["let meet"], words).item() == 1  # "let me" is glued to "et": "let" alone
    assert reflection_counts(["check re-check"], ["check", "re-check"]).item() == 2
    # whitespace inside an entry is normalised; duplicates count once per match
    assert reflection_counts(["LET \n ME"], ["  let   me "]).item() == 1
    assert reflection_counts(["wait"], ["wait", "WAIT", "wait"]).item() == 1


def test_metacharacters_are_literal():
    texts = ["I love c++ and C++!", "cxx c+ c", "a.b axb A.B ab"]
    assert reflection_counts(texts, ["c++", "a.b"]).tolist() == [2, 0, 2]
    assert reflection_counts(["a b a|b"], ["a|b"]).item() == 1
    assert reflection_counts(["x (y) (y"], ["(y)"]).item() == 1
    assert reflection_counts(["wait.* .*"], [".*"]).item() == 1  # the first ".*" is glued to "wait"
    # model output is data: regex syntax in a text is matched as characters, never run
    assert reflection_counts(["(?i)wait.*[", "\\b" * 50], REFLECTION_WORDS).tolist() == [1, 0]


# ---------------------------------------------------------------- length stats


def test_length_stats_hand():
    assert length_stats([10, 20, 30, 40, 100]) == pytest.approx(
        {"length_mean": 40.0, "length_q10": 14.0, "length_q50": 30.0, "length_q90": 76.0}
    )
    assert length_stats([7]) == {"length_mean": 7.0, "length_q10": 7.0, "length_q50": 7.0, "length_q90": 7.0}
    assert length_stats(T([3, 1], dtype=torch.int64), quantiles=[]) == {"length_mean": 2.0}
    got = length_stats(T([1.0, 2.0], dtype=torch.float32), quantiles=(0, 0.25, 1))
    assert got == {"length_mean": 1.5, "length_q0": 1.0, "length_q25": 1.25, "length_q100": 2.0}
    # SA-AH-GRPO's 243 -> 171 means, for instance
    assert length_stats([243, 243])["length_mean"] == 243.0 and length_stats([171.0])["length_mean"] == 171.0


@settings(max_examples=60)
@given(
    st.lists(st.integers(0, 4096), min_size=1, max_size=40),
    st.lists(st.floats(0, 1), max_size=4, unique_by=lambda q: round(100 * q)),
)
def test_length_stats_match_reference(lengths, quantiles):
    got = length_stats(lengths, quantiles)
    want = {"length_mean": sum(lengths) / len(lengths)}
    want.update({f"length_q{round(100 * q)}": ref_quantile(lengths, q) for q in quantiles})
    assert got.keys() == want.keys()
    for key in want:
        assert got[key] == pytest.approx(want[key], rel=1e-9, abs=1e-9), key
    assert all(min(lengths) <= v <= max(lengths) for v in got.values())


# ---------------------------------------------------------------- pearson


def test_pearson_hand():
    assert pearson([1, 2, 3], [1, 2, 4]) == pytest.approx(3 / math.sqrt(2 * 42 / 9))
    assert pearson([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    assert pearson(T([0, 1, 0, 1]), T([True, True, False, False])) == 0.0
    assert isinstance(pearson(T([1.0, 2.0], dtype=torch.float32), [2, 1]), float)


@pytest.mark.parametrize(
    "x,y",
    [
        ([], []),
        ([1.0], [2.0]),
        ([1, 1, 1], [1, 2, 3]),
        ([1, 2, 3], [4, 4, 4]),
        ([0, 0], [0, 0]),
        (T([0.1] * 5), T([0.0, 1, 0, 1, 0])),
    ],
)
def test_pearson_undefined_is_none_not_nan(x, y):
    assert pearson(x, y) is None


def test_pearson_huge_and_tiny_values():
    # scale-free: no overflow at 1e300 and no underflow at subnormals
    assert pearson([1e300, -1e300, 5e299], [1, 2, 3]) == pytest.approx(pearson([2, -2, 1], [1, 2, 3]))
    assert pearson([1e-320, 2e-320, 0.0], [1, 2, 0]) == pytest.approx(1.0)
    assert pearson(T([3e38, -3e38, 3e38]), T([1.0, 0.0, 1.0])) == pytest.approx(1.0)


def test_pearson_matches_reference_random():
    rng = random.Random(2509)
    for _ in range(200):
        n = rng.randint(2, 40)
        x = [round(rng.gauss(0, 50), 3) for _ in range(n)]
        y = [float(rng.random() < 0.5) for _ in range(n)] if rng.random() < 0.5 else [rng.gauss(3, 1) for _ in range(n)]
        want, got = ref_pearson(x, y), pearson(x, y)
        assert (got is None) == (want is None)
        if want is not None:
            assert got == pytest.approx(want, rel=1e-9, abs=1e-12)


pairs = st.integers(0, 30).flatmap(
    lambda n: st.tuples(
        st.lists(st.integers(-1000, 1000), min_size=n, max_size=n),
        st.lists(st.integers(-1000, 1000), min_size=n, max_size=n),
    )
)


@settings(max_examples=80)
@given(pairs)
def test_pearson_matches_reference_property(xy):
    x, y = xy
    want, got = ref_pearson([float(v) for v in x], [float(v) for v in y]), pearson(x, y)
    assert (got is None) == (want is None)
    if want is not None:
        assert -1.0 <= got <= 1.0
        assert got == pytest.approx(want, rel=1e-9, abs=1e-12)
        assert pearson(y, x) == pytest.approx(got, rel=1e-12, abs=1e-15)  # symmetric


@settings(max_examples=40)
@given(
    st.lists(st.integers(-100, 100), min_size=2, max_size=20).filter(lambda v: len(set(v)) > 1),
    st.sampled_from([-3.5, -1.0, 0.25, 7.0]),
    st.integers(-50, 50),
)
def test_pearson_of_a_line_is_its_sign(x, a, b):
    assert pearson(x, [a * v + b for v in x]) == pytest.approx(math.copysign(1.0, a), abs=1e-12)


# ---------------------------------------------------------------- behaviour_stats

TEXTS = ["Wait, let me check.", "The answer is 4.", "Hmm, verify: 4", "checked: 5"]  # counts 3, 0, 2, 0


def test_behaviour_stats_hand():
    got = behaviour_stats([10, 20, 30, 40], TEXTS, [1, 0, 1, 0])
    # counts - 1.25 = [1.75, -1.25, 0.75, -1.25], success - 0.5 = +-0.5: r = 2.5 / sqrt(6.75 * 1)
    assert got == pytest.approx(
        {
            "length_mean": 25.0,
            "length_q10": 13.0,
            "length_q50": 25.0,
            "length_q90": 37.0,
            "reflect_per_response": 1.25,
            "reflect_frac": 0.5,
            "reflect_corr": 2.5 / math.sqrt(6.75),
            "reflect_rate_correct": 2.5,
            "reflect_rate_wrong": 0.0,
        }
    )
    assert all(isinstance(v, float) for v in got.values())
    # bool tensors and tuples are accepted, with the same result
    same = behaviour_stats(T([10, 20, 30, 40]), tuple(TEXTS), T([True, False, True, False]))
    assert same == pytest.approx(got)


def test_behaviour_stats_corr_matches_pearson_of_counts():
    rng = random.Random(7)
    pool = ["wait", "ok", "let me verify", "so", "Hmm. Actually, check", "checked"]
    texts = [" ".join(rng.choice(pool) for _ in range(rng.randint(0, 4))) for _ in range(32)]
    success = [rng.random() < 0.5 for _ in range(32)]
    got = behaviour_stats([len(t) for t in texts], texts, success)
    counts = reflection_counts(texts).tolist()
    assert got["reflect_corr"] == pytest.approx(ref_pearson(counts, [float(s) for s in success]), rel=1e-9)
    assert got["reflect_frac"] == pytest.approx(sum(c > 0 for c in counts) / 32)
    right = [c for c, s in zip(counts, success) if s]
    assert got["reflect_rate_correct"] == pytest.approx(sum(right) / len(right))


def test_behaviour_stats_absent_keys():
    all_right = behaviour_stats([1, 2], TEXTS[:2], [1, 1])
    assert "reflect_corr" not in all_right and "reflect_rate_wrong" not in all_right
    assert all_right["reflect_rate_correct"] == 1.5
    all_wrong = behaviour_stats([1, 2], TEXTS[:2], [False, False])
    assert "reflect_corr" not in all_wrong and "reflect_rate_correct" not in all_wrong
    assert all_wrong["reflect_rate_wrong"] == 1.5
    no_words = behaviour_stats([1, 2], ["ok", "fine"], [1, 0])  # counts constant: corr undefined
    assert "reflect_corr" not in no_words and no_words["reflect_frac"] == 0.0
    assert no_words["reflect_rate_correct"] == no_words["reflect_rate_wrong"] == 0.0
    one = behaviour_stats([5], ["wait"], [1])
    assert set(one) == {
        "length_mean",
        "length_q10",
        "length_q50",
        "length_q90",
        "reflect_per_response",
        "reflect_frac",
        "reflect_rate_correct",
    }
    # custom words
    assert behaviour_stats([1, 1], ["c++ ok", "no"], [1, 0], words=["c++"])["reflect_corr"] == pytest.approx(1.0)


# ---------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "words,msg",
    [
        ([], "words must hold at least one word"),
        ((), "words must hold at least one word"),
        ("wait", "words must be a list or tuple"),
        ({"wait"}, "words must be a list or tuple"),
        (None, "words must be a list or tuple"),
        (["wait", 3], "words must hold only strings, got int at index 1"),
        ([b"wait"], "words must hold only strings"),
        (["wait", "  "], "words must hold non-blank strings"),
        ([""], "words must hold non-blank strings"),
        (["\n\t"], "non-blank"),
    ],
)
def test_bad_words(words, msg):
    for fn in (
        lambda: reflection_pattern(words),
        lambda: reflection_counts(["wait"], words),
        lambda: behaviour_stats([1], ["wait"], [1], words),
    ):
        with pytest.raises(ValueError, match=msg):
            fn()


@pytest.mark.parametrize(
    "texts,msg",
    [
        ("Wait, let me check.", "texts must be a list or tuple"),
        (None, "texts must be a list or tuple"),
        (iter(["wait"]), "texts must be a list or tuple"),
        (["ok", None], "texts must hold only strings, got NoneType"),
        ([b"wait"], "texts must hold only strings, got bytes at index 0"),
    ],
)
def test_bad_texts(texts, msg):
    with pytest.raises(ValueError, match=msg):
        reflection_counts(texts)
    with pytest.raises(ValueError, match=msg):
        behaviour_stats([1, 2], texts, [1, 0])


@pytest.mark.parametrize(
    "lengths,msg",
    [
        ([], "lengths must hold at least one length"),
        ([-1, 2], r"lengths must be >= 0 \(token counts\), got -1"),
        ([1.0, float("nan")], "lengths must be finite"),
        ([float("inf")], "lengths must be finite"),
        ([[1, 2]], "lengths must have 1 dimension"),
        (3, "lengths must have 1 dimension"),
        ("12", "lengths must be a real-valued tensor"),
        (T([1j]), "lengths must be real-valued"),
    ],
)
def test_bad_lengths(lengths, msg):
    with pytest.raises(ValueError, match=msg):
        length_stats(lengths)


@pytest.mark.parametrize(
    "quantiles,msg",
    [
        ([1.5], r"quantiles must lie in \[0, 1\], got 1.5"),
        ([0.5, -0.1], r"quantiles must lie in \[0, 1\]"),
        ([float("nan")], "quantiles must be finite"),
        ([True], "quantiles must be a finite real number"),
        (["0.5"], "quantiles must be a finite real number"),
        (0.5, "quantiles must be a list or tuple"),
        ("0.5", "quantiles must be a list or tuple"),
        ([0.1, 0.1001], "quantiles must give distinct keys.*length_q10"),
    ],
)
def test_bad_quantiles(quantiles, msg):
    with pytest.raises(ValueError, match=msg):
        length_stats([1, 2, 3], quantiles)


@pytest.mark.parametrize(
    "x,y,msg",
    [
        ([1, 2, 3], [1, 2], r"x and y must have the same shape, got \(3,\) and \(2,\)"),
        ([[1, 2]], [1, 2], "x must have 1 dimension"),
        ([1, 2], [[1, 2]], "y must have 1 dimension"),
        ([1, float("nan")], [1, 2], "x must be finite"),
        ([1, 2], [float("inf"), 2], "y must be finite"),
        ("ab", [1, 2], "x must be a real-valued tensor"),
    ],
)
def test_bad_pearson(x, y, msg):
    with pytest.raises(ValueError, match=msg):
        pearson(x, y)


@pytest.mark.parametrize(
    "lengths,success,msg",
    [
        ([1, 2], [1, 0, 1], r"lengths must have shape \(3,\), one per text \(len\(texts\) = 3\), got \(2,\)"),
        ([1, 2, 3], [1, 0], r"success must have shape \(3,\), one per text \(len\(texts\) = 3\), got \(2,\)"),
        ([1, 2, 3], [1, 2, 0], "success must hold only 0 and 1"),
        ([1, 2, 3], [1, 0.5, 0], "success must hold only 0"),
        ([1, 2, 3], [1, float("nan"), 0], "success must be finite"),
        ([1, 2, 3], [[1, 0, 1]], "success must have 1 dim"),
        ([1, -2, 3], [1, 0, 1], "lengths must be >= 0"),
        ([1, 2, 3], "101", "success must be a real-valued tensor"),
    ],
)
def test_bad_behaviour_stats(lengths, success, msg):
    with pytest.raises(ValueError, match=msg):
        behaviour_stats(lengths, ["wait", "ok", "hmm"], success)


def test_behaviour_stats_empty_step():
    with pytest.raises(ValueError, match="lengths must hold at least one length"):
        behaviour_stats([], [], [])


def _ref_diversity(texts, success, g):
    """Per group, by counting: distinct correct texts, distinct share, top share; then the means."""
    out = {"distinct_correct": [], "distinct_frac": [], "top_share": []}
    for start in range(0, len(texts), g):
        group = [t.strip() for t in texts[start : start + g]]
        right = [t for t, ok in zip(group, success[start : start + g]) if ok]
        out["distinct_correct"].append(len(set(right)))
        out["distinct_frac"].append(len(set(group)) / g)
        out["top_share"].append(max(group.count(t) for t in group) / g)
    return {k: sum(v) / len(v) for k, v in out.items()}


def test_diversity_stats_hand_and_reference():
    texts = [" a", "a ", "b", "c", "x", "x", "x", "x"]  # surrounding whitespace does not make a text different
    assert diversity_stats(texts, [1, 1, 1, 0, 0, 0, 0, 0], 4) == {
        "distinct_correct": 1.0,
        "distinct_frac": 0.5,
        "top_share": 0.75,
    }
    rng = random.Random(0)
    for _ in range(20):
        g = rng.randint(1, 6)
        n = g * rng.randint(1, 5)
        texts = [rng.choice("abcd") for _ in range(n)]
        success = [rng.random() < 0.5 for _ in range(n)]
        assert diversity_stats(texts, success, g) == pytest.approx(_ref_diversity(texts, success, g))
    with pytest.raises(ValueError, match="group_size must divide the number of texts"):
        diversity_stats(["a", "b", "c"], [1, 0, 1], 2)
    with pytest.raises(ValueError, match="group_size must be"):
        diversity_stats(["a"], [1], 0)
    with pytest.raises(ValueError, match="success must have shape"):
        diversity_stats(["a", "b"], [1], 2)
