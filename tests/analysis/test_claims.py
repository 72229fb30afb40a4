"""Tests for qae_lab.analysis.claims: the one verdict at its boundaries (hand-computed cases and an independent
Student t), the claims and settings as data, the scoreboard's and the matrix's rows."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qae_lab.analysis.claims import (
    CARD,
    CLAIMS,
    SETTINGS,
    VERDICTS,
    Claim,
    claim_card,
    matrix,
    scoreboard,
    t_quantile,
    verdict,
)


def reference_t975(df: float) -> float:
    """The 0.975 quantile of Student's t by integrating its density (Simpson's rule) and bisection: independent of the
    module's table."""
    c = math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2)) / math.sqrt(df * math.pi)

    def cdf_above_zero(t: float, n: int = 4000) -> float:
        h = t / n
        f = [c * (1 + (i * h) ** 2 / df) ** (-(df + 1) / 2) for i in range(n + 1)]
        return h / 3 * (f[0] + f[-1] + 4 * sum(f[1:-1:2]) + 2 * sum(f[2:-1:2]))

    lo, hi = 0.0, 20.0 if df >= 2 else 20.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if cdf_above_zero(mid) < 0.475 else (lo, mid)
    return (lo + hi) / 2


@pytest.mark.parametrize("df", [2, 3, 5, 10, 29, 30, 31, 40, 60, 120, 1000])
def test_the_t_quantile_matches_an_independent_integration(df):
    # the table holds three decimals (rounding: 5e-4); beyond 30 the expansion is within 1e-3
    assert t_quantile(df) == pytest.approx(reference_t975(df), abs=1.5e-3)


def test_a_fractional_df_takes_the_wider_interval():
    assert t_quantile(2.99) == t_quantile(2) > t_quantile(3)
    with pytest.raises(ValueError, match="df must be >= 1"):
        t_quantile(0.5)


# ---------------------------------------------------------------- the verdict at its boundaries


def test_seeds_that_disagree_are_no_difference_whatever_the_means():
    # the means differ (0.513 vs 0.500) but the per-seed differences (-0.05, +0.07, +0.02) disagree
    v = verdict([0.40, 0.62, 0.52], [0.45, 0.55, 0.50], ">")
    assert v.word == "no difference" and v.agree == 2 and v.n == 3
    # by hand: d = (-0.05, 0.07, 0.02), mean 0.013333, sd 0.060277, t(2) = 4.303, half-width 4.303 * 0.060277 / sqrt(3)
    assert v.diff == pytest.approx(0.013333, abs=1e-6)
    assert (v.lo, v.hi) == pytest.approx((0.013333 - 0.149750, 0.013333 + 0.149750), abs=1e-5)


def test_paired_seeds_that_agree_beyond_their_spread_hold_and_the_other_way_reverse():
    a, b = [0.61, 0.72, 0.55], [0.50, 0.60, 0.45]  # differences 0.11, 0.12, 0.10: sd 0.01
    assert verdict(a, b, ">").word == "holds" and verdict(a, b, "<").word == "reversed"
    assert verdict(b, a, "<").word == "holds" and verdict(a, b, ">=").word == "holds"
    # the same numbers unpaired: the seeds' ranges overlap (0.55-0.72 vs 0.45-0.60), Welch's interval includes zero
    assert verdict(a, b, ">", paired=False).word == "no difference"


def test_agreeing_seeds_with_a_spread_as_large_as_the_effect_are_no_difference():
    # all three differences positive, but 0.01, 0.30, 0.02: mean 0.11, half-width 4.303 * 0.1588 / sqrt(3) = 0.39
    assert verdict([0.51, 0.80, 0.52], [0.50, 0.50, 0.50], ">").word == "no difference"


def test_identical_sides_are_no_difference_and_a_not_lower_claim_is_not_held_by_a_null():
    assert verdict([0.5, 0.6, 0.7], [0.5, 0.6, 0.7], ">").word == "no difference"
    assert verdict([0.50, 0.61, 0.70], [0.51, 0.60, 0.70], ">=").word == "no difference"
    assert verdict([0.3, 0.4, 0.5], [0.5, 0.6, 0.7], ">=").word == "reversed"


