import math

import pytest

from grpo_core.analysis.difficulty import difficulty_bin, summarize_profile
from grpo_core.analysis.guides import find_guides
from grpo_core.config.guide import GuideParams


@pytest.mark.parametrize(
    "rate, expected",
    [
        (0.0, "unsolved"),
        (0.125, "hard"),
        (0.49, "hard"),
        (0.5, "easy"),
        (0.875, "easy"),
        (1.0, "solved"),
    ],
)
def test_difficulty_bins(rate, expected):
    assert difficulty_bin(rate) == expected


def test_profile_summary_by_hand():
    problems = [{"id": "a", "level": 3}, {"id": "b", "level": 4}]
    samples = [
        {"index": 0, "reward": 1.0, "mean_logprob": -0.2, "length": 10},
        {"index": 0, "reward": 0.0, "mean_logprob": -0.4, "length": 14},
        {"index": 1, "reward": 0.0, "mean_logprob": -1.0, "length": 20},
        {"index": 1, "reward": 0.0, "mean_logprob": -3.0, "length": 30},
    ]
    a, b = summarize_profile(problems, samples)
    assert (a["pass_rate"], a["bin"], a["mean_length"]) == (0.5, "easy", 12.0)
    assert a["mean_logprob"] == pytest.approx(-0.3)
    assert a["confidence"] == pytest.approx(math.exp(-0.3))
    assert (b["pass_rate"], b["bin"], b["samples"]) == (0.0, "unsolved", 2)
    with pytest.raises(ValueError, match="'c' has no samples"):
        summarize_profile([*problems, {"id": "c", "level": 1}], samples)


def test_guide_search_keeps_the_first_fraction_that_unlocks(tokenizer, tiny_model, monkeypatch):
    """Reward: the completion starts with the whole reference solution "3 5 7". A random
    model almost never writes it from a one-word prefix, and always does when given it all."""
    from grpo_core.rewards import verify as rewards

    monkeypatch.setitem(rewards.VERIFIERS, "toy", lambda c, answer: float(c.startswith("3 5 7")))
    problems = [
        {
            "id": f"q{i}",
            "level": 5,
            "domain": "toy",
            "prompt": f"Q: {i}+1=?\nA: ",
            "answer": "7",
            "solution": "3 5 7",
        }
        for i in range(3)
    ]
    cfg = GuideParams(samples=4, max_new_tokens=8, fractions=[0.34, 1.0])
    rows = find_guides(tiny_model, tokenizer, problems, cfg)
    assert [r["id"] for r in rows] == ["q0", "q1", "q2"]
    for r in rows:
        assert r["fraction"] == 1.0 and r["tried"] == [0.34, 1.0] and r["pass_rate"] == 1.0
