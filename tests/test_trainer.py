import pytest
import torch

from grpo_core import rewards
from grpo_core.config import LoraParams, TrainParams
from grpo_core.trainer import GRPOTrainer, Question, QuestionSampler, add_lora, run


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
        rewards.REWARDS, "toy", lambda completion, answer: float(completion[:1] == "7")
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
        ro, rw = trainer.rollout(starts_with_7)
        rw[:4] = 1.0  # ensure non-zero advantages
        metrics = trainer.update(ro, rw)
        states.append({k: v.clone() for k, v in model.state_dict().items()})
    for key in states[0]:
        torch.testing.assert_close(states[0][key], states[1][key], atol=1e-6, rtol=1e-4)
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
    ro, rw = trainer.rollout(starts_with_7)
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
    ro, rw = trainer.rollout(starts_with_7)
    assert trainer.update(ro, rw)["kl"] == pytest.approx(0.0, abs=1e-7)


def test_question_sampler_covers_each_epoch():
    sampler = QuestionSampler(5, seed=0)
    first, second = sampler.next(5), sampler.next(5)
    assert sorted(first) == sorted(second) == [0, 1, 2, 3, 4]
    with pytest.raises(ValueError, match="no training questions"):
        QuestionSampler(0, seed=0)


def test_uniform_groups_take_no_step_but_report_every_metric(tokenizer, tiny_model, starts_with_7):
    reference = type(tiny_model)(tiny_model.config)
    reference.load_state_dict(tiny_model.state_dict())
    before = {k: v.clone() for k, v in tiny_model.state_dict().items()}
    trainer = GRPOTrainer(tiny_model, tokenizer, _cfg(kl_coef=0.1), reference=reference)
    torch.manual_seed(0)
    ro, _ = trainer.rollout(starts_with_7)
    metrics = trainer.update(ro, torch.zeros(len(ro.texts)))
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
    monkeypatch.setitem(rewards.REWARDS, "always", lambda completion, answer: 1.0)
    monkeypatch.setitem(rewards.REWARDS, "digit", lambda c, answer: float(c[:1].isdigit()))
    uniform = [Question(f"u{i}", "always", 1, f"Q: {i}+2=?\nA: ", "7") for i in range(4)]
    mixed = [Question(f"m{i}", "digit", 1, f"Q: {i}+3=?\nA: ", "7") for i in range(4)]
    cfg = _cfg(prompts_per_step=4, dynamic_sampling=True, max_sampling_rounds=3)
    trainer = GRPOTrainer(tiny_model, tokenizer, cfg)
    trained = []
    original = trainer.update
    monkeypatch.setattr(trainer, "update", lambda ro, rw: trained.append(rw) or original(ro, rw))
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
    ro, rw = GRPOTrainer(tiny_model, tokenizer, _cfg()).rollout(starts_with_7)
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
