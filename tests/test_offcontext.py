"""Off-Context GRPO as the paper (reference code AgPriyank/OC-GRPO) trains it: rollouts sampled
with the hint in the prompt, every response token the model's own, trained under the unguided
prompt with the per-token weight clamp(exp(gamma (log pi_old(y|x) - log pi_old(y|x~))))."""

import math
from dataclasses import replace

import pyarrow as pa
import pytest
import torch

from grpo_core.algorithms.losses import clipped_surrogate
from grpo_core.algorithms.offcontext import importance_weights
from grpo_core.config.model import TinyModelParams
from grpo_core.config.train import OffContextParams, TrainParams, TrainStage
from grpo_core.data.prompts import char_prefix
from grpo_core.data.schema import PROBLEM_SCHEMA
from grpo_core.data.tiny import arith
from grpo_core.io import write_parquet
from grpo_core.models.qwen3 import write_tokenizer
from grpo_core.models.tiny import build_char_tokenizer, build_tiny_model
from grpo_core.rewards import verify as rewards
from grpo_core.rollout.rollouts import Rollouts
from grpo_core.rollout.scoring import token_logprobs
from grpo_core.training import sampling
from grpo_core.training.batch import Question
from grpo_core.training.guidance import answer_tokens, guided_token_weights
from grpo_core.training.questions import training_questions
from grpo_core.training.trainer import GRPOTrainer

X = arith.prompt(47, 38)  # "Q: 47+38=?\nA: "
SOLUTION = arith.solution(47, 38)  # "7+8=15\n4+3+1=8\n\\boxed{85}"
X_HINTED = "Q: 47+38=?\nH: 7+8=15\nA: "  # the hint at fraction 0.5


@pytest.fixture(scope="module")
def tok():
    return build_char_tokenizer([X, SOLUTION, X_HINTED])


@pytest.fixture
def model(tok):
    params = TinyModelParams(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64)
    return build_tiny_model(tok, params, seed=0).eval()


def _question(i: int = 0, **kw) -> Question:
    return Question(f"q{i}", "math", 5, X, "85", solution=SOLUTION, **kw)


def _cfg(**oc) -> TrainParams:
    return TrainParams(
        steps=1,
        prompts_per_step=2,
        group_size=4,
        max_new_tokens=12,
        lr=3e-2,
        micro_batch_size=64,
        updates_per_batch=1,
        oc_grpo=OffContextParams(**{"mode": "adaptive", **oc}),
    )


def _logprobs(model, tok, context: str, completion: list[int], t: float = 1.0) -> torch.Tensor:
    """log p(y_t | context, y_<t) of each completion token, from one plain forward pass."""
    ids = tok(context, add_special_tokens=False)["input_ids"] + completion
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0].float() / t
    logp = torch.log_softmax(logits, dim=-1)
    p = len(ids) - len(completion)
    return torch.stack([logp[p - 1 + j, c] for j, c in enumerate(completion)])


def _completion(ro, row: int) -> list[int]:
    return ro.completion_ids[row][ro.completion_mask[row].bool()].tolist()


def _prompt_text(ro, tok, row: int) -> str:
    ids = ro.input_ids[row, : ro.prompt_len][ro.attention_mask[row, : ro.prompt_len].bool()]
    return tok.decode(ids.tolist())


# --- the weight -------------------------------------------------------------------------------


def test_importance_weight_by_hand():
    # log pi(y|x) vs log pi(y|x~) per token: equal; the hint made it 500x likelier; the hint
    # made it 3x less likely.
    logp_x = torch.tensor([[math.log(0.5), math.log(0.001), math.log(0.3)]])
    logp_hint = torch.tensor([[math.log(0.5), math.log(0.5), math.log(0.1)]])
    # gamma 1: (1, 0.002 -> floor 0.01, 3 -> cap 1)
    w = importance_weights(logp_x, logp_hint, gamma=1.0, floor=0.01, cap=1.0)
    torch.testing.assert_close(w, torch.tensor([[1.0, 0.01, 1.0]]))
    # gamma 0.5, no floor, cap 2: (1, sqrt(0.002), sqrt(3) -> 1.7321)
    w = importance_weights(logp_x, logp_hint, gamma=0.5, floor=0.0, cap=2.0)
    torch.testing.assert_close(w, torch.tensor([[1.0, math.sqrt(0.002), math.sqrt(3.0)]]))


