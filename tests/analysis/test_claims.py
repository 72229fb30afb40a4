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
    comparison_row,
    difference,
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
    judged = {("hard_prop42", "sequence policy", "Adam"): ({"measured": "m", "a": "q", "b": "m"}, v)}
    assert claim_card(judged, [CARD[0]])[0]["how sure"] == "95% interval ±0.15 (3 seeds)"
    assert not any("could miss" in text for text in (*VERDICTS.values(), row["why"], card["how sure"]))


def test_prop42_claims_are_worded_as_the_strict_comparison_they_are_tested_by():
    by_key = {c.key: c for c in CLAIMS}
    for key, expect in (("hard_prop42", "<"), ("easy_prop42", ">")):
        claim = by_key[key]
        assert claim.expect == expect and "less than the mean baseline" in claim.statement
        assert "no more than" not in claim.statement


# ---------------------------------------------------------------- mutation-testing survivors: held by hand-computed cases


def test_beyond_the_table_the_t_quantile_is_the_stated_cornish_fisher_series():
    # the table's last entry is df = 30 itself, not the expansion (2.0423 there).
    # Planted: `df <= 30` -> `df < 30` -> fails
    assert t_quantile(30) == 2.042
    # beyond it: z + g1 / df + g2 / df^2 with z = 1.959964 and, by hand at that z (Abramowitz & Stegun 26.7.5),
    # g1 = (z^3 + z) / 4 = 2.372271, g2 = (5 z^5 + 16 z^3 + 3 z) / 96 = 2.822499; the coefficients rounded to 6
    # decimals move t by < 1e-6 / df. The smallest slip (3 z -> 4 z: g2 + 0.0204) moves t(31) by 2.1e-5.
    # Planted: each of 3 z -> -3 z, 4 z, 3 / z; 5 z^5 -> 6 z^5, 5 z * 5, 5 z^6; 16 z^3 -> 17 z^3, 16 / z^3, 16 z * 3,
    # 16 z^4; 96 df^2 -> 97 df^2 -> fails
    for df in (31, 45, 100):
        assert t_quantile(df) == pytest.approx(1.959964 + 2.372271 / df + 2.822499 / df**2, abs=1e-7)


def test_welchs_interval_by_hand():
    # a = (0, 0.1, 0.2, 0.6): mean 0.225, squares 0.2075, s^2 0.069167, s^2 / 4 = 0.017292;
    # b = (0, 0.3, 0.3, 0.6, 0.9, 1.2): mean 0.55, squares 0.975, s^2 0.195, s^2 / 6 = 0.0325;
    # se = sqrt(0.049792) = 0.223141; df = 0.049792^2 / (0.017292^2 / 3 + 0.0325^2 / 5) = 7.97 -> t(7) = 2.365,
    # half-width 2.365 * 0.223141 = 0.527727 about diff -0.325.
    # Planted: any slip in the variances (s^2 * n, s * 2, s^3) or in the Welch-Satterthwaite df (a sign, a power,
    # n + 1, n - 2, * for /, `and False`), or t / se -> fails
    d = difference([0, 0.1, 0.2, 0.6], [0, 0.3, 0.3, 0.6, 0.9, 1.2], paired=False)
    assert (d.a, d.b, d.diff, d.n, d.higher) == pytest.approx((0.225, 0.55, -0.325, 4, None))
    assert (d.lo, d.hi) == pytest.approx((-0.325 - 0.527727, -0.325 + 0.527727), abs=1e-5)
    # df below 2 takes t(1) = 12.706: a = (0, 6) spreads, b = (1, 1.1, 1.2) hardly: s^2 / n = 9 and 0.003333,
    # df = 1.0007, half-width 12.706 * sqrt(9.003333) = 38.1251. Planted: max(df, 1.0) -> max(df, 2.0) -> fails
    d = difference([0, 6], [1, 1.1, 1.2], paired=False)
    assert d.hi - d.diff == pytest.approx(38.1251, abs=1e-3)
    # both sides without spread: the interval is the point (no 0 / 0). Planted: `se > 0` -> `se >= 0`, or
    # `(se > 0) or True` -> fails (ZeroDivisionError)
    v = verdict([1.0, 1.0], [0.0, 0.0], ">", paired=False)
    assert (v.word, v.lo, v.hi, v.agree) == ("holds", 1.0, 1.0, None)


