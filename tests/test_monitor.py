"""Runs that cannot learn say so (grpo_core.training.monitor), and a Ctrl-C in training says
where it stopped (grpo_core.training.run.train_policy raising `Interrupted`)."""

import copy
import logging
from pathlib import Path

import pytest
import torch

from grpo_core.config.train import TrainParams, TrainStage
from grpo_core.data.tiny import arith
from grpo_core.errors import Interrupted
from grpo_core.training.batch import Question
from grpo_core.training.monitor import RunMonitor, run_summary
from grpo_core.training.run import Progress, train_policy

CFG = TrainParams(prompts_per_step=4, group_size=4, max_new_tokens=2)


def _step(clipped=0.5, zero_std=0.5, reward=0.25, correct=0.25, trained=1.0) -> dict:
    """A step's metrics with TRL's names: 4 questions x G 4 = 16 rollouts."""
    return {
        "reward": reward,
        "rewards/correct/mean": correct,
        "completions/clipped_ratio": clipped,
        "frac_reward_zero_std": zero_std,
        "frac_sequences_trained": trained,
        "num_rollouts": 16.0,
    }


CLIPPED = _step(clipped=1.0, reward=0.0, correct=0.0)
UNIFORM = _step(zero_std=1.0, reward=0.0, correct=0.0)


def _watch(steps: list[dict], cfg: TrainParams = CFG, finish: bool = True) -> list[str]:
    monitor = RunMonitor(cfg)
    for m in steps:
        monitor.observe(m)
    if finish:
        monitor.finish()
    return monitor.warnings


def test_three_clipped_steps_in_a_row_warn_once_with_their_numbers():
    """Steps 0-1 clipped, 2 not, 3-7 clipped: the streak of 3 is reached at step 5, and steps
    6-7 add nothing (once per run). 3 steps x 16 = 48 completions, mean reward 0."""
    steps = [CLIPPED, CLIPPED, _step(), *[CLIPPED] * 5]
    assert _watch(steps) == [
        "steps 3-5: all 48 completions reached train.max_new_tokens=2 (clipped ratio 1.0, mean "
        "reward 0.000): every answer was cut off before its end: raise train.max_new_tokens"
    ]
    assert _watch(steps[:5]) == []  # steps 3-4: a streak of 2 in a run of 5


def test_the_clipped_warning_names_the_overlong_filter_when_it_drops_every_completion():
    cfg = CFG.model_copy(update={"overlong_filter": True})
    (line,) = _watch([CLIPPED] * 3, cfg)
    assert line.endswith(
        "every answer was cut off before its end and train.overlong_filter leaves all of them "
        "out of the loss: raise train.max_new_tokens"
    )


def test_five_uniform_steps_in_a_row_warn_once_with_advice_by_accuracy():
    """Four uniform steps, one informative, then five: the warning spans steps 5-9, 5 x 16 / 4
    = 20 groups; the advice follows rewards/correct/mean."""
    steps = [*[UNIFORM] * 4, _step(), *[UNIFORM] * 6]
    assert _watch(steps) == [
        "steps 5-9: all 20 groups (4 completions each) had equal rewards "
        "(frac_reward_zero_std 1.0, mean reward 0.000): no completion has an advantage, so "
        "nothing is learned: the policy solves none of its questions: train easier ones "
        "(train.curriculum: learnable or easy) or give it room (train.max_new_tokens)"
    ]
    solved = _step(zero_std=1.0, reward=1.0, correct=1.0)
    assert _watch([solved] * 5)[0].endswith(
        "mean reward 1.000): no completion has an advantage, so nothing is learned: the policy "
        "solves all of its questions: train harder ones (train.curriculum)"
    )
    # Half the groups all right, half all wrong: uniform, yet not one way.
    mixed = _step(zero_std=1.0, reward=0.5, correct=0.5)
    assert _watch([mixed] * 5)[0].endswith(
        "sample more varied groups (train.group_size, train.temperature)"
    )


def test_a_run_shorter_than_the_streak_warns_at_its_end_when_every_step_held():
    """Two steps, both clipped and uniform: nothing while running (streaks of 3 and 5), both
    warnings when it ends, clipped first. A run whose last steps alone held does not warn."""
    both = _step(clipped=1.0, zero_std=1.0, reward=0.0, correct=0.0)
    assert _watch([both] * 2, finish=False) == []
    clipped, uniform = _watch([both] * 2)
    assert clipped.startswith("steps 0-1: all 32 completions reached train.max_new_tokens=2")
    assert uniform.startswith("steps 0-1: all 8 groups (4 completions each) had equal rewards")
    assert _watch([both])[0].startswith("step 0: all 16 completions")
    assert _watch([_step(), both, both]) == []


