from math import comb

import pytest
import torch

from grpo_core.analysis.evaluation import majority_correct, pass_at_k, summarize
from grpo_core.analysis.sampling import generate_calls, sample_problems
from grpo_core.config.sampling import SamplingParams
from grpo_core.data.tiny import arith


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


def _row(source, domain, level, qid, reward, answer=None):
    return {
        "source": source,
        "domain": domain,
        "level": level,
        "id": qid,
        "reward": reward,
        "answer": answer,
    }


def test_summarize_per_benchmark_domain_and_level():
    # arith q1 (level 1): 2/2 correct, q2 (level 1): 0/2, q3 (level 2): 1/2;
    # gsm8k (math, ungraded level 0) g1: 1/2; humaneval (code) h1: partial credit 0.5 and 1.0.
    rows = [
        _row("arith", "math", 1, "q1", 1.0, "5"),
        _row("arith", "math", 1, "q1", 1.0, "5"),
        _row("arith", "math", 1, "q2", 0.0, "3"),
        _row("arith", "math", 1, "q2", 0.0, "4"),
        _row("arith", "math", 2, "q3", 1.0, "12"),
        _row("arith", "math", 2, "q3", 0.0, "21"),
        _row("gsm8k", "math", 0, "g1", 0.0, "7"),
        _row("gsm8k", "math", 0, "g1", 1.0, "8"),
        _row("humaneval", "code", 0, "h1", 0.5),
        _row("humaneval", "code", 0, "h1", 1.0),
    ]
    greedy = [
        {"source": "arith", "id": "q1", "reward": 1.0},
        {"source": "arith", "id": "q2", "reward": 0.0},
        {"source": "arith", "id": "q3", "reward": 1.0},
        {"source": "gsm8k", "id": "g1", "reward": 0.0},
        {"source": "humaneval", "id": "h1", "reward": 1.0},
    ]
    out = summarize(rows, pass_at=[1, 2], greedy=greedy)
    approx = pytest.approx
    assert out["arith"] == {
        "accuracy": approx(0.5),
        "pass@1": approx(0.5),
        "pass@2": approx(2 / 3),
        # q1 unanimous (1), q2 no correct vote (0), q3 a 1-1 tie between gold and "21" (1/2)
        "maj@2": approx(0.5),
        "greedy": approx(2 / 3),
        "level1": approx(0.5),
        "level2": approx(0.5),
    }
    assert out["gsm8k"] == {
        "accuracy": approx(0.5),
        "pass@1": approx(0.5),
        "pass@2": approx(1.0),
        "maj@2": approx(0.5),
        "greedy": approx(0.0),
    }  # level 0 (ungraded) has no levelN key
    # code: a sample solves its question only when every test passes; no majority vote
    assert out["humaneval"] == {
        "accuracy": approx(0.5),
        "pass@1": approx(0.5),
        "pass@2": approx(1.0),
        "greedy": approx(1.0),
    }
    # the math domain pools arith and gsm8k: 4 questions, 8 samples
    assert out["by_domain"]["math"]["accuracy"] == approx(4 / 8)
    assert out["by_domain"]["math"]["maj@2"] == approx((1 + 0 + 0.5 + 0.5) / 4)
    assert out["by_domain"]["math"]["greedy"] == approx(2 / 4)
    assert set(out["by_domain"]) == {"math", "code"}


@pytest.mark.parametrize(
    "votes, correct, expected",
    [
        (["5", "5", "5", "7"], [True, True, True, False], 1.0),  # clear majority
        (["1/2", "0.5", "3", "3"], [True, True, False, False], 0.5),  # 2-2 tie: forms of gold pool
        (["1/2", "0.5", "3", "4"], [True, True, False, False], 1.0),  # wrong votes split
        (["3", "3", "3", "5"], [False, False, False, True], 0.0),  # gold loses
        (["5", "3", "4", None], [True, False, False, False], 1 / 3),  # three-way tie at 1
        ([None, None, None, "5"], [False, False, False, True], 1.0),  # no answer, no vote
        ([None, None], [False, False], 0.0),
    ],
)
def test_majority_vote_with_ties(votes, correct, expected):
    assert majority_correct(votes, correct) == pytest.approx(expected)