def test_what_cannot_be_tested_says_why():
    v = verdict([1.0, 1.1], [0.5, 0.6], ">", why="no explosion to prevent")
    assert (v.word, v.why, round(v.diff, 3)) == ("cannot be tested here", "no explosion to prevent", 0.5)
    assert verdict([1.0, None], [0.5, 0.6], ">").why == "fewer than two seeds with a number on both sides"
    assert verdict([], [], ">").diff is None


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"a": [1.0, 2.0], "b": [1.0], "expect": ">"}, "paired sides must hold one number per seed each"),
        ({"a": [1.0, float("nan")], "b": [1.0, 2.0], "expect": ">"}, "a must hold finite numbers"),
        ({"a": [1.0, 2.0], "b": [True, 2.0], "expect": ">"}, "b must hold finite numbers"),
        ({"a": [1.0, 2.0], "b": [1.0, 2.0], "expect": "bigger"}, "expect must be"),
    ],
)
def test_bad_input_is_refused_by_name(kwargs, message):
    with pytest.raises(ValueError, match=message):
        verdict(**kwargs)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.floats(-10, 10, allow_nan=False), min_size=2, max_size=20),
    st.lists(st.floats(-10, 10, allow_nan=False), min_size=2, max_size=20),
    st.sampled_from([">", "<", ">="]),
)
def test_a_held_claim_has_its_interval_on_the_predicted_side_and_swapping_the_sides_mirrors_it(a, b, expect):
    n = min(len(a), len(b))
    a, b = a[:n], b[:n]
    v = verdict(a, b, expect)
    assert v.word in VERDICTS
    sign = -1 if expect == "<" else 1
    if v.word == "holds":
        assert (v.lo > 0) if sign > 0 else (v.hi < 0)
        assert v.agree >= 1
    if v.word == "no difference":
        assert v.lo <= 0 <= v.hi
    mirrored = verdict(b, a, "<" if sign > 0 else ">").word
    assert mirrored == v.word


# ---------------------------------------------------------------- the claims and settings as data


def test_each_claim_once_with_its_paper_section_and_direction():
    keys = [c.key for c in CLAIMS]
    assert len(keys) == len(set(keys))
    assert {c.paper for c in CLAIMS} == {"QAE", "SA-AH-GRPO", "the lab"}
    assert all(c.section and c.statement and c.a != c.b for c in CLAIMS)
    with pytest.raises(ValueError, match="expect must be"):
        Claim("x", "QAE", "s", "t", "a", "b", "=")
    assert set(VERDICTS) == {
        "holds",
        "reversed",
        "outside the stated size",
        "no difference",
        "at the band's edge",
        "equal by construction",
        "cannot be tested here",
    }
    with pytest.raises(ValueError, match="a band"):
        Claim("x", "QAE", "s", "t", "a", "b", "in")  # a size without its band
    with pytest.raises(ValueError, match="a band"):
        Claim("x", "QAE", "s", "t", "a", "b", ">", band=(0.7, 0.9), band_reason="r")
    sparsity = next(c for c in CLAIMS if c.key == "sparsity")
    assert sparsity.expect == "in" and sparsity.band == (0.70, 0.90) and "80%" in sparsity.band_reason
    assert list(SETTINGS)[:2] == ["expected step", "sampled groups"]


def test_the_scoreboard_row_holds_the_verdicts_numbers():
    v = verdict([0.61, 0.72, 0.55], [0.50, 0.60, 0.45], ">")
    judged = {
        ("qae_pass1", "CPU preset", ""): ({"measured": "pass@1 after training", "a": "quantile", "b": "mean"}, v),
        ("hard_prop42", "sequence policy", "SGD"): (
            {"measured": "m", "a": "quantile", "b": "mean", "digits": 2},
            verdict([1.0, 1.2], [1.0, 1.1], "<", why="no explosion"),
        ),
    }
    hard, pass1 = scoreboard(judged)  # in CLAIMS' order
    assert pass1["a"] == "quantile 0.627" and pass1["b"] == "mean 0.517" and pass1["seeds"] == "3/3"
    assert pass1["why"] == ""
    assert pass1["a - b"] == f"+0.110 [{v.lo:+.3f}, {v.hi:+.3f}]"
    assert (hard["setting"], hard["verdict"], hard["why"], hard["a - b"]) == (
        "sequence policy, SGD",
        "cannot be tested here",
        "no explosion",
        "+0.05",
    )
    assert scoreboard(judged, ["CPU preset"]) == [pass1]
    row = next(r for r in matrix(judged) if r["claim"].startswith("on a hard prompt"))
    assert row["sequence policy"] == "cannot be tested here (SGD)" and row["CPU preset"] == "—"