# --- sampling with the hint in the prompt -----------------------------------------------------


def _sample(model, tok, cfg, fractions, questions=None, seeds=None):
    trainer = GRPOTrainer(model, tok, cfg)
    questions = questions or [_question(i) for i in range(len(fractions))]
    seeds = (seeds or list(range(len(questions))))[: len(questions)]
    gens = [torch.Generator().manual_seed(s) for s in seeds]
    return trainer, trainer.offcontext.sample(questions, fractions, cfg.group_size, gens)


def test_a_guided_rollout_is_sampled_from_the_hinted_prompt_and_holds_no_forced_token(
    model, tok, monkeypatch
):
    seen = []
    original = sampling.generate
    monkeypatch.setattr(
        sampling,
        "generate",
        lambda m, t, prompts, **kw: seen.append(prompts) or original(m, t, prompts, **kw),
    )
    cfg = _cfg()
    trainer, sampled = _sample(model, tok, cfg, [None, 0.5])
    assert seen == [[X, X_HINTED]]  # the sampler's contexts: x, and x~ holding the hint
    ro = sampled.ro
    assert sampled.guided_rows.tolist() == [False] * 4 + [True] * 4
    for row in range(8):
        y = _completion(ro, row)
        # Trained under x: the prompt part of every row is the unguided prompt.
        assert _prompt_text(ro, tok, row) == X
        # No forced token: the response is exactly what the text says, and every one of its
        # tokens has the sampler's probability under the context it was sampled from.
        assert tok.decode(y, skip_special_tokens=True) == ro.texts[row]
        context = X_HINTED if row >= 4 else X
        expected = _logprobs(model, tok, context, y)
        if row >= 4:
            torch.testing.assert_close(sampled.hinted_logp[row, : len(y)], expected)
        else:
            assert (sampled.hinted_logp[row] == 0).all()
        # pi_old as the trainer reads it: under x, for every row.
        old, _ = trainer.score(ro)
        torch.testing.assert_close(old[row, : len(y)], _logprobs(model, tok, X, y))


@pytest.fixture
def says_eos_at_once(model, tok):
    """The model emits EOS first whatever its context: logits from a biased head."""
    head = torch.nn.Linear(model.config.hidden_size, len(tok), bias=True)
    torch.nn.init.zeros_(head.weight)
    with torch.no_grad():
        head.bias.zero_()
        head.bias[tok.eos_token_id] = 30.0
    model.lm_head = head
    return model


def test_a_guided_rollout_at_fraction_1_that_ends_at_once_earns_nothing(says_eos_at_once, tok):
    # The hint at fraction 1 is the whole solution, \boxed{85} included; the response is empty.
    _, sampled = _sample(says_eos_at_once, tok, _cfg(), [1.0])
    assert sampled.ro.texts == [""] * 4
    assert sampled.rewards.tolist() == [0.0] * 4
    # PrefixRL rewards the prefix it placed in the prompt with the continuation: correct.
    _, prefixed = _sample(says_eos_at_once, tok, _cfg(correction="prefix_rl"), [1.0])
    assert prefixed.rewards.tolist() == [1.0] * 4


@pytest.mark.parametrize(
    "correction, context",
    [
        ("importance", X),
        ("none", X),
        ("hinted", X_HINTED),
        ("prefix_rl", X + char_prefix(SOLUTION, 0.5)),  # "Q: 47+38=?\nA: 7+8=15"
    ],
)
def test_each_variant_trains_under_the_context_it_claims(model, tok, correction, context):
    trainer, sampled = _sample(model, tok, _cfg(correction=correction), [0.5])
    ro = sampled.ro
    old, _ = trainer.score(ro)
    for row in range(4):
        assert _prompt_text(ro, tok, row) == context
        y = _completion(ro, row)
        torch.testing.assert_close(old[row, : len(y)], _logprobs(model, tok, context, y))
    # Only `importance` and `none` carry a second context (x~) for the weight.
    assert sampled.guided_rows.any() == (correction in ("importance", "none"))
    weights, metrics = guided_token_weights(sampled, old, trainer.cfg)
    assert (weights is not None) == (correction == "importance")
    assert ("oc/weight_mean" in metrics) == (correction in ("importance", "none"))


