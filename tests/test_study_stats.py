"""The statistics of study reports (grpo_core.studies.stats), against hand-computed numbers."""

import math

import pytest

from grpo_core.studies.stats import (
    CONTRADICTED,
    INCONCLUSIVE,
    NO_EFFECT,
    NOT_TESTABLE,
    REPRODUCED,
    Interval,
    Outcome,
    bonferroni,
    check_outcome,
    detectable_effect,
    paired_differences,
    paired_interval,
    seed_means,
    seed_spread,
    seeds_to_decide,
    t_interval,
    verdict,
    width_sd,
)

# t(0.975, df=2) and t(0.975, df=1), from tables.
T2 = 4.302653
T1 = 12.706205


def test_t_interval_by_hand():
    # mean 0.2, sd 0.1, sem 0.1 / sqrt(3) = 0.057735, half width 4.302653 * 0.057735 = 0.248414
    iv = t_interval([0.1, 0.2, 0.3])
    assert iv.n == 3
    assert iv.mean == pytest.approx(0.2)
    assert iv.lo == pytest.approx(-0.048414, abs=1e-6)
    assert iv.hi == pytest.approx(0.448414, abs=1e-6)
    assert iv.hi - iv.mean == pytest.approx(T2 * 0.1 / math.sqrt(3), abs=1e-6)


def test_t_interval_with_two_values_uses_one_degree_of_freedom():
    # mean 0.5, sd sqrt(0.02), sem 0.1: half width 1.2706205
    iv = t_interval([0.4, 0.6])
    assert (iv.lo, iv.hi) == pytest.approx((0.5 - T1 * 0.1, 0.5 + T1 * 0.1), abs=1e-6)


def test_one_value_has_no_interval_and_no_verdict():
    iv = t_interval([0.3])
    assert (iv.mean, iv.n) == (0.3, 1)
    assert math.isnan(iv.lo) and math.isnan(iv.hi)
    for expect in ("better", "worse", "different", "equal"):
        assert check_outcome(iv, expect, 0.02) == Outcome(INCONCLUSIVE, "1 seed: no interval")
    assert iv.fmt(signed=True) == "+30.0 (n=1)"


def test_no_values():
    iv = t_interval([])
    assert iv.n == 0 and math.isnan(iv.mean) and math.isnan(iv.lo)
    assert check_outcome(iv, "better", 0.02).verdict == INCONCLUSIVE


def test_zero_variance_gives_a_point_interval_which_no_verdict_accepts():
    iv = t_interval([0.3, 0.3, 0.3])
    assert iv.n == 3
    assert (iv.mean, iv.lo, iv.hi) == pytest.approx((0.3, 0.3, 0.3))
    refused = Outcome(INCONCLUSIVE, "identical at every seed: a zero-width interval is refused")
    for expect in ("better", "worse", "different", "equal"):
        assert check_outcome(iv, expect, 0.02) == refused
    zero = t_interval([0.0, 0.0, 0.0])
    assert (zero.lo, zero.hi) == (0.0, 0.0)
    assert check_outcome(zero, "equal", 0.02) == refused  # not "equal within 2 points"


def test_fmt_in_points():
    iv = Interval(0.12, 0.070317, 0.169683, 3)
    assert iv.fmt() == "12.0 [7.0, 17.0]"
    assert iv.fmt(signed=True) == "+12.0 [+7.0, +17.0]"
    assert Interval(-0.05, -0.1, 0.0, 3).fmt(signed=True) == "-5.0 [-10.0, +0.0]"


def test_seed_means_over_all_or_some_questions():
    acc = {0: {"q1": 0.2, "q2": 0.4}, 1: {"q1": 1.0}, 2: {"q3": 0.5}}
    assert seed_means(acc) == pytest.approx({0: 0.3, 1: 1.0, 2: 0.5})
    # A seed with none of the questions is left out.
    assert seed_means(acc, {"q1"}) == pytest.approx({0: 0.2, 1: 1.0})