# ---------------------------------------------------------------- a claim of a size: "about 80%" against its band


def test_a_share_is_judged_against_its_stated_band_not_against_the_other_baseline():
    # by hand: mean 0.98, sd 0.01, half-width t(2) * 0.01 / sqrt(3) = 4.303 * 0.005774 = 0.02484: [0.955, 1.005]
    v = verdict([0.97, 0.98, 0.99], None, "in", band=(0.70, 0.90))
    assert v.word == "outside the stated size" and v.b is None and v.diff is None
    assert (v.a, v.lo, v.hi) == pytest.approx((0.98, 0.98 - 0.02484, 0.98 + 0.02484), abs=1e-5)
    # inside: mean 0.80, sd 0.01: [0.775, 0.825] within [0.70, 0.90]
    assert verdict([0.79, 0.80, 0.81], None, "in", band=(0.70, 0.90)).word == "holds"
    # below the band is outside too, not "reversed"
    assert verdict([0.40, 0.41, 0.42], None, "in", band=(0.70, 0.90)).word == "outside the stated size"
    # straddling the edge: mean 0.70, [0.675, 0.725]: the seeds cannot tell it from the edge
    straddle = verdict([0.69, 0.70, 0.71], None, "in", band=(0.70, 0.90))
    assert straddle.word == "at the band's edge" and straddle.half == pytest.approx(0.02484, abs=1e-5)
    # a mean inside the band is not enough: 0.71, [0.685, 0.735], reaches below 0.70
    assert verdict([0.70, 0.71, 0.72], None, "in", band=(0.70, 0.90)).word == "at the band's edge"
    assert verdict([0.8], None, "in", band=(0.7, 0.9)).word == "cannot be tested here"
    with pytest.raises(ValueError, match="a band goes with expect='in'"):
        verdict([0.8, 0.8], [0.5, 0.5], ">", band=(0.7, 0.9))


def test_the_sparsity_row_shows_the_share_and_the_band():
    v = verdict([0.97, 0.98, 0.99], None, "in", band=(0.70, 0.90))
    judged = {("sparsity", "CPU preset", ""): ({"measured": "share", "a": "quantile", "b": "the stated size"}, v)}
    [row] = scoreboard(judged)
    assert row["b"] == "the stated size [0.70, 0.90]" and row["a - b"] == "0.980 [0.955, 1.005]"
    assert row["verdict"] == "outside the stated size" and "80%" in row["why"]
    assert next(r for r in matrix(judged) if "zero advantage" in r["claim"])["CPU preset"] == (
        "outside the stated size (0.98)"
    )


# ---------------------------------------------------------------- equal by construction; a null's half-width


def test_sides_equal_by_construction_get_their_own_word_and_the_reason():
    a = [0.30, 0.25, 0.40]
    v = verdict(a, list(a), "<", equal_by_construction="a constant baseline cancels")
    assert (v.word, v.why, v.diff) == ("equal by construction", "a constant baseline cancels", 0.0)
    row = scoreboard({("hard_prop42", "expected step", ""): ({"measured": "m", "a": "q", "b": "m"}, v)})[0]
    assert row["verdict"] == "equal by construction" and row["why"] == "a constant baseline cancels"
    # sides that differ are not equal by construction, whatever the evidence says
    with pytest.raises(ValueError, match="not equal by construction"):
        verdict(a, [0.30, 0.25, 0.41], "<", equal_by_construction="a constant baseline cancels")


def test_a_null_shows_how_large_a_difference_its_seeds_could_miss():
    # by hand: d = (-0.05, 0.07, 0.02), sd 0.060277, half-width 4.303 * 0.060277 / sqrt(3) = 0.14975
    v = verdict([0.40, 0.62, 0.52], [0.45, 0.55, 0.50], ">")
    assert v.word == "no difference" and v.half == pytest.approx(0.14975, abs=1e-5)
    judged = {("qae_pass1", "CPU preset", ""): ({"measured": "pass@1", "a": "quantile", "b": "mean"}, v)}
    [row] = scoreboard(judged)
    assert row["why"] == "95% interval ±0.15 (3 seeds), paper's effect +0.085"
    assert matrix(judged)[0]["CPU preset"] == "no difference ±0.15"
    # a verdict that holds carries no half-width in its cell
    held = verdict([0.61, 0.72, 0.55], [0.50, 0.60, 0.45], ">")
    assert matrix({("qae_pass1", "CPU preset", ""): ({}, held)})[0]["CPU preset"] == "holds"


