import math

import pytest
import torch

from grpo_core.config.model import TinyModelParams
from grpo_core.config.train import LoraParams, TrainParams
from grpo_core.rewards import verify as rewards
from grpo_core.training.batch import Question, QuestionSampler
from grpo_core.training.lora import add_lora
from grpo_core.training.run import run
from grpo_core.training.trainer import GRPOTrainer


def _cfg(**kw) -> TrainParams:
    base = dict(
        steps=1,
        prompts_per_step=8,
        group_size=8,
        max_new_tokens=3,
        lr=3e-2,
        micro_batch_size=32,
        updates_per_batch=2,
    )
    return TrainParams(**{**base, **kw})


@pytest.fixture
def starts_with_7(monkeypatch):
    """A verifiable toy reward: 1 when the completion starts with '7'."""
    monkeypatch.setitem(
        rewards.VERIFIERS, "toy", lambda completion, answer: float(completion[:1] == "7")
    )
    return [Question(f"q{i}", "toy", 1, f"Q: {i}+1=?\nA: ", "7") for i in range(8)]


def test_grpo_raises_the_reward_it_is_given(tokenizer, tiny_model, starts_with_7):
    """The sign and plumbing of the whole loop: rewarded completions become more likely."""
    trainer = GRPOTrainer(tiny_model, tokenizer, _cfg())
    history = []
    run(
        trainer,
        starts_with_7,
        steps=25,
        seed=0,
        on_step=lambda s, m, r: history.append(m["reward"]),
    )
    assert sum(history[:3]) / 3 < 0.2
    assert sum(history[-3:]) / 3 > 0.6


@pytest.mark.parametrize(
    "loss_agg", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"]
)
def test_step_metrics_use_trl_names_and_micro_batches_match_one_batch(
    tokenizer, tiny_model, starts_with_7, loss_agg
):
    states = []
    for micro in (64, 16):  # one pass vs four accumulated micro-batches: same update
        model = type(tiny_model)(tiny_model.config)
        model.load_state_dict(tiny_model.state_dict())
        trainer = GRPOTrainer(
            model, tokenizer, _cfg(micro_batch_size=micro, filter_zero_std=False, loss_agg=loss_agg)
        )
        torch.manual_seed(0)
        sampled = trainer.rollout(starts_with_7)
        ro, rw = sampled.ro, sampled.rewards
        rw[:4] = 1.0  # ensure non-zero advantages
        metrics = trainer.update(ro, rw)
        states.append({k: v.clone() for k, v in model.state_dict().items()})
    for key in states[0]:
        # Adam divides by sqrt(v): on an entry whose gradient is near 0 the rounding of a
        # different accumulation order moves the step by ~lr * 1e-4, hence atol 1e-5.
        torch.testing.assert_close(states[0][key], states[1][key], atol=1e-5, rtol=1e-4)
    for name in (
        "loss",
        "entropy",
        "grad_norm",
        "clip_ratio/low_mean",
        "clip_ratio/high_mean",
        "clip_ratio/region_mean",
    ):
        assert name in metrics


def test_rollout_metrics_and_per_question_rows(tokenizer, tiny_model, starts_with_7):
    trainer = GRPOTrainer(tiny_model, tokenizer, _cfg())
    torch.manual_seed(0)
    metrics, rows = trainer.step(starts_with_7)
    for name in (
        "reward",
        "reward_std",
        "frac_reward_zero_std",
        "completions/mean_length",
        "completions/clipped_ratio",
    ):
        assert name in metrics
    assert [r["id"] for r in rows] == [q.id for q in starts_with_7]
    assert metrics["reward"] == pytest.approx(sum(r["reward_mean"] for r in rows) / len(rows))