A = {
    0: {"q1": 0.5, "q2": 0.7, "q3": 0.9},  # q3: only `a` has it at seed 0
    1: {"q1": 0.4, "q2": 0.8},
    2: {"q1": 1.0},  # seed 2: only `a`
}
B = {
    0: {"q1": 0.3, "q2": 0.5},
    1: {"q1": 0.4, "q2": 0.2, "q4": 0.0},  # q4: only `b`
    3: {"q1": 0.0},  # seed 3: only `b`
}


def test_paired_differences_pair_by_seed_and_question():
    # seed 0: ((0.5 - 0.3) + (0.7 - 0.5)) / 2 = 0.2; seed 1: (0 + 0.6) / 2 = 0.3
    assert paired_differences(A, B) == pytest.approx({0: 0.2, 1: 0.3})


def test_paired_differences_with_a_question_filter():
    assert paired_differences(A, B, {"q1"}) == pytest.approx({0: 0.2, 1: 0.0})
    assert paired_differences(A, B, {"q2", "q3", "q4"}) == pytest.approx({0: 0.2, 1: 0.6})
    assert paired_differences(A, B, {"q3"}) == {}  # no question both have


def test_paired_interval_is_t_over_the_seeds_differences():
    # d = 0.2, 0.3: mean 0.25, sd sqrt(0.005), sem 0.05
    iv = paired_interval(A, B)
    assert iv.n == 2 and iv.mean == pytest.approx(0.25)
    assert (iv.lo, iv.hi) == pytest.approx((0.25 - T1 * 0.05, 0.25 + T1 * 0.05), abs=1e-6)
    assert paired_interval(A, B, {"q3"}).n == 0


# Smallest effect of interest E = 0.05 (5 points). Each row: the 95% interval, the claim's
# direction, and the verdict the rules give, worked out by hand from the rule quoted.
E = 0.05
VERDICT_TABLE = [
    # better: reproduced when lo > 0 ...
    (0.06, 0.10, "better", REPRODUCED, ""),
    # ... and "smaller" when the interval also lies below E
    (0.01, 0.04, "better", REPRODUCED, "smaller than the smallest effect of interest"),
    # no effect: holds 0, inside [-E, E]
    (-0.03, 0.04, "better", NO_EFFECT, ""),
    (-0.05, 0.05, "better", NO_EFFECT, ""),
    # contradicted: hi < E, rules out the effect (lo beyond -E, so not "no effect") ...
    (-0.09, 0.03, "better", CONTRADICTED, "rules out the smallest effect of interest"),
    # ... or wholly below 0
    (-0.09, -0.01, "better", CONTRADICTED, "wholly on the other side of 0"),
    (-0.04, -0.01, "better", CONTRADICTED, "wholly on the other side of 0"),
    # inconclusive: holds 0 and E
    (-0.01, 0.08, "better", INCONCLUSIVE, None),
    (-0.09, 0.08, "better", INCONCLUSIVE, None),
    # worse mirrors better
    (-0.10, -0.06, "worse", REPRODUCED, ""),
    (-0.04, -0.01, "worse", REPRODUCED, "smaller than the smallest effect of interest"),
    (-0.04, 0.03, "worse", NO_EFFECT, ""),
    (-0.03, 0.09, "worse", CONTRADICTED, "rules out the smallest effect of interest"),
    (0.01, 0.09, "worse", CONTRADICTED, "wholly on the other side of 0"),
    (-0.08, 0.01, "worse", INCONCLUSIVE, None),
    # different: two-sided; reproduced on either side of 0
    (0.06, 0.10, "different", REPRODUCED, ""),
    (-0.10, -0.06, "different", REPRODUCED, ""),
    (-0.04, -0.01, "different", REPRODUCED, "smaller than the smallest effect of interest"),
    (-0.03, 0.02, "different", NO_EFFECT, ""),
    (-0.03, 0.09, "different", INCONCLUSIVE, None),
    # equal: inside [-E, E]; wholly outside; else inconclusive
    (-0.04, 0.03, "equal", REPRODUCED, ""),
    (0.06, 0.09, "equal", CONTRADICTED, "the interval lies outside the margin"),
    (-0.09, -0.06, "equal", CONTRADICTED, "the interval lies outside the margin"),
    (-0.02, 0.07, "equal", INCONCLUSIVE, None),
]