def test_the_weight_on_every_token_is_the_ratio_of_the_unguided_to_the_guided_context(model, tok):
    """Against log-probs computed independently under x and x~ by plain forward passes: the
    random model's next-token distribution depends on the hint, so w differs from 1."""
    cfg = _cfg(gamma=0.5, floor=0.2, cap=1.5)
    trainer, sampled = _sample(model, tok, cfg, [None, 0.5])
    old, _ = trainer.score(sampled.ro)
    weights, metrics = guided_token_weights(sampled, old, cfg)
    ro, on = sampled.ro, []
    for row in range(8):
        y = _completion(ro, row)
        w = weights[row, : len(y)]
        if row < 4:  # unguided rows: 1
            assert (weights[row] == 1).all()
            continue
        ratio = _logprobs(model, tok, X, y) - _logprobs(model, tok, X_HINTED, y)
        torch.testing.assert_close(w, torch.exp(0.5 * ratio).clamp(0.2, 1.5))
        assert (weights[row, len(y) :] == 1).all()  # padding
        on.append(w)
    on = torch.cat(on)
    assert (on != 1).any() and (on < 1).any()
    assert metrics["oc/weight_mean"] == pytest.approx(float(on.mean()))
    assert metrics["oc/weight_at_floor"] == pytest.approx(float((on <= 0.2).float().mean()))
    assert metrics["oc/weighted_tokens"] == len(on)