def test_lora_with_kl_trains_only_adapters(tokenizer, tiny_model, starts_with_7):
    lora = LoraParams(enabled=True, r=4, alpha=8, target_modules=["q_proj", "v_proj"])
    frozen = {k: v.clone() for k, v in tiny_model.state_dict().items()}
    policy = add_lora(tiny_model, lora)
    trainer = GRPOTrainer(policy, tokenizer, _cfg(kl_coef=0.1, filter_zero_std=False))
    torch.manual_seed(0)
    sampled = trainer.rollout(starts_with_7)
    ro, rw = sampled.ro, sampled.rewards
    rw[:4] = 1.0
    metrics = trainer.update(ro, rw)
    assert metrics["kl"] >= 0
    merged = policy.merge_and_unload().state_dict()
    changed = [k for k in frozen if not torch.equal(frozen[k], merged[k])]
    assert changed and all("q_proj" in k or "v_proj" in k for k in changed)


def test_kl_with_full_reference_is_zero_on_the_first_update(tokenizer, tiny_model, starts_with_7):
    reference = type(tiny_model)(tiny_model.config)
    reference.load_state_dict(tiny_model.state_dict())
    trainer = GRPOTrainer(
        tiny_model,
        tokenizer,
        _cfg(kl_coef=0.5, updates_per_batch=1, filter_zero_std=False),
        reference=reference,
    )
    torch.manual_seed(0)
    sampled = trainer.rollout(starts_with_7)
    ro, rw = sampled.ro, sampled.rewards
    assert trainer.update(ro, rw)["kl"] == pytest.approx(0.0, abs=1e-7)


def test_question_sampler_covers_each_epoch():
    sampler = QuestionSampler(5, seed=0)
    first, second = sampler.next(5), sampler.next(5)
    assert sorted(first) == sorted(second) == [0, 1, 2, 3, 4]
    with pytest.raises(ValueError, match="no training questions"):
        QuestionSampler(0, seed=0)


def test_uniform_groups_take_no_step_but_report_every_metric(tokenizer, tiny_model, starts_with_7):
    """With filter_zero_std (dr_grpo's, and grpo's before issue 16) uniform groups are out of
    the loss: an all-uniform batch has nothing to learn and takes no step. Its KL is still
    logged, from reference forwards of at most train.micro_batch_size sequences."""
    reference = type(tiny_model)(tiny_model.config)
    reference.load_state_dict(tiny_model.state_dict())
    before = {k: v.clone() for k, v in tiny_model.state_dict().items()}
    cfg = _cfg(kl_coef=0.1, filter_zero_std=True, micro_batch_size=24)
    trainer = GRPOTrainer(tiny_model, tokenizer, cfg, reference=reference)
    torch.manual_seed(0)
    ro = trainer.rollout(starts_with_7).ro
    rows_per_forward = []
    hook = reference.register_forward_pre_hook(
        lambda module, args, kwargs: rows_per_forward.append(kwargs["input_ids"].shape[0]),
        with_kwargs=True,
    )
    metrics = trainer.update(ro, torch.zeros(len(ro.texts)))
    hook.remove()
    # The batch's 64 sequences in chunks of 24, 24 and 16 (each after a pass over its
    # distinct prompts, shared by their groups' rows): one pass of 64 before.
    assert rows_per_forward == [3, 24, 3, 24, 2, 16]
    assert metrics["frac_sequences_trained"] == 0.0 and metrics["kl"] == pytest.approx(0.0)
    assert metrics["entropy"] > 0 and metrics["clip_ratio/region_mean"] == 0.0
    assert all(torch.equal(before[k], v) for k, v in tiny_model.state_dict().items())


