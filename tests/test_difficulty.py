import math

import pytest

from grpo_core.analysis.difficulty import difficulty_bin, summarize_profile
from grpo_core.analysis.guides import find_guides
from grpo_core.config.guide import GuideParams
from grpo_core.config.model import TinyModelParams
from grpo_core.data.tiny import arith
from grpo_core.models.tiny import build_char_tokenizer, build_tiny_model


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


def _toy_problems() -> list[dict]:
    return [
        {
            "id": f"q{i}",
            "level": 5,
            "domain": "toy",
            "prompt": f"Q: {i}+1=?\nA: ",
            "answer": "7",
            "solution": "3 5 7",  # 0.34: floor(1.7) = 1 is the first space, so the hint is "3"
        }
        for i in range(3)
    ]


@pytest.mark.parametrize("chat", [False, True])
def test_guide_search_keeps_the_first_fraction_that_unlocks(monkeypatch, chat):
    """The sampler is faked: q0 is solved once in 4 with any hint, q1 twice in 4 with the
    whole solution as the hint, q2 never. Each round samples the guided prompts of the
    questions still locked, rendered for the chat flag."""
    from grpo_core.analysis import guides

    tokenizer = build_char_tokenizer(["abc"])
    tokenizer.chat_template = (
        "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}\n{% endfor %}"
        "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
    )
    rounds: list[list[str]] = []

    def fake_sample_problems(model, tok, problems, cfg, desc, code=None, function=None):
        assert tok is tokenizer and function is None
        rounds.append([p["prompt"] for p in problems])
        rows = []
        for index, p in enumerate(problems):
            hinted = "H: " in p["prompt"]
            whole = "H: 3 5 7\nA: " in p["prompt"]
            wins = {"q0": 1 if hinted else 0, "q1": 2 if whole else 0, "q2": 0}[p["id"]]
            for sample in range(cfg.samples):
                rows.append({"index": index, "sample": sample, "reward": float(sample < wins)})
        return rows

    monkeypatch.setattr(guides, "sample_problems", fake_sample_problems)
    problems = _toy_problems()
    cfg = GuideParams(samples=4, max_new_tokens=8, fractions=[0.34, 1.0])
    rows = find_guides(None, tokenizer, problems, cfg, chat=chat)
    assert rows == [
        {"id": "q0", "level": 5, "fraction": 0.34, "pass_rate": 0.25, "tried": [0.34]},
        {"id": "q1", "level": 5, "fraction": 1.0, "pass_rate": 0.5, "tried": [0.34, 1.0]},
        {"id": "q2", "level": 5, "fraction": None, "pass_rate": 0.0, "tried": [0.34, 1.0]},
    ]
    wrap = (lambda t: f"<|user|>\n{t}\n<|assistant|>\n") if chat else (lambda t: t)
    assert rounds == [
        [wrap(f"Q: {i}+1=?\nH: 3\nA: ") for i in range(3)],
        [wrap(f"Q: {i}+1=?\nH: 3 5 7\nA: ") for i in (1, 2)],
    ]
    assert [p["prompt"] for p in problems] == [f"Q: {i}+1=?\nA: " for i in range(3)]  # as given


def test_a_guided_completion_is_rewarded_on_its_own_text(monkeypatch):
    """At fraction 1 the hint holds the whole solution, \\boxed{85} included; a model that
    writes nothing (EOS first) still earns 0: the hint is in the prompt, not the response."""
    from grpo_core.analysis import sampling
    from grpo_core.rewards.verify import verify_batch

    tokenizer = build_char_tokenizer([arith.prompt(47, 38), arith.solution(47, 38), "H: "])
    small = TinyModelParams(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64)
    model = build_tiny_model(tokenizer, small, seed=0).eval()
    eos = tokenizer.eos_token_id

    def eos_first(module, args, logits):
        logits = logits.clone()
        logits[..., eos] += 1e4
        return logits

    model.lm_head.register_forward_hook(eos_first)
    seen: list[tuple[list[str], list[str]]] = []
    real_generate = sampling.generate

    def recording_generate(model, tok, prompts, *args, **kw):
        ro = real_generate(model, tok, prompts, *args, **kw)
        seen.append((list(prompts), list(ro.texts)))
        return ro

    monkeypatch.setattr(sampling, "generate", recording_generate)
    problem = {
        "id": "q",
        "level": 2,
        "domain": "math",
        "prompt": arith.prompt(47, 38),
        "answer": "85",
        "solution": arith.solution(47, 38),
    }
    cfg = GuideParams(samples=4, max_new_tokens=8, fractions=[1.0])
    rows = find_guides(model, tokenizer, [problem], cfg, chat=False)
    assert rows == [{"id": "q", "level": 2, "fraction": None, "pass_rate": 0.0, "tried": [1.0]}]
    guided = "Q: 47+38=?\nH: 7+8=15\n4+3+1=8\n\\boxed{85}\nA: "
    assert seen == [([guided], [""] * 4)]
    # the same text scored with the prompt would be correct: the hint alone earns the answer
    assert verify_batch(["math"], [guided], ["85"]) == [1.0]