@pytest.mark.parametrize(("lo", "hi", "expect", "verdict", "note"), VERDICT_TABLE)
def test_check_outcome(lo, hi, expect, verdict, note):
    outcome = check_outcome(Interval((lo + hi) / 2, lo, hi, 3), expect, E)
    assert outcome.verdict == verdict
    if note is not None:
        assert outcome.note == note
    else:
        assert outcome.note.endswith("would decide it at 80% power")


def test_the_table_reaches_every_branch():
    reached = {(expect, verdict) for *_, expect, verdict, _ in VERDICT_TABLE}
    for expect in ("better", "worse"):
        assert {v for e, v in reached if e == expect} == {
            REPRODUCED,
            NO_EFFECT,
            CONTRADICTED,
            INCONCLUSIVE,
        }
    assert {v for e, v in reached if e == "different"} == {REPRODUCED, NO_EFFECT, INCONCLUSIVE}
    assert {v for e, v in reached if e == "equal"} == {REPRODUCED, CONTRADICTED, INCONCLUSIVE}


def test_a_two_sided_claim_is_tested_two_sided():
    """A difference that lies below 0 reproduces "different", but contradicts "better"."""
    iv = Interval(-0.08, -0.1, -0.06, 3)
    assert check_outcome(iv, "different", E).verdict == REPRODUCED
    assert check_outcome(iv, "better", E).verdict == CONTRADICTED


def test_check_outcome_refuses_an_unknown_expectation_or_effect():
    with pytest.raises(ValueError, match="unknown expectation"):
        check_outcome(Interval(0.0, -0.1, 0.1, 3), "larger", 0.02)
    with pytest.raises(ValueError, match="smallest effect of interest must be > 0"):
        check_outcome(Interval(0.0, -0.1, 0.1, 3), "better", 0.0)


def test_detectable_effect_by_hand():
    # values 0.1, 0.2, 0.3: sd 0.1, n 3; (t_0.975,2 + t_0.8,2) * 0.1 / sqrt(3)
    # t_0.8,2 = 1.060660 (tables): (4.302653 + 1.060660) * 0.057735 = 0.309655
    iv = t_interval([0.1, 0.2, 0.3])
    assert detectable_effect(iv) == pytest.approx(0.309655, abs=1e-5)
    assert math.isnan(detectable_effect(t_interval([0.1])))


def test_seeds_to_decide_by_hand():
    # An interval of mean 0.02 from 3 seeds whose spread (sd) is 0.03. For "better" with E = 0.05
    # the estimate must land within h* = max(0.02, 0.05 - 0.02) = 0.03 of the mean with 80%
    # power: (t(0.975, n-1) + t(0.8, n-1)) * 0.03 / sqrt(n) < 0.03 first holds at n = 10
    # ((2.262157 + 0.883404) / sqrt(10) = 0.994714; n = 9: (2.306004 + 0.888890) / 3 = 1.064965).
    # At 50% power (t(0.5) = 0) the half width alone: 2.446912 / sqrt(7) = 0.924843 < 1, n = 7.
    sd, n = 0.03, 3
    half = T2 * sd / math.sqrt(n)
    iv = Interval(0.02, 0.02 - half, 0.02 + half, n)
    assert seeds_to_decide(iv, "better", 0.05) == 10
    assert seeds_to_decide(iv, "better", 0.05, power=0.5) == 7
    outcome = check_outcome(iv, "better", 0.05)
    assert outcome == Outcome(INCONCLUSIVE, "about 10 seeds would decide it at 80% power", 10)
    # "equal" within 0.05: h* = |0.05 - 0.02| = 0.03, the same n
    assert seeds_to_decide(iv, "equal", 0.05) == 10