def test_difference_pairs_by_seed_by_default_and_drops_a_pair_with_a_none():
    # seed 2 has no a: the pairs are (1, 0), (3, 1): d = (1, 2), mean 1.5, sd 0.7071, half-width 12.706 * 0.5
    # Planted: default paired=False -> fails; _sides(..., paired) -> _sides(..., None) -> fails (b keeps its 5.0);
    # Difference(..., n) -> None -> fails
    d = difference([1.0, None, 3.0], [0.0, 5.0, 1.0])
    assert (d.a, d.b, d.diff, d.n, d.higher) == (2.0, 0.5, 1.5, 2, 2)
    assert (d.lo, d.hi) == pytest.approx((1.5 - 6.353, 1.5 + 6.353), abs=1e-9)
    # a None on b's side drops its pair too: pairs (1, 1), (3, 3.5): d = (0, -0.5), mean -0.25 over n = 2.
    # Planted: the pair kept when only a is there (`if x is not None`) -> "b must hold finite numbers" -> fails
    d = difference([1.0, 2.0, 3.0], [1.0, None, 3.5])
    assert (d.a, d.b, d.diff, d.n) == (2.0, 2.25, -0.25, 2)
    # a seed with a = b is not "higher". Planted: `v > 0` -> `v >= 0` -> fails
    assert difference([1.0, 2.0, 3.0], [1.0, 1.0, 1.0]).higher == 2
    # comparison_row pairs by seed: d = (0.5, 0.5, 1.5), mean 0.833, sd 0.57735, half-width 4.303 / 3 = 1.4343;
    # a's sd: squares 1.778 + 0.111 + 2.778 = 4.667 / 2 -> 1.528; b's: 1.00. Planted: default paired=False -> fails
    assert comparison_row("final entropy", "quantile", [1.0, 2.0, 4.0], "mean", [0.5, 1.5, 2.5], 2) == {
        "quantity": "final entropy",
        "a": "quantile 2.33±1.53",
        "b": "mean 1.50±1.00",
        "a - b": "+0.83 [-0.60, +2.27]",
        "seeds a > b": "3/3",
    }


def test_a_size_verdict_at_its_edges_by_hand():
    band = (0.70, 0.90)
    # two seeds are enough: mean 0.80, sd 0.014142, half-width 12.706 * 0.01 = 0.12706 -> [0.673, 0.927]
    # Planted: `len(xa) < 2` -> `<= 2` or `< 3` -> fails
    v = verdict([0.79, 0.81], None, "in", band=band)
    assert (v.word, v.n) == ("at the band's edge", 2) and v.lo == pytest.approx(0.67294, abs=1e-9)
    # one seed: its number, no interval, the reason. Planted: each field of that Verdict dropped or set to None
    # (a, n, why, a None removed), `if xa` -> `(xa) and False`, the reason's text changed -> fails
    single = verdict([0.8, None], None, "in", band=band)
    assert tuple(single) == (
        "cannot be tested here",
        0.8,
        None,
        None,
        None,
        None,
        1,
        None,
        "fewer than two seeds with a number",
    )
    # no seed: no mean (no 0 / 0). Planted: `(xa) or True` -> fails (ZeroDivisionError)
    assert tuple(verdict([None, None], None, "in", band=band))[1:7] == (None, None, None, None, None, 0)
    # a reason given: untested whatever the seeds, a the mean (2.25 / 3). Planted: sum / len -> sum * len -> fails;
    # verdict passes why=None on to the size -> fails
    why = "no zero advantages to count"
    v = verdict([0.5, 0.75, 1.0], None, "in", band=band, why=why)
    assert tuple(v) == ("cannot be tested here", 0.75, None, None, None, None, 3, None, why)
    # a judged size counts its seeds. Planted: Verdict(..., len(xa)) -> None -> fails
    assert verdict([0.79, 0.80, 0.81], None, "in", band=band).n == 3
    # seeds without spread keep the rounding floor, relative to their size: 1e-12 * 50. Planted: _ROUNDING * max
    # -> _ROUNDING / max -> fails
    assert verdict([50.0, 50.0, 50.0], None, "in", band=(40, 60)).half == pytest.approx(5e-11, rel=1e-3)
    # an interval that exactly fills its band holds; one that touches the band from outside shares its edge.
    # Planted: `lo_band <= lo` -> `<`, `hi <= hi_band` -> `<`, `hi < lo_band` -> `<=`, `lo > hi_band` -> `>=` -> fails
    seeds = [0.79, 0.80, 0.81]
    base = verdict(seeds, None, "in", band=(0.0, 1.0))
    assert verdict(seeds, None, "in", band=(base.lo, base.hi)).word == "holds"
    assert verdict(seeds, None, "in", band=(base.hi, base.hi + 0.1)).word == "at the band's edge"
    assert verdict(seeds, None, "in", band=(base.lo - 0.1, base.lo)).word == "at the band's edge"