def test_the_claim_card_is_six_plain_rows_of_four_columns():
    assert len(CARD) <= 6 and all(c.key in {k.key for k in CLAIMS} for c in CARD)
    v = verdict([0.40, 0.62, 0.52], [0.45, 0.55, 0.50], ">")
    judged = {(c.key, c.setting, c.variant): ({}, v) for c in CARD}
    card = claim_card(judged)
    assert len(card) == len(CARD) and all(len(row) == 4 for row in card)
    assert card[4] == {
        "the paper says": "QAE raises pass@1",
        "measured on": "CPU demo model",
        "verdict": "no difference",
        "how sure": "95% interval ±0.15 (3 seeds), paper's effect +0.085",
    }
    with pytest.raises(ValueError, match="at most six rows"):
        claim_card(judged, CARD + CARD[:1])
    with pytest.raises(ValueError, match="no verdict of"):
        claim_card({}, CARD)


def test_sides_equal_but_for_float_rounding_are_no_difference():
    # the same sums in another order differ in the last bits only: every seed "higher" by ~1e-16 is rounding
    a = [0.1 + 0.2, 0.2 + 0.4, 0.4 + 0.8]  # 0.30000000000000004, 0.6000000000000001, 1.2000000000000002
    b = [0.3, 0.6, 1.2]
    assert all(x > y for x, y in zip(a, b))
    assert verdict(a, b, ">").word == "no difference"


# ---------------------------------------------------------------- each word one meaning; claims worded as tested


def test_a_size_at_its_bands_edge_has_its_own_word_not_no_difference():
    # mean 0.73, sd 0.02: [0.680, 0.780] reaches below 0.70
    v = verdict([0.71, 0.73, 0.75], None, "in", band=(0.70, 0.90))
    assert v.word == "at the band's edge" and v.word in VERDICTS
    assert "size" in VERDICTS["at the band's edge"] and "band" not in VERDICTS["no difference"]
    judged = {("sparsity", "CPU preset", ""): ({"measured": "share", "a": "quantile", "b": "the stated size"}, v)}
    assert matrix(judged)[0]["CPU preset"] == "at the band's edge (0.73 ±0.05)"
    [row] = scoreboard(judged)
    assert row["verdict"] == "at the band's edge" and row["why"].startswith("95% interval 0.68-0.78 reaches across")
    # a difference claim never gets the size's word
    assert verdict([0.40, 0.62, 0.52], [0.45, 0.55, 0.50], ">").word == "no difference"


def test_a_null_is_worded_as_its_interval_beside_the_papers_effect_not_as_a_ceiling():
    v = verdict([0.40, 0.62, 0.52], [0.45, 0.55, 0.50], "<")
    judged = {("saah_variance", "CPU preset", ""): ({"measured": "var", "a": "SA-AH", "b": "plain"}, v)}
    [row] = scoreboard(judged)
    assert row["why"] == "95% interval ±0.15 (3 seeds), paper's effect 3.6x lower"
    [card] = claim_card(judged, [CARD[5]])
    assert card["how sure"] == "95% interval ±0.15 (3 seeds), paper's effect 3.6x lower"
    # a claim without a stated effect shows the interval alone
    judged = {("hard_prop42", "sequence policy", "SGD"): ({"measured": "m", "a": "q", "b": "m"}, v)}
    assert claim_card(judged, [CARD[2]])[0]["how sure"] == "95% interval ±0.15 (3 seeds)"
    assert not any("could miss" in text for text in (*VERDICTS.values(), row["why"], card["how sure"]))


def test_prop42_claims_are_worded_as_the_strict_comparison_they_are_tested_by():
    by_key = {c.key: c for c in CLAIMS}
    for key, expect in (("hard_prop42", "<"), ("easy_prop42", ">")):
        claim = by_key[key]
        assert claim.expect == expect and "less than the mean baseline" in claim.statement
        assert "no more than" not in claim.statement