def test_generate_calls_hold_whole_problems_or_split_their_samples():
    """(first problem, problems, first sample, samples each). 5 problems x 2 samples in calls
    of 4: 2 problems a call; 2 problems x 10 samples in calls of 4: 4 + 4 + 2 each."""
    assert generate_calls(5, 2, 4) == [(0, 2, 0, 2), (2, 2, 0, 2), (4, 1, 0, 2)]
    assert generate_calls(2, 10, 4) == [
        (0, 1, 0, 4),
        (0, 1, 4, 4),
        (0, 1, 8, 2),
        (1, 1, 0, 4),
        (1, 1, 4, 4),
        (1, 1, 8, 2),
    ]
    assert generate_calls(3, 4, 4) == [(0, 1, 0, 4), (1, 1, 0, 4), (2, 1, 0, 4)]


@pytest.mark.parametrize("samples, batch_size, most", [(10, 4, 4), (2, 4, 4), (3, 4, 3)])
def test_no_forward_of_sample_problems_holds_more_than_batch_size(
    tokenizer, tiny_model, samples, batch_size, most
):
    """eval.batch_size bounds every forward pass (prefill, decoding, scoring), counted on the
    real model: 10 samples in calls of 4 split each problem 4 + 4 + 2 (before: one call of
    10); 2 samples fit 2 problems a call; 3 samples fit one (3 sequences). The rows come
    problem by problem, samples numbered 0..samples-1, and the same seed gives the same rows."""
    problems = [
        {"domain": "math", "prompt": arith.prompt(a, b), "answer": str(a + b)}
        for a, b in [(12, 7), (30, 45), (8, 9)]
    ]
    cfg = SamplingParams(samples=samples, batch_size=batch_size, max_new_tokens=4)
    rows_per_forward = []
    hook = tiny_model.register_forward_pre_hook(
        lambda module, args, kwargs: rows_per_forward.append(kwargs["input_ids"].shape[0]),
        with_kwargs=True,
    )
    torch.manual_seed(0)
    rows = sample_problems(tiny_model, tokenizer, problems, cfg, "test", with_logprobs=True)
    hook.remove()
    assert max(rows_per_forward) == most
    assert [(r["index"], r["sample"]) for r in rows] == [
        (i, j) for i in range(3) for j in range(samples)
    ]
    torch.manual_seed(0)
    again = sample_problems(tiny_model, tokenizer, problems, cfg, "test", with_logprobs=True)
    assert again == rows


@pytest.mark.parametrize("dtype, record", [("float32", "entropy"), ("bfloat16", "none")])
def test_the_sampler_records_log_probs_only_where_scoring_reuses_them(
    tokenizer, tiny_model, monkeypatch, dtype, record
):
    """A float32 model's sampler log-probs stand for the scoring forward's, so sample_problems
    records them; a bf16 model's are scored by a forward anyway, so recording them would only
    cost time (the exp over the vocabulary at every token): the same rows either way."""
    import copy

    import grpo_core.analysis.sampling as sampling
    from grpo_core.models.precision import set_dtype

    model = set_dtype(copy.deepcopy(tiny_model), dtype)
    problems = [{"domain": "math", "prompt": arith.prompt(12, 7), "answer": "19"}]
    cfg = SamplingParams(samples=4, batch_size=4, max_new_tokens=6)
    asked, real = [], sampling.generate

    def spy(*args, **kwargs):
        asked.append(kwargs["record"])
        return real(*args, **kwargs)

    monkeypatch.setattr(sampling, "generate", spy)
    torch.manual_seed(0)
    rows = sample_problems(model, tokenizer, problems, cfg, "test", with_logprobs=True)
    assert asked == [record]
    # the rows and their mean log-probs are what recording everything gives
    monkeypatch.setattr(
        sampling, "generate", lambda *a, **kw: real(*a, **kw | {"record": "entropy"})
    )
    torch.manual_seed(0)
    assert sample_problems(model, tokenizer, problems, cfg, "test", with_logprobs=True) == rows