def test_the_verdict_at_its_edges_by_hand():
    # two seeds are enough: d = (0.5, 0.5) -> holds. Planted: `n < 2` -> `<= 2` or `< 3` -> fails
    v = verdict([1.0, 1.1], [0.5, 0.6], ">")
    assert (v.word, v.n, v.agree) == ("holds", 2, 2)
    # untested, with its one pair counted. Planted: Verdict(..., n) -> None -> fails
    assert verdict([1.0, None], [0.5, 0.6], ">").n == 1
    # equal by construction keeps the numbers: means 0.95 / 3, the interval the rounding floor 1e-12 * 0.40.
    # Planted: a, b, lo or n -> None -> fails
    a = [0.30, 0.25, 0.40]
    v = verdict(a, list(a), "<", equal_by_construction="a constant baseline cancels")
    assert (v.a, v.b, v.n) == pytest.approx((0.95 / 3, 0.95 / 3, 3))
    assert (v.lo, v.hi) == pytest.approx((-4e-13, 4e-13), rel=1e-6)
    # all zero (no entropy change on either side) is equal. Planted: `max(gaps) > floor` -> `>=` -> fails
    assert verdict([0.0, 0.0], [0.0, 0.0], "<", equal_by_construction="nothing moves").word == "equal by construction"
    # sums in another order at a few hundred differ by ~6e-14, within 1e-12 * 600. Planted: _ROUNDING * max ->
    # _ROUNDING / max -> fails
    v = verdict([(0.1 + 0.2) * 1000, (0.2 + 0.4) * 1000], [300.0, 600.0], "<", equal_by_construction="same sums")
    assert v.word == "equal by construction"
    # paired seeds that differ are not equal even when the means are. Planted: `(paired) and False` -> fails
    with pytest.raises(ValueError, match=r"^a and b differ by up to 0\.1 \(paired: True\)"):
        verdict([0.3, 0.4], [0.4, 0.3], "<", equal_by_construction="x")
    # unpaired: the gap reported is the means' (0.6 - 0.5), not a seed's (0.3). Planted: `(paired) or True` -> fails;
    # abs(d.diff) -> abs(None) -> fails (TypeError)
    with pytest.raises(ValueError, match=r"^a and b differ by up to 0\.1 \(paired: False\)"):
        verdict([0.5, 0.7], [0.6, 0.4], "<", paired=False, equal_by_construction="x")
    # unpaired seeds have no agreeing count, whichever the direction. Planted: `(d.higher is None) and False` -> fails
    assert verdict([1.0, 2.0], [3.0, 4.0], "<", paired=False).agree is None
    # a tie does not agree with "<". Planted: `x < y` -> `x <= y` -> fails
    assert verdict([1.0, 1.0, 1.0], [1.0, 2.0, 3.0], "<").agree == 2


def test_a_claim_is_built_when_valid_and_refused_by_name_when_not():
    # Planted: `band and not band_reason` -> `band or not ...` / `band and band_reason`; `band is not None and`
    # -> `or` / `band is None`; `not band[0] < band[1]` -> `band[0] < band[1]`, `band[1] < band[1]`, `band[2]` -> fails
    assert Claim("x", "QAE", "s", "t", "a", "b", ">").band is None
    assert Claim("x", "QAE", "s", "t", "a", "b", "in", band=(0.7, 0.9), band_reason="r").band == (0.7, 0.9)
    # Planted: `band[0] < band[1]` -> `<=` (an empty band accepted) -> fails
    for band in ((0.8, 0.8), (0.9, 0.7)):
        with pytest.raises(ValueError, match=r"^claim 'x': band must be \(lo, hi\) with lo < hi"):
            Claim("x", "QAE", "s", "t", "a", "b", "in", band=band, band_reason="r")
    with pytest.raises(ValueError, match=r"^claim 'x': a band \(with its reason\)"):
        Claim("x", "QAE", "s", "t", "a", "b", "in", band=(0.7, 0.9))


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: verdict([0.8, 0.8], [0.5, 0.5], ">", band=(0.7, 0.9)), r"^a band goes with expect='in'"),
        (lambda: verdict([0.8, 0.8], None, "in", band=(0.8, 0.8)), r"^band must be \(lo, hi\) with lo < hi"),
    ],
)
def test_a_bad_band_is_refused_by_a_message_that_starts_with_it(call, message):
    # Planted: the message -> "XX...XX" -> fails; `lo_band < hi_band` -> `<=` (an empty band accepted) -> fails
    with pytest.raises(ValueError, match=message):
        call()