def test_dynamic_sampling_draws_more_until_groups_are_informative(
    tokenizer, tiny_model, monkeypatch
):
    """'always' questions score 1 whatever is sampled, so their groups carry no signal;
    'digit' questions (reward: the completion starts with a digit, about 1 in 3 for a random
    model) give mixed groups. Dynamic sampling must draw further questions and train only on
    the mixed groups."""
    monkeypatch.setitem(rewards.VERIFIERS, "always", lambda completion, answer: 1.0)
    monkeypatch.setitem(rewards.VERIFIERS, "digit", lambda c, answer: float(c[:1].isdigit()))
    uniform = [Question(f"u{i}", "always", 1, f"Q: {i}+2=?\nA: ", "7") for i in range(4)]
    mixed = [Question(f"m{i}", "digit", 1, f"Q: {i}+3=?\nA: ", "7") for i in range(4)]
    cfg = _cfg(prompts_per_step=4, dynamic_sampling=True, max_sampling_rounds=3)
    trainer = GRPOTrainer(tiny_model, tokenizer, cfg)
    trained = []
    original = trainer.update
    monkeypatch.setattr(
        trainer, "update", lambda ro, rw, **kw: trained.append(rw) or original(ro, rw, **kw)
    )
    torch.manual_seed(0)
    metrics, rows = trainer.step(uniform, more=lambda n: mixed[:n])
    assert metrics["sampling_rounds"] == 2.0
    assert [r["id"] for r in rows] == [q.id for q in uniform + mixed]
    assert metrics["reward"] > 0.5  # the reward metrics cover all sampled groups
    std = trained[0].view(-1, cfg.group_size).std(dim=1)
    assert 0 < len(std) <= cfg.prompts_per_step and (std > 0).all()


def test_overlong_filter_leaves_truncated_completions_out_of_the_loss(
    tokenizer, tiny_model, starts_with_7
):
    torch.manual_seed(0)
    sampled = GRPOTrainer(tiny_model, tokenizer, _cfg()).rollout(starts_with_7)
    ro, rw = sampled.ro, sampled.rewards
    ro.truncated = torch.ones_like(ro.truncated)  # as if every completion hit max_new_tokens
    rw[:4] = 1.0
    for overlong_filter, trained in ((True, False), (False, True)):
        model = type(tiny_model)(tiny_model.config)
        model.load_state_dict(tiny_model.state_dict())
        cfg = _cfg(overlong_filter=overlong_filter, filter_zero_std=False)
        metrics = GRPOTrainer(model, tokenizer, cfg).update(ro, rw)
        changed = any(
            not torch.equal(v, model.state_dict()[k]) for k, v in tiny_model.state_dict().items()
        )
        assert changed == trained
        assert metrics["frac_sequences_trained"] == (1.0 if trained else 0.0)


@pytest.mark.parametrize("guarded", [False, True])
def test_codapo_reweights_advantages_and_trains_the_selected_questions_next(
    tokenizer, tiny_model, monkeypatch, guarded
):
    """Step 0 weighs each question's advantages by its value and selects; step 1 trains the
    selection. The reference: every question at or above the 0.75-quantile, in batch order,
    in blocks of `copies` cycled until the batch is full. With the guards of the former
    default (learnable_only, best_first, fresh_fill): the learnable ones, best first,
    `copies` each, the rest of the batch fresh."""
    from grpo_core.config.train import CodapoParams

    # Rewards by the completion's length parity: a mix of learnable and uniform groups.
    monkeypatch.setitem(rewards.VERIFIERS, "half", lambda c, answer: float(len(c) % 2 == 0))
    questions = [Question(f"q{i}", "half", 1, f"Q: {i}+4=?\nA: ", "7") for i in range(16)]
    guards = dict(learnable_only=True, best_first=True, fresh_fill=True) if guarded else {}
    codapo = CodapoParams(enabled=True, quantile=0.75, copies=2, **guards)
    trainer = GRPOTrainer(tiny_model, tokenizer, _cfg(prompts_per_step=8, codapo=codapo))
    seen = []
    original = trainer.update
    monkeypatch.setattr(
        trainer, "update", lambda ro, rw, **kw: seen.append(kw) or original(ro, rw, **kw)
    )
    fresh = iter(questions)

    def draw(n):
        return [next(fresh) for _ in range(n)]

    torch.manual_seed(0)
    metrics, rows = trainer.step(trainer.next_batch(draw, 0))
    values = torch.tensor([r["value"] for r in rows])
    conf = torch.tensor([r["confidence"] for r in rows])
    diff = torch.tensor([r["difficulty"] for r in rows])
    torch.testing.assert_close(values, conf * 4 * diff * (1 - diff) + 0.1)
    torch.testing.assert_close(seen[0]["adv_weights"], values.repeat_interleave(8))
    assert metrics["codapo/value_mean"] == pytest.approx(float(values.mean()))
    top = values >= torch.quantile(values, 0.75)
    if guarded:
        top = top & (diff > 0) & (diff < 1)
    chosen = torch.nonzero(top).flatten().tolist()
    assert chosen and metrics["codapo/selected_questions"] == len(chosen)
    ids = [q.id for q in questions[:8]]
    if guarded:  # best first, 2 groups each, then fresh questions
        chosen.sort(key=lambda i: -float(values[i]))
        expected = [ids[i] for i in chosen for _ in range(2)]
        expected += [q.id for q in questions[8 : 16 - len(expected)]]
    else:  # batch order, blocks of 2, cycled to 8; no fresh question
        expected = [ids[chosen[k % len(chosen)]] for k in range(4) for _ in range(2)]
    batch = trainer.next_batch(draw, 1)
    assert [q.id for q in batch] == expected
    metrics, rows = trainer.step(batch)
    num_resampled = 2 * len(chosen) if guarded else 8
    assert metrics["codapo/resampled_questions"] == num_resampled
    assert [r["resampled"] for r in rows] == [True] * num_resampled + [False] * (8 - num_resampled)
    assert len(seen[1]["adv_weights"]) == 64  # the value weighting applies on odd steps too
    # Odd steps select nothing.
    assert trainer.resample_queue == [] and metrics["codapo/selected_questions"] == 0


