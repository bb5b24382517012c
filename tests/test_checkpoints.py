"""Checkpoints and the resume state of a run (grpo_core.training.checkpoints, .resume): weights
saved and loaded back (the whole model, or LoRA's adapters), a fingerprint that changes with
every param and input a run reads, the resume state's round trip, another run's leftovers
discarded, and checkpoints published in one rename."""

import copy
import json
from pathlib import Path

import pytest
import torch

from grpo_core.config.params import parse_params
from grpo_core.config.train import LoraParams
from grpo_core.errors import InputError
from grpo_core.training.batch import Question, QuestionSampler
from grpo_core.training.checkpoints import (
    checkpoint_dir,
    load_checkpoint,
    publish_checkpoints,
    save_checkpoint,
)
from grpo_core.training.lora import add_lora
from grpo_core.training.resume import load_resume, run_fingerprint, save_resume
from grpo_core.training.trainer import GRPOTrainer


def _perturbed(model, seed: int = 1):
    """A copy of `model` whose trainable weights all moved."""
    other = copy.deepcopy(model)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in other.parameters():
            if p.requires_grad:
                p.add_(0.1 * torch.randn(p.shape, generator=gen))
    return other


def _same_weights(a, b) -> bool:
    sb = b.state_dict()
    return all(torch.equal(v, sb[k]) for k, v in a.state_dict().items())


def test_a_full_checkpoint_loads_back_into_a_fresh_model(tiny_model, tmp_path):
    trained = _perturbed(tiny_model)
    save_checkpoint(trained, 3, tmp_path)
    directory = checkpoint_dir(tmp_path, 3)
    assert directory == tmp_path / "step-000003" and (directory / "model.safetensors").exists()
    fresh = copy.deepcopy(tiny_model)
    assert not _same_weights(fresh, trained)
    load_checkpoint(fresh, directory)
    assert _same_weights(fresh, trained)


def test_a_checkpoint_of_another_model_is_refused(tiny_model, tokenizer, tmp_path):
    from grpo_core.config.model import TinyModelParams
    from grpo_core.models.tiny import build_tiny_model

    two = TinyModelParams(hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64)
    bigger = build_tiny_model(tokenizer, two, seed=0)
    save_checkpoint(bigger, 1, tmp_path)
    with pytest.raises(InputError, match="tensors the model lacks"):
        load_checkpoint(copy.deepcopy(tiny_model), checkpoint_dir(tmp_path, 1))
    save_checkpoint(tiny_model, 2, tmp_path)
    with pytest.raises(InputError, match="no weights for"):
        load_checkpoint(bigger, checkpoint_dir(tmp_path, 2))


def test_a_lora_checkpoint_holds_the_adapters_only_and_loads_back(tiny_model, tmp_path):
    lora = LoraParams(enabled=True, r=4, alpha=8, target_modules=["q_proj", "v_proj"])
    trained = _perturbed(add_lora(copy.deepcopy(tiny_model), lora))
    save_checkpoint(trained, 1, tmp_path)
    directory = checkpoint_dir(tmp_path, 1)
    assert (directory / "adapter_model.safetensors").exists()
    assert not (directory / "model.safetensors").exists()
    fresh = add_lora(copy.deepcopy(tiny_model), lora)
    assert not _same_weights(fresh, trained)
    load_checkpoint(fresh, directory)
    assert _same_weights(fresh, trained)


def test_the_fingerprint_changes_with_the_params_and_the_inputs(tmp_path):
    data = tmp_path / "data.parquet"
    model = tmp_path / "model"
    model.mkdir()
    data.write_bytes(b"a" * 10)
    (model / "model.safetensors").write_bytes(b"w" * 10)
    inputs = [str(data), str(model), str(tmp_path / "absent.parquet")]
    params = parse_params({})
    first = run_fingerprint(params, inputs)
    assert run_fingerprint(parse_params({}), inputs) == first
    reward = {"weights": {"format": 0.5}}
    for changed in ({"seed": 1}, {"algo": "dapo"}, {"train": {"lr": 0.1}}, {"reward": reward}):
        assert run_fingerprint(parse_params(changed), inputs) != first, changed
    data.write_bytes(b"b" * 10)
    second = run_fingerprint(params, inputs)
    assert second != first
    (model / "model.safetensors").write_bytes(b"v" + b"w" * 9)  # weights: first and last MiB
    assert run_fingerprint(params, inputs) != second


