"""The warm start and its calibration: SFT that stops when a held-out probe reaches a target."""

import numpy as np
import pytest
import torch

from grpo_core.config.model import SFTParams, SFTStop, TinyModelParams
from grpo_core.data.prompts import guide_wording, hinted_prompt
from grpo_core.data.tiny import arith
from grpo_core.errors import InputError
from grpo_core.models import sft as sft_module
from grpo_core.models.sft import (
    Probe,
    drop_answer_lines,
    hold_out_probe,
    level_mixture,
    warm_start,
)
from grpo_core.models.tiny import build_char_tokenizer, build_tiny_model
from grpo_core.rewards.verify import verify_batch
from grpo_core.rollout.sampler import generate

SMALL = TinyModelParams(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64)


def _level1(n: int = 100, seed: int = 0) -> list[dict]:
    return arith.generate_level(1, n, 0, seed)["train"]


def _setup(rows, guided: bool = False):
    """A tokenizer and a model for `rows`; `guided`: the tokenizer spells hinted prompts too."""
    prompts = [r["prompt"] for r in rows]
    wording = guide_wording(prompts) if guided else []
    tok = build_char_tokenizer(prompts + [r["solution"] for r in rows] + wording)
    return tok, build_tiny_model(tok, SMALL, seed=0)


def _probe(rows, stop: SFTStop, seed: int = 0) -> Probe:
    return Probe(
        [r["prompt"] for r in rows],
        [r["answer"] for r in rows],
        [r["domain"] for r in rows],
        stop,
        seed,
    )


def _warm(model, tok, rows, sft: SFTParams, probe: Probe | None = None):
    """`warm_start` on level-1 rows."""
    prompts = [r["prompt"] for r in rows]
    targets = [r["solution"] for r in rows]
    levels = np.ones(len(rows), dtype=int)
    return warm_start(model, tok, prompts, targets, levels, sft, seed=0, probe=probe)


def test_level_mixture_gives_each_level_its_weight_in_total():
    levels = np.array([1, 1, 1, 2])  # level 1: 3 rows, level 2: 1 row
    p = level_mixture(levels, [1.0, 0.5])
    # level 1 has weight 1 spread over 3 rows, level 2 weight 0.5 on its one row
    np.testing.assert_allclose(p, [2 / 9, 2 / 9, 2 / 9, 1 / 3])


def test_the_probe_is_held_out_at_its_level_and_fixed_by_the_seed():
    levels = np.array([1, 2, 2, 2, 2, 3, 2, 2])
    stop = SFTStop(level=2, questions=3)
    held = hold_out_probe(levels, stop, seed=0)
    assert len(held) == 3 and set(levels[held]) == {2}
    np.testing.assert_array_equal(held, hold_out_probe(levels, stop, seed=0))
    picks = {tuple(hold_out_probe(levels, stop, seed=s)) for s in range(10)}
    assert len(picks) > 1  # another seed, another probe


def test_a_probe_that_would_take_the_whole_level_is_refused_by_name():
    levels = np.array([1, 1, 2, 2])
    with pytest.raises(InputError, match=r"model\.sft\.stop: .* 2 questions at level 2"):
        hold_out_probe(levels, SFTStop(level=2, questions=2), seed=0)
    with pytest.raises(InputError, match=r"0 questions at level 4"):
        hold_out_probe(levels, SFTStop(level=4, questions=1), seed=0)