def test_a_resumed_monitor_replays_its_history_and_warns_as_an_unbroken_one(caplog):
    """Stopped after step 1 (of a clipped streak): the replay continues the streak, so the
    resumed run warns at step 2 as the unbroken one does, and logs each warning once."""
    steps = [CLIPPED] * 4
    resumed = RunMonitor(CFG)
    with caplog.at_level(logging.WARNING, logger="grpo_core.training.monitor"):
        for m in steps[:2]:  # the history of the stopped run
            resumed.observe(m)
        assert caplog.records == []
        for m in steps[2:]:
            resumed.observe(m)
    resumed.finish()
    assert [r.getMessage() for r in caplog.records] == resumed.warnings
    assert resumed.warnings == _watch(steps)
    assert RunMonitor(CFG, emit=False).warnings == []


def test_the_summary_holds_totals_the_last_five_steps_means_and_the_warnings():
    """Six steps: reward 0.0, 0.1, ..., 0.5; the last five average (0.1 + ... + 0.5) / 5 =
    0.3; clipped ratio 1.0 in step 0 only: 0.0 over the last five; 6 x 16 = 96 rollouts."""
    history = [_step(reward=r / 10) for r in range(6)]
    history[0] = {**history[0], "completions/clipped_ratio": 1.0}
    out = run_summary(history, ["a warning"], 12.345, resumed_from=0)
    assert out == {
        "steps": 6,
        "rollouts": 96,
        "wall_seconds": 12.3,
        "resumed_from": 0,
        "last_5_steps": {
            "reward": pytest.approx(0.3),
            "clipped_ratio": 0.5,
            "frac_reward_zero_std": 0.5,
            "frac_sequences_trained": 1.0,
        },
        "num_warnings": 1,
        "warnings": ["a warning"],
    }
    empty = run_summary([], [], 0.0, resumed_from=0)
    assert empty["steps"] == 0 and empty["last_5_steps"] == {} and empty["warnings"] == []


def test_an_interrupted_run_says_where_it_stopped_and_how_to_go_on():
    assert Progress(40, 10, done=12, saved=10).stopped() == (
        "train stopped after 12 of 40 steps; the last checkpoint is step 10 "
        "(.grpo_lab/train/step-000010): `dvc repro` with the same params resumes from there"
    )
    assert Progress(40, 10, done=3).stopped() == (
        "train stopped after 3 of 40 steps; no checkpoint yet (one every "
        "train.checkpoint_every=10 steps): `dvc repro` starts again from step 0"
    )


# ---- end to end: train_policy on a tiny model ----------------------------------------------


@pytest.fixture
def never_ends(tiny_model, tokenizer, tmp_path, monkeypatch):
    """A tiny model that never emits EOS (its generation config suppresses it, so it samples
    through `model.generate`): every completion runs to max_new_tokens. In a fresh directory:
    train_policy writes its run dir and dvclive metrics where it runs."""
    monkeypatch.chdir(tmp_path)
    tiny_model.generation_config.suppress_tokens = [tokenizer.eos_token_id]
    return tiny_model


def _arith_questions() -> list[Question]:
    """Real arithmetic questions: a 2-token completion cannot hold a boxed answer (reward 0)."""
    pairs = [(12, 7), (30, 45), (8, 9), (61, 2)]
    return [
        Question(f"a{i}", "math", 1, arith.prompt(a, b), str(a + b))
        for i, (a, b) in enumerate(pairs)
    ]


def _params(steps: int, **train) -> TrainStage:
    base = dict(steps=steps, prompts_per_step=4, group_size=4, max_new_tokens=2, lr=1e-2)
    return TrainStage(train={**base, **train})


