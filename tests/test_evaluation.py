from math import comb

import pytest

from grpo_core.evaluation import pass_at_k, summarize


@pytest.mark.parametrize(
    "n, c, k", [(4, 0, 1), (4, 1, 1), (4, 1, 4), (10, 3, 2), (10, 3, 8), (5, 5, 3)]
)
def test_pass_at_k_matches_the_combinatorial_formula(n, c, k):
    assert pass_at_k(n, c, k) == pytest.approx(1 - comb(n - c, k) / comb(n, k))


def test_pass_at_k_hand_computed_and_errors():
    assert pass_at_k(4, 1, 2) == pytest.approx(0.5)  # 1 - C(3,2)/C(4,2) = 1 - 3/6
    with pytest.raises(ValueError):
        pass_at_k(4, 5, 1)
    with pytest.raises(ValueError):
        pass_at_k(4, 1, 5)


def test_summarize_per_benchmark_and_level():
    # q1 (level 1): 2/2 correct; q2 (level 1): 0/2; q3 (level 2): 1/2.
    rows = [
        ("arith", 1, "q1", 1),
        ("arith", 1, "q1", 1),
        ("arith", 1, "q2", 0),
        ("arith", 1, "q2", 0),
        ("arith", 2, "q3", 1),
        ("arith", 2, "q3", 0),
    ]
    out = summarize(*map(list, zip(*rows, strict=True)), pass_at=[1, 2])
    assert out == {
        "arith": {
            "accuracy": pytest.approx(0.5),
            "pass@1": pytest.approx(0.5),
            "pass@2": pytest.approx(2 / 3),
            "level1": pytest.approx(0.5),
            "level2": pytest.approx(0.5),
        }
    }