def test_bonferroni_by_hand():
    # 3 checks: each at 1 - 0.05 / 3 = 0.98333; one check: 0.95 unchanged
    assert bonferroni(3) == pytest.approx(0.983333, abs=1e-6)
    assert bonferroni(1) == pytest.approx(0.95)
    with pytest.raises(ValueError, match="at least one check"):
        bonferroni(0)
    # values 0.1, 0.2, 0.3 (sd 0.1, se 0.057735) at 98.33%: t(1 - 0.05/6, 2) = 7.648804,
    # half width 0.441604, against 0.248414 at 95%
    iv = t_interval([0.1, 0.2, 0.3], bonferroni(3))
    assert (iv.lo, iv.hi) == pytest.approx((0.2 - 0.441604, 0.2 + 0.441604), abs=1e-6)
    assert iv.confidence == pytest.approx(0.983333, abs=1e-6)
    assert seed_spread(iv) == pytest.approx(0.1)  # the spread does not widen with it
    # what the seeds detect is read at the interval's own confidence:
    # (7.648804 + 1.060660) * 0.057735 = 0.502842
    assert detectable_effect(iv) == pytest.approx(0.502842, abs=1e-5)


def test_noise_floor_replaces_a_smaller_seed_spread():
    # values 0.01, 0.02, 0.03: sd 0.01. The evaluation's own noise in a seed's value is 0.03,
    # larger, so the interval's sd is 0.03: 0.02 +- 4.302653 * 0.03 / sqrt(3) = +-0.074524
    iv = t_interval([0.01, 0.02, 0.03], sd_floor=0.03)
    assert iv.floored
    assert (iv.lo, iv.hi) == pytest.approx((0.02 - 0.074524, 0.02 + 0.074524), abs=1e-6)
    assert seed_spread(iv) == pytest.approx(0.01)  # the seeds' own spread, kept
    assert width_sd(iv) == pytest.approx(0.03)
    # a floor below the spread changes nothing; so does a nan floor (no k recorded)
    for floor in (0.005, math.nan):
        same = t_interval([0.01, 0.02, 0.03], sd_floor=floor)
        assert not same.floored
        assert (same.lo, same.hi) == pytest.approx((0.02 - 0.024841, 0.02 + 0.024841), abs=1e-6)
    # identical seeds with evaluation noise get an interval, not a refusal
    assert t_interval([0.02, 0.02, 0.02], sd_floor=0.03).hi == pytest.approx(0.094524, abs=1e-6)


@pytest.mark.parametrize(
    ("verdicts", "expected"),
    [
        ([], INCONCLUSIVE),
        ([REPRODUCED], REPRODUCED),
        ([REPRODUCED, REPRODUCED], REPRODUCED),
        ([REPRODUCED, INCONCLUSIVE], INCONCLUSIVE),
        ([REPRODUCED, NO_EFFECT, INCONCLUSIVE], NO_EFFECT),
        ([NO_EFFECT, CONTRADICTED], CONTRADICTED),
        ([INCONCLUSIVE, CONTRADICTED, REPRODUCED], CONTRADICTED),
        ([CONTRADICTED, NOT_TESTABLE], NOT_TESTABLE),
    ],
)
def test_a_claim_takes_its_weakest_checks_verdict(verdicts, expected):
    assert verdict([Outcome(v) for v in verdicts]).verdict == expected


def test_a_reproduced_claim_says_when_it_is_smaller_than_the_paper():
    small = Outcome(REPRODUCED, "smaller than the smallest effect of interest")
    assert verdict([Outcome(REPRODUCED), small]) == small