def test_the_gradient_from_unguided_rows_is_unchanged_by_guided_ones(model, tok):
    """The unguided groups of a batch sample the same rollouts (their own random streams),
    keep weight 1 and pi_old under x, so the gradient of their part of the loss is the same
    with guided groups beside them or not."""
    cfg = _cfg()
    grads = []
    for fractions in ([None, None], [None, None, 0.5, 1.0]):
        trainer, sampled = _sample(model, tok, cfg, fractions, seeds=[5, 6, 7, 8])
        ro = sampled.ro
        old, _ = trainer.score(ro)
        weights, _ = guided_token_weights(sampled, old, cfg)
        adv = trainer.advantage_fn(sampled.rewards + torch.arange(len(ro.texts)) % 3, 4)
        adv = adv.unsqueeze(1) * (weights if weights is not None else 1.0)
        rows = slice(0, 8)  # the two unguided groups
        model.zero_grad()
        logp, _ = token_logprobs(model, ro.input_ids[rows], ro.attention_mask[rows], ro.prompt_len)
        loss = clipped_surrogate(logp, old[rows], adv[rows]).per_token
        (loss * ro.completion_mask[rows]).sum().backward()
        grads.append([p.grad.clone() for p in model.parameters()])
        assert weights is None or (weights[rows] == 1).all()
    for a, b in zip(*grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


# --- the variants in the loop -----------------------------------------------------------------


@pytest.fixture
def solved_with_the_whole_hint(monkeypatch):
    """A reward that knows whether a rollout was sampled with the whole solution in its prompt
    (the tiny random model cannot solve anything): 1 for those, 0 otherwise. The verifier is
    called row by row, in order."""
    state = {}
    original = sampling.GroupSampler.sample

    def sample(self, questions, n=None, generators=None, contexts=None, reward_prefixes=None):
        per_group = contexts or [q.prompt for q in questions]
        k = n or self.cfg.group_size
        state["rows"] = iter([float("boxed" in c) for c in per_group for _ in range(k)])
        return original(self, questions, n, generators, contexts, reward_prefixes)

    monkeypatch.setattr(sampling.GroupSampler, "sample", sample)
    monkeypatch.setitem(rewards.VERIFIERS, "sol", lambda c, answer: next(state["rows"]))
    return [replace(_question(i), domain="sol") for i in range(2)]


def test_adaptive_re_rolls_a_failed_group_at_growing_fractions_until_one_is_correct(
    model, tok, solved_with_the_whole_hint
):
    trainer = GRPOTrainer(model, tok, _cfg(fractions=[0.5, 1.0]))
    torch.manual_seed(0)
    metrics, rows = trainer.step(solved_with_the_whole_hint)
    # 2 unguided groups fail, 2 re-rolls at 0.5 fail, 2 at 1.0 succeed: 6 groups of 4.
    assert metrics["num_rollouts"] == 6 * 4
    assert metrics["oc/guided_groups"] == 2 and metrics["oc/guided_solved"] == 1.0
    assert [(r["guided"], r["guide_fraction"], r["reward_mean"]) for r in rows] == [
        (True, 1.0, 1.0)
    ] * 2
    # guided_rollouts=2 of G=4: each group keeps 2 unguided failures beside 2 guided successes.
    trainer = GRPOTrainer(model, tok, _cfg(fractions=[0.5, 1.0], guided_rollouts=2))
    torch.manual_seed(0)
    metrics, rows = trainer.step(solved_with_the_whole_hint)
    assert metrics["num_rollouts"] == 2 * 4 + 2 * 2 + 2 * 2
    assert [r["reward_mean"] for r in rows] == [0.5, 0.5]
    assert all(r["trained"] and r["update_weight_abs"] > 0 for r in rows)


def test_fixed_mode_keeps_the_original_row_beside_its_guided_twin(
    model, tok, tmp_path, monkeypatch, solved_with_the_whole_hint
):
    monkeypatch.chdir(tmp_path)
    problems = [
        {
            "id": f"p{i}",
            "domain": "sol",
            "source": "arith",
            "level": 5,
            "prompt": X,
            "answer": "85",
            "solution": SOLUTION,
            "meta": "{}",
        }
        for i in range(3)
    ]
    write_parquet(
        pa.Table.from_pylist(problems, schema=PROBLEM_SCHEMA), "data/prepared/train.parquet"
    )
    guides = [
        {"id": "p0", "fraction": 1.0},
        {"id": "p1", "fraction": 0.5},
        {"id": "p2", "fraction": None},
    ]
    write_parquet(pa.Table.from_pylist(guides), "data/guides.parquet")
    params = TrainStage.model_validate(
        {
            "algo": "oc_grpo",
            "train": {"levels": [5], "group_size": 4, "max_new_tokens": 12, "prompts_per_step": 3},
        }
    )
    questions = training_questions(params)
    # Every original (unlocked or not) and one guided twin per unlocked question, at its fraction.
    assert [(q.id, q.guided, q.guide_fraction) for q in questions] == [
        ("p0", False, 1.0),
        ("p1", False, 0.5),
        ("p2", False, None),
        ("p0+hint", True, 1.0),
        ("p1+hint", True, 0.5),
    ]
    cfg = params.train.model_copy(update={"prompts_per_step": 4, "micro_batch_size": 64})
    trainer = GRPOTrainer(model, tok, cfg)
    torch.manual_seed(0)
    metrics, rows = trainer.step([questions[0], questions[3], questions[1], questions[4]])
    # Both rows of each question, each its own group; no cascade: the 0.5 twin stays failed.
    assert metrics["num_rollouts"] == 4 * 4
    assert [(r["id"], r["guided"], r["guide_fraction"], r["reward_mean"]) for r in rows] == [
        ("p0", False, None, 0.0),
        ("p0+hint", True, 1.0, 1.0),
        ("p1", False, None, 0.0),
        ("p1+hint", True, 0.5, 0.0),
    ]


def test_an_instruct_models_contexts_go_through_its_chat_template():
    """x~ is the guided prompt as one user message; PrefixRL's prefix follows the assistant
    turn's opening."""
    from grpo_core.data.prompts import guided_prompt, math_prompt, render_prompt
    from grpo_core.training.guidance import sampling_context
    from grpo_core.training.questions import render_questions

    chat_tok = build_char_tokenizer(["abc"])
    chat_tok.chat_template = (
        "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}\n{% endfor %}"
        "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
    )
    text = math_prompt("What is 47+38?")
    solution = "Add the units: 7+8=15. Then the tens. The answer is \\boxed{85}."
    (q,) = render_questions([Question("q", "math", 2, text, "85", solution)], chat_tok, True)
    assert q.prompt == f"<|user|>\n{text}\n<|assistant|>\n" and q.text == text
    hint = char_prefix(solution, 0.5)  # "Add the units: 7+8=15. Then"
    guided = guided_prompt(text, hint, complete=False)
    assert sampling_context(q, 0.5, "importance", chat_tok) == render_prompt(chat_tok, guided, True)
    assert sampling_context(q, 0.5, "hinted", chat_tok) == f"<|user|>\n{guided}\n<|assistant|>\n"
    assert sampling_context(q, 0.5, "prefix_rl", chat_tok) == q.prompt + hint
    assert sampling_context(q, None, "importance", chat_tok) == q.prompt


def _rollouts(tokenizer, completions: list[str]) -> Rollouts:
    """Rollouts of `completions` (right-padded) after a one-token prompt, as the sampler lays
    them out."""
    rows = [tokenizer(c, add_special_tokens=False)["input_ids"] for c in completions]
    width = max(map(len, rows))
    ids = torch.zeros(len(rows), 1 + width, dtype=torch.long)
    mask = torch.zeros(len(rows), width, dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, 1 : 1 + len(r)] = torch.tensor(r)
        mask[i, : len(r)] = 1
    attn = torch.cat([torch.ones(len(rows), 1, dtype=torch.long), mask], dim=1)
    return Rollouts(ids, attn, mask, 1, completions, torch.zeros(len(rows), dtype=torch.bool))


def _marked(tokenizer, ro, mask, row: int) -> str:
    return tokenizer.decode(ro.completion_ids[row][mask[row]].tolist())


def test_answer_tokens_are_the_ones_that_write_the_answer_the_verifier_reads(tmp_path):
    # The char tokenizer: one token a character, so the answer's tokens are its characters.
    texts = [SOLUTION, "7+8=15\nThe answer is 85.", "no idea", SOLUTION]
    tok = build_char_tokenizer(texts)
    ro = _rollouts(tok, texts)
    mask = answer_tokens(tok, ro, [0, 1, 2], ["math"] * 3)  # row 3 not asked for
    assert _marked(tok, ro, mask, 0) == "85"  # the box's content, the last "85"
    assert mask[0].nonzero().flatten().tolist() == [len(SOLUTION) - 3, len(SOLUTION) - 2]
    assert _marked(tok, ro, mask, 1) == "85"
    assert not mask[2].any() and not mask[3].any()  # no answer; not asked for
    # Qwen3's BPE: a token that holds part of the answer counts, none outside it.
    write_tokenizer(tmp_path)
    from transformers import AutoTokenizer

    bpe = AutoTokenizer.from_pretrained(tmp_path)
    texts = ["47 + 38 = 85, so the answer is \\boxed{85}.", "\\boxed{12} or \\boxed{13}"]
    ro = _rollouts(bpe, texts)
    mask = answer_tokens(bpe, ro, [0, 1], ["math", "math"])
    assert _marked(bpe, ro, mask, 0).strip() == "85"
    assert mask[0].sum() >= 1 and not mask[0][:10].any()  # not the "85" of the working
    assert not mask[1].any()  # boxes that disagree: no answer is read


def test_the_answer_weight_is_the_mean_weight_on_the_solved_guided_rows_answer_tokens(model, tok):
    cfg = _cfg(gamma=0.5, floor=0.2, cap=1.5)
    trainer, sampled = _sample(model, tok, cfg, [None, 0.5])
    old, _ = trainer.score(sampled.ro)
    answer = torch.zeros_like(sampled.ro.completion_mask, dtype=torch.bool)
    answer[0, :2] = True  # an unguided row: not counted
    answer[4, :2] = answer[5, :1] = True  # guided rows, by hand
    weights, metrics = guided_token_weights(
        sampled, old, cfg, answer & sampled.ro.completion_mask.bool()
    )
    picked = answer & sampled.ro.completion_mask.bool()
    picked[0] = False
    assert metrics["oc/answer_tokens"] == float(picked.sum()) > 0
    assert metrics["oc/answer_weight_mean"] == pytest.approx(float(weights[picked].mean()))
    _, without = guided_token_weights(sampled, old, cfg, torch.zeros_like(answer))
    assert without["oc/answer_tokens"] == 0.0 and "oc/answer_weight_mean" not in without