def test_the_training_reward_is_the_weighted_sum_and_each_component_is_logged(
    tokenizer, tiny_model, starts_with_7
):
    from grpo_core.config.reward import RewardParams
    from grpo_core.rewards.shaping import overlong_penalty

    # max_new_tokens 3, cache 2: a 2-token completion gets -1/2, a 3-token one -1.
    reward = RewardParams(
        weights={"correct": 1.0, "format": 0.5, "overlong": 2.0}, overlong_cache=2
    )
    trainer = GRPOTrainer(tiny_model, tokenizer, _cfg(), reward=reward)
    torch.manual_seed(0)
    sampled = trainer.rollout(starts_with_7)
    parts = sampled.components
    assert set(parts) == {"correct", "format", "overlong"}
    expected_correct = [float(t[:1] == "7") for t in sampled.ro.texts]
    assert parts["correct"].tolist() == expected_correct
    assert parts["format"].tolist() == [0.0] * len(expected_correct)  # "toy" has no format
    torch.testing.assert_close(parts["overlong"], overlong_penalty(sampled.ro.lengths, 3, 2))
    torch.testing.assert_close(sampled.rewards, parts["correct"] + 2.0 * parts["overlong"])
    # what solves a question is the verifier's reward alone, never the shaped total
    assert sampled.solved.tolist() == [c == 1.0 for c in expected_correct]

    metrics, rows = trainer.step(starts_with_7)
    for name in ("correct", "format", "overlong"):
        assert f"rewards/{name}/mean" in metrics and f"rewards/{name}/std" in metrics
    assert all(0.0 <= r["difficulty"] <= 1.0 for r in rows)


class _FixedNextToken(torch.nn.Module):
    """A 'language model' over a vocabulary of 2 whose next-token logits are `bias` at every
    position: its distribution at temperature T is softmax(bias / T)."""

    is_gradient_checkpointing = True  # no shared prompt pass (it has no KV cache)

    def __init__(self, bias: list[float]):
        super().__init__()
        self.bias = torch.nn.Parameter(torch.tensor(bias))

    def forward(self, input_ids, **kw):
        from types import SimpleNamespace

        return SimpleNamespace(logits=self.bias.expand(*input_ids.shape, -1))