def test_a_run_with_no_room_to_answer_warns_and_learns_nothing(never_ends, tokenizer):
    """train.max_new_tokens=2 on arithmetic: every completion clipped, every reward 0. Three
    steps: the clipped streak (3) warns at step 2, the uniform one (5) when the run ends; the
    summary holds both, and the policy is the base, byte for byte."""
    base = copy.deepcopy(never_ends.state_dict())
    policy, rows, summary = train_policy(_params(3), never_ends, tokenizer, _arith_questions())
    assert summary["warnings"] == [
        "steps 0-2: all 48 completions reached train.max_new_tokens=2 (clipped ratio 1.0, mean "
        "reward 0.000): every answer was cut off before its end: raise train.max_new_tokens",
        "steps 0-2: all 12 groups (4 completions each) had equal rewards "
        "(frac_reward_zero_std 1.0, mean reward 0.000): no completion has an advantage, so "
        "nothing is learned: the policy solves none of its questions: train easier ones "
        "(train.curriculum: learnable or easy) or give it room (train.max_new_tokens)",
    ]
    assert summary["steps"] == 3 and summary["rollouts"] == 48 and summary["resumed_from"] == 0
    assert summary["last_5_steps"]["clipped_ratio"] == 1.0
    assert summary["last_5_steps"]["frac_reward_zero_std"] == 1.0
    assert len(rows) == 12
    assert all(torch.equal(v, policy.state_dict()[k]) for k, v in base.items())


def _interrupt_when(model, done: int) -> torch.utils.hooks.RemovableHandle:
    """A Ctrl-C at the first forward pass after `done` steps were logged (dvclive's reward
    curve has that many points): a real KeyboardInterrupt inside step `done`."""
    curve = Path("metrics/train/plots/metrics/reward.tsv")

    def hook(module, args):
        logged = len(curve.read_text().splitlines()) - 1 if curve.exists() else 0
        if logged >= done:
            raise KeyboardInterrupt

    return model.register_forward_pre_hook(hook)


def test_ctrl_c_before_the_first_checkpoint_says_training_starts_again(never_ends, tokenizer):
    hook = _interrupt_when(never_ends, done=0)
    with pytest.raises(Interrupted) as stopped:
        train_policy(_params(5, checkpoint_every=2), never_ends, tokenizer, _arith_questions())
    hook.remove()
    assert str(stopped.value) == (
        "train stopped after 0 of 5 steps; no checkpoint yet (one every "
        "train.checkpoint_every=2 steps): `dvc repro` starts again from step 0"
    )
    assert isinstance(stopped.value.__cause__, KeyboardInterrupt)


def test_ctrl_c_names_the_last_checkpoint_and_the_rerun_resumes_from_it(never_ends, tokenizer):
    """Checkpoints every 2 of 5 steps; Ctrl-C in step 3: 3 steps done, the last checkpoint is
    step 2. Run again: it resumes at step 2, and its summary is the unbroken run's (5 steps,
    both warnings, clipped at steps 0-2 although the rerun began at step 2)."""
    params, questions = _params(5, checkpoint_every=2), _arith_questions()
    base = copy.deepcopy(never_ends)
    hook = _interrupt_when(never_ends, done=3)
    with pytest.raises(Interrupted) as stopped:
        train_policy(params, never_ends, tokenizer, questions)
    hook.remove()
    assert str(stopped.value) == (
        "train stopped after 3 of 5 steps; the last checkpoint is step 2 "
        "(.grpo_lab/train/step-000002): `dvc repro` with the same params resumes from there"
    )
    assert sorted(p.name for p in Path(".grpo_lab/train").iterdir()) == ["resume", "step-000002"]

    _, rows, resumed = train_policy(params, copy.deepcopy(base), tokenizer, questions)
    assert resumed["resumed_from"] == 2 and resumed["steps"] == 5 and len(rows) == 20
    _, _, unbroken = train_policy(_params(5), copy.deepcopy(base), tokenizer, questions)
    assert resumed["warnings"] == unbroken["warnings"]
    assert [w[:10] for w in resumed["warnings"]] == ["steps 0-2:", "steps 0-4:"]


def test_curves_csv_has_one_row_per_step_and_an_empty_cell_for_an_unlogged_metric():
    """metrics/train_curves.csv, by hand: step, then the CURVES columns in order; a step that
    logged no grad_norm (nothing to learn) leaves its cell empty."""
    from grpo_core.training.monitor import CURVES, curves_csv

    full = {name: 1.0 for name in CURVES} | {"reward": 0.25, "num_rollouts": 512}
    missing = {k: v for k, v in full.items() if k != "grad_norm"} | {"reward": 0.5}
    lines = curves_csv([full, missing]).splitlines()
    assert lines[0].split(",") == ["step", *CURVES.values()]
    first, second = (
        dict(zip(lines[0].split(","), row.split(","), strict=True)) for row in lines[1:]
    )
    assert first["step"] == "0" and first["reward"] == "0.25" and first["num_rollouts"] == "512.0"
    assert second["step"] == "1" and second["reward"] == "0.5" and second["grad_norm"] == ""
    assert first["clip_low"] == "1.0" and len(lines) == 3