def test_the_fingerprint_holds_the_launch_and_a_state_missing_a_shard_is_discarded(tmp_path):
    prints = {
        launch: run_fingerprint(parse_params({"launch": launch}), [])
        for launch in ("cpu", "ddp_cpu2", "zero2_cpu2")
    }
    assert len(set(prints.values())) == 3
    run_dir = tmp_path / "run"
    resume = run_dir / "resume"
    resume.mkdir(parents=True)
    record = {"fingerprint": "f", "step": 1, "world": 2, "sharded": True}
    (resume / "state.json").write_text(json.dumps(record))
    torch.save({}, resume / "trainer.pt")  # trainer-rank1.pt missing: a save cut short
    assert load_resume("f", clean=False, run_dir=run_dir) is None and resume.exists()
    assert load_resume("f", run_dir=run_dir) is None and not run_dir.exists()


@pytest.fixture
def questions():
    return [Question(f"q{i}", "toy", 1, f"Q: {i}+1=?\nA: ", "7") for i in range(4)]


def _trainer(model, tokenizer) -> GRPOTrainer:
    cfg = parse_params({"algo": "codapo", "train": {"prompts_per_step": 4, "group_size": 2}})
    return GRPOTrainer(model, tokenizer, cfg.train)


def test_the_resume_state_round_trips(tiny_model, tokenizer, questions, tmp_path):
    trainer = _trainer(tiny_model, tokenizer)
    trainer.resample_queue = [questions[2], questions[2]]  # CoDaPO's queue: by question id
    trainer.num_resampled = 1
    trainer.optimizer.param_groups[0]["lr"] = 0.5
    sampler = QuestionSampler(len(questions), seed=3)
    sampler.next(3)
    history = [{"reward": 0.5}, {"reward": 0.75}]
    log_rows = [{"step": 0, "id": "q1"}, {"step": 1, "id": "q2"}]
    save_resume("f", 2, trainer, sampler, history, log_rows, run_dir=tmp_path)
    assert sorted(p.name for p in (tmp_path / "resume").iterdir()) == ["state.json", "trainer.pt"]

    state = load_resume("f", run_dir=tmp_path)
    assert state is not None
    assert (state["step"], state["world"], state["sharded"]) == (2, 1, False)
    assert state["history"] == history and state["log_rows"] == log_rows
    again = QuestionSampler(len(questions), seed=3)
    again.load_state_dict(state["sampler"])
    assert again.next(6) == sampler.next(6)
    other = _trainer(copy.deepcopy(tiny_model), tokenizer)
    other.load_state_dict(state["trainer"], questions)
    assert other.resample_queue == [questions[2], questions[2]] and other.num_resampled == 1
    assert other.optimizer.param_groups[0]["lr"] == 0.5
    assert other.scheduler.state_dict() == trainer.scheduler.state_dict()


def test_another_runs_leftovers_are_discarded(tiny_model, tokenizer, tmp_path):
    trainer = _trainer(tiny_model, tokenizer)
    save_checkpoint(tiny_model, 1, tmp_path)
    save_resume("other run", 1, trainer, QuestionSampler(4, seed=0), [], [], run_dir=tmp_path)
    # A process other than the main one only reads: nothing removed.
    assert load_resume("this run", clean=False, rank=1, run_dir=tmp_path) is None
    assert (tmp_path / "resume/state.json").exists()
    assert load_resume("this run", run_dir=tmp_path) is None
    assert not tmp_path.exists()


def test_publishing_moves_the_checkpoints_in_one_rename(tiny_model, tmp_path, monkeypatch):
    run_dir, out = tmp_path / "run", tmp_path / "checkpoints"
    (out / "step-000009").mkdir(parents=True)  # the last run's
    for step in (1, 2):
        save_checkpoint(tiny_model, step, run_dir)
    (run_dir / "resume").mkdir()

    # Cut short while moving: the published checkpoints are still the last run's, whole.
    rename = Path.rename

    def failing(self, target):
        if Path(target).name == "step-000002":
            raise OSError("disk gone")
        return rename(self, target)

    monkeypatch.setattr(Path, "rename", failing)
    with pytest.raises(OSError):
        publish_checkpoints(run_dir, out)
    assert sorted(p.name for p in out.iterdir()) == ["step-000009"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoints", "run"]
    monkeypatch.setattr(Path, "rename", rename)

    for step in (1, 2):
        save_checkpoint(tiny_model, step, run_dir)
    publish_checkpoints(run_dir, out)
    assert sorted(p.name for p in out.iterdir()) == ["step-000001", "step-000002"]
    assert (out / "step-000002/model.safetensors").exists()
    assert not run_dir.exists()  # the resume state too: a rerun must not resume a finished run
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoints"]