def _two_token_rollouts(rows: int = 4, prompt: int = 1, completion: int = 3):
    from grpo_core.rollout.rollouts import Rollouts

    ids = torch.randint(
        0, 2, (rows, prompt + completion), generator=torch.Generator().manual_seed(0)
    )
    return Rollouts(
        input_ids=ids,
        attention_mask=torch.ones_like(ids),
        completion_mask=torch.ones(rows, completion, dtype=torch.long),
        prompt_len=prompt,
        texts=[""] * rows,
        truncated=torch.zeros(rows, dtype=torch.bool),
    )


def _entropy_update(coef: float):
    """One update of the fixed-distribution model with equal rewards (zero advantages, kept in
    the loss), at temperature 0.5 with logits (ln 3 / 2, 0): p = softmax(ln 3, 0) = (3/4, 1/4).
    Returns the step metrics and the model."""
    model = _FixedNextToken([0.5 * math.log(3), 0.0])
    cfg = _cfg(
        group_size=2,
        temperature=0.5,
        updates_per_batch=1,
        filter_zero_std=False,
        entropy_coef=coef,
        lr=0.1,
        warmup_steps=0,
    )
    trainer = GRPOTrainer(model, None, cfg)
    return trainer.update(_two_token_rollouts(), torch.ones(4)), model


def _entropy_of(model: _FixedNextToken, temperature: float = 0.5) -> float:
    p = torch.softmax(model.bias.detach() / temperature, -1)
    return float(-(p * p.log()).sum())


def test_the_entropy_bonus_is_the_policys_entropy_at_the_sampling_temperature():
    # By hand: H(3/4, 1/4) = -(3/4) ln(3/4) - (1/4) ln(1/4) = ln 4 - (3/4) ln 3.
    h = math.log(4) - 0.75 * math.log(3)
    metrics, _ = _entropy_update(0.01)
    assert metrics["entropy"] == pytest.approx(h, rel=1e-6)
    # Zero advantages: the loss is the bonus alone, -coef x the token-mean entropy.
    assert metrics["loss"] == pytest.approx(-0.01 * h, rel=1e-6)
    assert _entropy_update(0.0)[0]["loss"] == 0.0


def test_the_entropy_bonus_raises_entropy_and_is_not_computed_when_off(monkeypatch):
    from grpo_core.training import update

    h = math.log(4) - 0.75 * math.log(3)
    _, model = _entropy_update(0.01)
    assert _entropy_of(model) > h + 1e-3  # the step moved the policy toward uniform
    calls = []
    original = update.token_logprobs
    monkeypatch.setattr(
        update, "token_logprobs", lambda *a, **kw: calls.append(kw) or original(*a, **kw)
    )
    _, model = _entropy_update(0.0)
    assert calls and not any(kw.get("with_entropy") for kw in calls)  # the same update as before
    torch.testing.assert_close(model.bias.detach(), torch.tensor([0.5 * math.log(3), 0.0]))


def test_update_weights_are_advantage_times_ratio_where_not_clipped():
    """Hand case: clip 0.2. Token 1: A=+1, rho=1.5 > 1.2 -> clipped, 0. Token 2: A=+1,
    rho=0.5 -> unclipped (the min is rho*A), 0.5. Token 3: A=-2, rho=0.5 < 0.8 -> clipped, 0.
    Token 4: A=-2, rho=1.1 -> -2.2; with dual clip c=3, rho=4 -> bounded, 0."""
    from grpo_core.algorithms.losses import clipped_surrogate
    from grpo_core.training.update import update_weights

    ratio = torch.tensor([[1.5, 0.5], [0.5, 1.1]])
    adv = torch.tensor([1.0, -2.0])
    out = clipped_surrogate(ratio.log(), torch.zeros(2, 2), adv, 0.2, 0.2)
    torch.testing.assert_close(update_weights(out, adv, None), torch.tensor([[0, 0.5], [0, -2.2]]))
    # The weight is the gradient of the loss with respect to log pi, with the sign flipped.
    logp = ratio.log().requires_grad_()
    clipped_surrogate(logp, torch.zeros(2, 2), adv, 0.2, 0.2).per_token.sum().backward()
    torch.testing.assert_close(-logp.grad, update_weights(out, adv, None))
    ratio = torch.tensor([[1.0, 4.0]])
    adv = torch.tensor([-2.0])
    out = clipped_surrogate(ratio.log(), torch.zeros(1, 2), adv, 0.2, 0.2, dual_clip=3.0)
    torch.testing.assert_close(update_weights(out, adv, 3.0), torch.tensor([[-2.0, 0.0]]))