def test_the_scoreboard_rows_read_as_the_table_shows_them():
    unpaired = verdict([0.61, 0.72, 0.55], [0.50, 0.60, 0.45], ">", paired=False)
    no_mean_run = verdict([1.0, 1.1], [None, None], ">", paired=False, why="no mean-baseline run")
    share = {"measured": "share", "a": "quantile", "b": "the stated size"}
    judged = {
        ("qae_pass1", "CPU preset", ""): ({"measured": "pass@1", "a": "quantile", "b": "mean"}, unpaired),
        ("qae_pass1", "sums model", ""): ({"measured": "pass@1", "a": "quantile", "b": "mean"}, no_mean_run),
        ("sparsity", "CPU preset", "none"): (share, verdict([None, None], None, "in", band=(0.7, 0.9))),
        ("sparsity", "CPU preset", "one"): (share, verdict([0.8], None, "in", band=(0.7, 0.9))),
        ("sparsity", "CPU preset", "held"): (share, verdict([0.79, 0.80, 0.81], None, "in", band=(0.7, 0.9))),
    }
    none, one, held, sums, cpu = scoreboard(judged)  # CLAIMS' order (sparsity first), then SETTINGS' order
    # the columns by name. Planted: a key "claim", "paper", "section", "measured" -> "XX..XX" or upper case -> fails
    assert list(cpu) == [
        "claim",
        "paper",
        "section",
        "setting",
        "measured",
        "a",
        "b",
        "a - b",
        "seeds",
        "verdict",
        "why",
    ]
    # no variant: the setting alone; unpaired: the seeds counted, none agreeing.
    # Planted: `if variant` -> `or True`, "" -> "XXXX"; `agree is not None` -> `or True`, str(n) -> str(None) -> fails
    assert (cpu["paper"], cpu["section"], cpu["setting"], cpu["measured"], cpu["seeds"]) == (
        "QAE",
        "Table 1",
        "CPU preset",
        "pass@1",
        "3",
    )
    # a side without a number shows a dash. Planted: "—" -> "XX—XX", `x is None` -> `and False` -> fails
    assert (sums["a"], sums["b"], sums["a - b"]) == ("quantile 1.050", "mean —", "—")
    # a size without a number, with one (no interval) and held (with its band's reason).
    # Planted: the dash -> "XX—XX" or `and False`; "" -> "XXXX" or `(v.lo is None) and False`;
    # ("holds", ...) -> ("XXholdsXX", ...) or ("HOLDS", ...) -> fails
    assert (none["setting"], none["a"], none["a - b"]) == ("CPU preset, none", "quantile —", "—")
    assert (one["a"], one["a - b"], one["why"]) == ("quantile 0.800", "0.800", "fewer than two seeds with a number")
    assert held["verdict"] == "holds" and held["why"].startswith("band: ") and "80%" in held["why"]


def test_a_matrix_cell_measured_two_ways_shows_both_verdicts():
    # Planted: "; ".join -> "XX; XX".join -> fails
    held = verdict([0.61, 0.72, 0.55], [0.50, 0.60, 0.45], "<")
    null = verdict([0.40, 0.62, 0.52], [0.45, 0.55, 0.50], "<")
    judged = {
        ("hard_prop42", "sequence policy", "Adam"): ({}, held),
        ("hard_prop42", "sequence policy", "SGD"): ({}, null),
    }
    assert matrix(judged)[0]["sequence policy"] == "reversed (Adam); no difference ±0.15 (SGD)"


def test_the_claim_cards_how_sure_for_a_size_and_for_the_untested():
    judged = {
        ("sparsity", "CPU preset", ""): ({}, verdict([0.97, 0.98, 0.99], None, "in", band=(0.70, 0.90))),
        ("qae_pass1", "CPU preset", ""): ({}, verdict([0.6], [0.5], ">")),
    }
    size, untested = claim_card(judged, [CARD[3], CARD[4]])
    # by hand: mean 0.98, [0.955, 1.005]; the band (0.70, 0.90)'s middle 0.80. Planted: sum(band) / 2 -> * 2 or / 3
    assert size["how sure"] == "measured 0.98 (95%: 0.96-1.00), paper ~0.80"
    # Planted: "cannot be tested here" -> "XX..XX" or upper case (falls through to "1 seeds") -> fails
    assert untested["how sure"] == "fewer than two seeds with a number on both sides"


def test_a_comparison_row_shows_three_decimals_by_default():
    # the default a participant reads: three decimals. Planted: digits=4 -> "quantile 1.000±0.000" reads 1.0000
    row = comparison_row("x", "quantile", [1.0, 1.0], "mean", [0.5, 0.5])
    assert (row["a"], row["b"], row["a - b"]) == ("quantile 1.000±0.000", "mean 0.500±0.000", "+0.500 [+0.500, +0.500]")


def test_unpaired_sides_are_never_equal_by_construction_even_with_equal_means():
    # equal_by_construction is checked seed by seed (the sides must agree to float rounding pair by pair); unpaired
    # sides have no pairs to check, so the claim is refused even when their means agree (both 0.6 here, exactly).
    # Planted: `if not paired or max(gaps) > ...` -> `if max(gaps) > ...` -> fails
    with pytest.raises(ValueError, match=r"^a and b differ by up to 0 \(paired: False\): not equal by construction"):
        verdict([0.5, 0.7], [0.7, 0.5], "<", paired=False, equal_by_construction="x")