def test_probe_accuracy_is_the_mean_reward_of_its_samples_and_leaves_the_rng_alone():
    rows = _level1(8)
    tok, model = _setup(rows)
    model.train()
    stop = SFTStop(level=1, questions=8, samples=3, max_new_tokens=12)
    probe = _probe(rows, stop, seed=5)
    torch.manual_seed(123)
    state = torch.random.get_rng_state()
    acc = probe.accuracy(model, tok)
    assert torch.equal(torch.random.get_rng_state(), state)
    assert model.training  # put back as it was
    assert probe.accuracy(model, tok) == acc  # its own random stream: the same draw again
    # The same completions, drawn directly: their verifier rewards average to `acc`.
    model.eval()
    with torch.random.fork_rng():
        torch.manual_seed(5)
        ro = generate(model, tok, probe.prompts, 3, 1.0, 12)
    owners = [i // 3 for i in range(len(ro.texts))]
    rewards = verify_batch(["math"] * len(owners), ro.texts, [probe.answers[i] for i in owners])
    assert acc == pytest.approx(np.mean(rewards))


def test_an_unreachable_target_runs_every_step_and_checks_on_schedule():
    rows = _level1(20)
    tok, model = _setup(rows)
    stop = SFTStop(
        level=1, accuracy=1.0, first=3, every=4, questions=4, samples=1, max_new_tokens=8
    )
    sft = SFTParams(
        steps=10, batch_size=4, warmup_steps=1, level_weights=[1.0], stop=stop, guided_batch_size=0
    )
    out = _warm(model, tok, rows, sft, _probe(rows[:4], stop))
    assert out.steps == 10 and out.reached is False
    assert [c["step"] for c in out.checks] == [3, 7, 10]  # first, every 4, and the last
    assert all(c["accuracy"] < 1.0 for c in out.checks)


def test_sft_stops_at_the_first_check_that_reaches_the_target():
    rows = _level1(100)
    probe_rows, train = rows[:16], rows[16:]
    tok, model = _setup(rows)
    stop = SFTStop(
        level=1, accuracy=0.03, first=10, every=10, questions=16, samples=4, max_new_tokens=16
    )
    # Unguided, as the warm start was when this schedule and target were picked: 200 steps of
    # this model reach only a few percent on level 1 (0 to step 60, 1.6% to step 90, 3.1% at
    # step 100, 4.7% at 200: boxed answers only; a malformed box scored by math-verify's
    # fallback once counted too), so the target sits close to the curve.
    sft = SFTParams(
        steps=200,
        batch_size=16,
        warmup_steps=5,
        level_weights=[1.0],
        stop=stop,
        guided_batch_size=0,
    )
    out = _warm(model, tok, train, sft, _probe(probe_rows, stop))
    assert out.reached is True
    *before, last = out.checks
    assert last["accuracy"] >= 0.03 and all(c["accuracy"] < 0.03 for c in before)
    assert out.steps == last["step"] < 200  # stopped there, long before the last step
    assert [c["step"] for c in out.checks] == list(range(10, out.steps + 1, 10))
    assert not model.training
    # The model handed back is the one the last check measured.
    assert _probe(probe_rows, stop).accuracy(model, tok) == last["accuracy"]


def test_without_a_target_sft_runs_its_steps_and_checks_nothing():
    rows = _level1(20)
    tok, model = _setup(rows)
    sft = SFTParams(
        steps=3, batch_size=4, warmup_steps=1, level_weights=[1.0], stop=None, guided_batch_size=0
    )
    out = _warm(model, tok, rows, sft)
    assert out.steps == 3 and out.checks == [] and out.reached is None


def test_the_curves_are_one_row_per_step_and_per_check(tmp_path):
    from grpo_core.models.sft import WarmStart

    run = WarmStart(losses=[2.5, 1.25, 0.5], checks=[{"step": 2, "accuracy": 0.125}], reached=True)
    run.write_curves(tmp_path / "sft", target=0.2)
    assert (tmp_path / "sft/loss.csv").read_text() == "step,loss\n1,2.5\n2,1.25\n3,0.5\n"
    assert (tmp_path / "sft/probe.csv").read_text() == "step,accuracy,target\n2,0.125,0.2\n"
    WarmStart().write_curves(tmp_path / "none", target=None)  # a hub model: headers only
    assert (tmp_path / "none/loss.csv").read_text() == "step,loss\n"
    assert (tmp_path / "none/probe.csv").read_text() == "step,accuracy,target\n"


# --- guided examples ----------------------------------------------------------------------------


def _batches(monkeypatch, rows, sft: SFTParams) -> list[tuple[list[str], list[str]]]:
    """The (prompts, targets) of every SFT batch of a warm start on level-1 rows."""
    seen = []
    real = sft_module.sft_batch

    def record(tokenizer, prompts, targets):
        seen.append((list(prompts), list(targets)))
        return real(tokenizer, prompts, targets)

    monkeypatch.setattr(sft_module, "sft_batch", record)
    tok, model = _setup(rows, guided=True)
    _warm(model, tok, rows, sft)
    return seen


def _unguided_batches(rows, sft: SFTParams) -> list[tuple[list[str], list[str]]]:
    """The batches as the warm start drew them before any was guided: indices from the seeded
    rng alone, by the level mixture."""
    rng = np.random.default_rng(0)  # `_warm`'s seed
    probs = level_mixture(np.ones(len(rows), dtype=int), sft.level_weights)
    out = []
    for _ in range(sft.steps):
        idx = rng.choice(len(rows), size=sft.batch_size, p=probs)
        out.append(([rows[i]["prompt"] for i in idx], [rows[i]["solution"] for i in idx]))
    return out


def _sft(guided: int, **kw) -> SFTParams:
    return SFTParams(
        steps=4,
        batch_size=8,
        warmup_steps=1,
        level_weights=[1.0],
        stop=None,
        guided_batch_size=guided,
        **{"guided_level_weights": [1.0], **kw},
    )


def test_guided_params_default_to_32_extra_examples_of_levels_4_5_at_the_papers_fractions():
    sft = SFTParams()
    assert sft.guided_batch_size == 32 and sft.guided_level_weights == [0, 0, 0, 1.0, 1.0]
    assert sft.guided_fractions == [0.2, 0.4, 0.6, 0.8, 1.0]
    SFTParams(guided_batch_size=0)  # allowed: no guided example
    with pytest.raises(ValueError):
        SFTParams(guided_batch_size=-1)
    with pytest.raises(ValueError):
        SFTParams(guided_fractions=[0.6, 0.2])


def test_guided_examples_come_after_the_unguided_batch_with_a_hinted_prompt(monkeypatch):
    rows = _level1(40)
    fractions = [0.2, 0.6, 1.0]
    sft = _sft(4, guided_fractions=fractions)
    seen = _batches(monkeypatch, rows, sft)
    plain = _unguided_batches(rows, sft)
    assert len(seen) == sft.steps
    by_prompt = {r["prompt"]: r["solution"] for r in rows}
    used = set()
    for (prompts, targets), (plain_prompts, plain_targets) in zip(seen, plain, strict=True):
        # the unguided examples are exactly those of a warm start without guided ones
        assert prompts[:8] == plain_prompts and targets[:8] == plain_targets
        assert len(prompts) == len(targets) == 8 + 4
        for prompt, target in zip(prompts[8:], targets[8:], strict=True):
            head, _, _ = prompt.partition("\nH: ")
            plain_prompt = head + "\nA: "
            assert by_prompt[plain_prompt] == target  # the whole solution is the target
            matches = [f for f in fractions if hinted_prompt(plain_prompt, target, f) == prompt]
            assert matches, f"{prompt!r} is not a hinted prompt of {plain_prompt!r}"
            used.update(matches)
    assert len(used) >= 2  # the fractions vary between examples


def test_no_guided_examples_draws_exactly_the_unguided_batches(monkeypatch):
    rows = _level1(40)
    sft = _sft(0)
    assert _batches(monkeypatch, rows, sft) == _unguided_batches(rows, sft)


def test_guided_examples_follow_their_own_level_mixture():
    rows = _level1(10) + arith.generate_level(5, 10, 0, 0)["train"]
    levels = np.array([r["level"] for r in rows])
    # all the weight on level 5: every guided example is a level-5 one, whatever level_weights
    probs = level_mixture(levels, [0.0, 0.0, 0.0, 0.0, 1.0])
    sft = SFTParams(guided_batch_size=32, level_weights=[1.0, 0, 0, 0, 0], guided_fractions=[1.0])
    prompts, targets, fractions = sft_module.guided_examples(
        [r["prompt"] for r in rows],
        [r["solution"] for r in rows],
        probs,
        sft,
        np.random.default_rng(0),
    )
    level5 = {r["solution"] for r in rows if r["level"] == 5}
    assert len(prompts) == 32 and set(targets) <= level5 and fractions == [1.0] * 32
    with pytest.raises(InputError, match="model.sft.guided_level_weights"):
        level_mixture(levels, [1.0], "model.sft.guided_level_weights")


def test_drop_answer_lines_removes_the_last_line_of_a_seeded_fraction():
    targets = [f"7+8=15\n4+3+1=8\n\\boxed{{{i}}}" for i in range(1000)] + ["one line"]
    out = drop_answer_lines(targets, 0.9, seed=0)
    dropped = [o == "7+8=15\n4+3+1=8" for o in out[:-1]]
    kept = [o == t for o, t in zip(out[:-1], targets[:-1], strict=True)]
    assert all(d != k for d, k in zip(dropped, kept, strict=True))  # whole, or its last line gone
    assert 0.87 < sum(dropped) / 1000 < 0.93
    assert out[-1] == "one line"  # nothing to drop
    assert out == drop_answer_lines(targets, 0.9, seed=0)  # the seed decides
    assert out != drop_answer_lines(targets, 0.9, seed=1)
    assert drop_answer_lines(targets, 0.0, seed=0) == targets