def test_log_rows_report_the_update_weight_of_each_trained_group(
    tokenizer, tiny_model, starts_with_7, monkeypatch
):
    """One update at the rollout weights: rho = 1, nothing clipped, so a group's weight per
    token is its advantages averaged over its completion tokens."""
    from grpo_core.algorithms.advantages import get_advantage

    # A reward that varies within groups: the parity of the completion's characters.
    monkeypatch.setitem(rewards.VERIFIERS, "toy", lambda c, a: float(sum(map(ord, c)) % 2))
    cfg = _cfg(updates_per_batch=1)
    trainer = GRPOTrainer(tiny_model, tokenizer, cfg)
    torch.manual_seed(0)
    sampled = trainer.rollout(starts_with_7)
    torch.manual_seed(0)  # the same rollouts again inside step()
    metrics, rows = trainer.step(starts_with_7)
    adv = get_advantage(cfg.advantage)(sampled.rewards, 8, epsilon=cfg.adv_epsilon)
    tokens = sampled.ro.completion_mask.sum(1)
    for i, row in enumerate(rows):
        a, n = adv[i * 8 : (i + 1) * 8], tokens[i * 8 : (i + 1) * 8]
        if not row["trained"]:
            assert row["update_weight_abs"] is None and row["clip_frac"] is None
            continue
        assert row["update_weight_abs"] == pytest.approx(float((a.abs() * n).sum() / n.sum()))
        assert row["update_weight_mean"] == pytest.approx(float((a * n).sum() / n.sum()), abs=1e-6)
        assert row["clip_frac"] == 0.0
    assert any(r["trained"] for r in rows)
    assert metrics["update_weight/abs_mean"] > 0


def _linear_layers(policy) -> set[str]:
    return {
        n.split("model.layers.")[1].split(".lora_A")[0]
        for n, _ in policy.named_parameters()
        if "lora_A" in n
    }


@pytest.mark.parametrize(
    "kw, expected",
    [
        (
            dict(target_modules="attention"),
            {
                "0.self_attn.q_proj",
                "0.self_attn.k_proj",
                "0.self_attn.v_proj",
                "0.self_attn.o_proj",
            },
        ),
        (dict(target_modules="mlp"), {"0.mlp.gate_proj", "0.mlp.up_proj", "0.mlp.down_proj"}),
        (dict(target_modules=["v_proj"], layers=[1]), {"1.self_attn.v_proj"}),
        (
            dict(target_modules="all-linear", layers="1-1"),
            {
                "1.self_attn.q_proj",
                "1.self_attn.k_proj",
                "1.self_attn.v_proj",
                "1.self_attn.o_proj",
                "1.mlp.gate_proj",
                "1.mlp.up_proj",
                "1.mlp.down_proj",
            },
        ),
    ],
)
def test_lora_targets_and_layers(tokenizer, kw, expected):
    from grpo_core.models.tiny import build_tiny_model

    two = TinyModelParams(hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64)
    policy = add_lora(build_tiny_model(tokenizer, two, seed=0), LoraParams(enabled=True, **kw))
    layers = _linear_layers(policy)
    if kw.get("layers") is None:
        assert layers == expected | {e.replace("0.", "1.", 1) for e in expected}
    else:
        assert layers == expected


