"""The statistics of study reports (grpo_core.studies.stats), against hand-computed numbers."""

import math

import pytest

from grpo_core.studies.stats import (
    Interval,
    check_outcome,
    paired_differences,
    paired_interval,
    seed_means,
    t_interval,
    verdict,
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
    for expect in ("better", "worse", "equal"):
        assert check_outcome(iv, expect, 0.02) == "inconclusive"
    assert iv.fmt(signed=True) == "+30.0 (n=1)"


def test_no_values():
    iv = t_interval([])
    assert iv.n == 0 and math.isnan(iv.mean) and math.isnan(iv.lo)
    assert check_outcome(iv, "better", 0.02) == "inconclusive"


def test_zero_variance_gives_a_point_interval():
    iv = t_interval([0.3, 0.3, 0.3])
    assert iv.n == 3
    assert (iv.mean, iv.lo, iv.hi) == pytest.approx((0.3, 0.3, 0.3))
    assert check_outcome(iv, "better", 0.02) == "holds"
    zero = t_interval([0.0, 0.0, 0.0])
    assert (zero.lo, zero.hi) == (0.0, 0.0)
    assert check_outcome(zero, "better", 0.02) == "contradicted"  # hi <= 0
    assert check_outcome(zero, "worse", 0.02) == "contradicted"  # lo >= 0
    assert check_outcome(zero, "equal", 0.02) == "holds"


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


@pytest.mark.parametrize(
    ("lo", "hi", "expect", "outcome"),
    [
        (0.01, 0.05, "better", "holds"),
        (-0.05, -0.01, "better", "contradicted"),
        (-0.05, 0.0, "better", "contradicted"),
        (0.0, 0.05, "better", "inconclusive"),
        (-0.01, 0.05, "better", "inconclusive"),
        (-0.05, -0.01, "worse", "holds"),
        (0.01, 0.05, "worse", "contradicted"),
        (0.0, 0.05, "worse", "contradicted"),
        (-0.05, 0.0, "worse", "inconclusive"),
        (-0.01, 0.05, "worse", "inconclusive"),
        (-0.01, 0.01, "equal", "holds"),
        (-0.02, 0.02, "equal", "holds"),
        (0.03, 0.05, "equal", "contradicted"),
        (-0.05, -0.03, "equal", "contradicted"),
        (-0.01, 0.03, "equal", "inconclusive"),
        (-0.05, 0.05, "equal", "inconclusive"),
        (0.02, 0.05, "equal", "inconclusive"),
    ],
)
def test_check_outcome(lo, hi, expect, outcome):
    assert check_outcome(Interval((lo + hi) / 2, lo, hi, 3), expect, 0.02) == outcome


def test_check_outcome_refuses_an_unknown_expectation():
    with pytest.raises(ValueError, match="unknown expectation"):
        check_outcome(Interval(0.0, -0.1, 0.1, 3), "larger", 0.02)


@pytest.mark.parametrize(
    ("outcomes", "expected"),
    [
        ([], "inconclusive"),
        (["holds"], "reproduced"),
        (["holds", "holds"], "reproduced"),
        (["holds", "inconclusive"], "inconclusive"),
        (["inconclusive"], "inconclusive"),
        (["holds", "contradicted"], "not reproduced"),
        (["inconclusive", "contradicted"], "not reproduced"),
    ],
)
def test_verdict(outcomes, expected):
    assert verdict(outcomes) == expected