@pytest.mark.parametrize(
    "kw, message",
    [
        (dict(target_modules=["c_attn"]), "train.lora.target_modules.*no linear module"),
        (dict(layers=[4]), r"train.lora.layers=\[4\]: the model has 1 layers"),
    ],
)
def test_lora_targets_the_model_lacks_are_named(tiny_model, kw, message):
    from grpo_core.errors import InputError

    with pytest.raises(InputError, match=message):
        add_lora(tiny_model, LoraParams(enabled=True, **kw))


def test_a_run_resumed_from_its_state_ends_where_an_unbroken_run_ends(
    tokenizer, tiny_model, starts_with_7
):
    """Stop after 3 of 4 steps, rebuild everything from the saved weights and state dicts,
    continue: the weights match an unbroken 4-step run bit for bit. CoDaPO: step 2 (even)
    selected the batch of step 3 (odd), so its queue and the step's parity are part of the
    state; with the preset's entropy bonus and dual clip."""
    import copy

    cfg = _cfg(steps=4, codapo={"enabled": True}, entropy_coef=0.001, dual_clip=3.0)
    unbroken = copy.deepcopy(tiny_model)
    run(GRPOTrainer(unbroken, tokenizer, cfg), starts_with_7, steps=4, seed=3)

    first = copy.deepcopy(tiny_model)
    trainer, sampler = GRPOTrainer(first, tokenizer, cfg), QuestionSampler(8, 3)
    run(trainer, starts_with_7, steps=3, seed=3, sampler=sampler)
    assert len(trainer.resample_queue) == 8  # the odd step's batch, all selected questions
    weights = {k: v.clone() for k, v in first.state_dict().items()}
    state, sampler_state = copy.deepcopy(trainer.state_dict()), sampler.state_dict()
    del first, trainer, sampler

    second = copy.deepcopy(tiny_model)
    second.load_state_dict(weights)
    trainer, sampler = GRPOTrainer(second, tokenizer, cfg), QuestionSampler(8, 3)
    trainer.load_state_dict(state, starts_with_7)
    sampler.load_state_dict(sampler_state)
    run(trainer, starts_with_7, steps=4, seed=3, sampler=sampler, start=3)
    for key, value in unbroken.state_dict().items():
        assert torch.equal(value, second.state_dict()[key]), key
    assert not torch.equal(value, tiny_model.state_dict()[key])  # it did train


def test_sampler_state_must_match_the_question_pool():
    state = QuestionSampler(5, seed=0).state_dict()
    with pytest.raises(ValueError, match="for 5 questions, not 6"):
        QuestionSampler(6, seed=0).load_state_dict(state)


def test_dapo_informative_groups_are_those_both_solved_and_failed():
    """DAPO eq. 11 counts correct answers, not distinct rewards: an all-correct group whose
    overlong punishment makes its rewards differ is not informative."""
    from grpo_core.training.trainer import mixed_accuracy

    solved = torch.tensor([1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0], dtype=torch.bool)
    assert mixed_accuracy(solved, 4).tolist() == [False, True, False]


def test_the_rollout_budget_ends_the_run_after_the_step_that_reaches_it(
    tokenizer, tiny_model, starts_with_7
):
    """`train.max_rollouts`: 8 questions x G 8 = 64 rollouts a step, so a budget of 100 is
    reached after the second of 5 steps (64, 128); `run` stops when `on_step` says so."""
    from grpo_core.training.run import budget_spent

    assert not budget_spent([{"num_rollouts": 64.0}], 100)
    assert budget_spent([{"num_rollouts": 64.0}, {"num_rollouts": 64.0}], 100)
    assert budget_spent([{"num_rollouts": 100.0}], 100)  # reaching it is enough
    assert not budget_spent([{"num_rollouts": 1e9}], None)

    history: list[dict] = []

    def on_step(step, metrics, rows):
        history.append(metrics)
        return budget_spent(history, 100)

    trainer = GRPOTrainer(tiny_model, tokenizer, _cfg(steps=5, max_rollouts=100))
    run(trainer, starts_with_7, steps=5, seed=0, on_step=on_step)
    assert [m["num_rollouts"] for m in history] == [64.0, 64.0]
