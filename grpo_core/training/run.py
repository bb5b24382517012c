"""The RL loop (`run`: steps of `prompts_per_step` questions, each seeded on its own) and the
train stage's run around it (`train_policy`): LoRA or the KL reference, the rollout backend,
resuming a stopped run, a checkpoint and resume state every `train.checkpoint_every` steps, and
the step metrics logged to metrics/train with dvclive."""

from __future__ import annotations

import contextlib
import copy
import logging
from collections.abc import Callable, Iterator
from pathlib import Path

import torch
from dvclive import Live
from tqdm.auto import tqdm

from grpo_core.config.train import TrainStage
from grpo_core.rollout.vllm import VLLMBackend
from grpo_core.training.batch import Question, QuestionSampler
from grpo_core.training.checkpoints import RUN_DIR, checkpoint_dir, load_checkpoint, save_checkpoint
from grpo_core.training.lora import add_lora
from grpo_core.training.parallel import data_parallel
from grpo_core.training.resume import TRAIN_INPUTS, load_resume, run_fingerprint, save_resume
from grpo_core.training.trainer import GRPOTrainer

log = logging.getLogger(__name__)

# Step metrics go here (declared as metrics and plots in dvc.yaml).
METRICS_DIR = "metrics/train"
BASE_MODEL = "models/base"


def run(
    trainer: GRPOTrainer,
    questions: list[Question],
    steps: int,
    seed: int,
    on_step: Callable[[int, dict[str, float], list[dict]], bool] | None = None,
    sampler: QuestionSampler | None = None,
    start: int = 0,
) -> None:
    """The RL loop: steps `start`..`steps - 1` of `prompts_per_step` questions each, with a
    progress bar, ending early after a step whose `on_step` returns True. A resumed run passes
    the sampler and the trainer as they were after step `start - 1`; every step seeds its own
    sampling, so it continues exactly where it stopped."""
    sampler = sampler or QuestionSampler(len(questions), seed)
    bar = tqdm(
        range(start, steps),
        desc="grpo",
        unit="step",
        initial=start,
        total=steps,
        disable=not trainer.is_main,
    )
    for step in bar:
        torch.manual_seed(seed * 100_003 + step)  # each step's sampling is reproducible alone

        def draw(n: int) -> list[Question]:
            return [questions[i] for i in sampler.next(n)]

        metrics, rows = trainer.step(trainer.next_batch(draw, step), more=draw)
        bar.set_postfix(reward=f"{metrics['reward']:.3f}", entropy=f"{metrics['entropy']:.3f}")
        if on_step is not None and on_step(step, metrics, rows):
            break


def train_policy(
    params: TrainStage, policy, tokenizer, questions: list[Question], accelerator=None
) -> tuple[torch.nn.Module, list[dict]]:
    """Train `policy` (loaded from models/base) as `params` say, resuming a stopped run with
    the same params and inputs from RUN_DIR; returns it (with LoRA, its adapters unmerged)
    and the log rows of every step (`rollout_log.ROLLOUT_LOG`).

    Every process of a launched run calls it; only the main one writes the checkpoints and the
    metrics, except under DeepSpeed ZeRO, where each also writes its optimizer shard."""
    cfg = params.train
    process = data_parallel(accelerator)
    reference = None
    if cfg.lora.enabled:
        policy = add_lora(policy, cfg.lora)
    elif cfg.kl_coef > 0:
        reference = copy.deepcopy(policy).eval().requires_grad_(False)
    fingerprint = run_fingerprint(params, TRAIN_INPUTS)
    # The main process reads the resume state and removes another run's leftovers; then the
    # others read what it left.
    resume = load_resume(fingerprint) if process.is_main else None
    process.barrier()
    if not process.is_main:
        resume = load_resume(fingerprint, clean=False, rank=process.rank)
    sampler = QuestionSampler(len(questions), params.run_seed)
    history: list[dict] = []  # step metrics
    log_rows: list[dict] = []
    start = 0
    if resume is not None:
        start = resume["step"]
        load_checkpoint(policy, checkpoint_dir(RUN_DIR, start))
        sampler.load_state_dict(resume["sampler"])
        history, log_rows = resume["history"], resume["log_rows"]
        log.info("resuming from step %d of %d (%s)", start, cfg.steps, RUN_DIR)
        if budget_spent(history, cfg.max_rollouts):
            start = cfg.steps  # the stopped run had ended on its rollout budget
    # Built after the resumed weights are in: preparing broadcasts them from the main process.
    trainer = GRPOTrainer(
        policy,
        tokenizer,
        cfg,
        reference=reference,
        reward=params.reward,
        accelerator=accelerator,
        backend=_backend(params, tokenizer),
    )
    if resume is not None:
        trainer.load_state_dict(resume["trainer"], questions)

    with step_logger(process.is_main, history) as log_step:

        def on_step(step: int, metrics: dict[str, float], rows: list[dict]) -> bool:
            """Log and checkpoint step `step`; True when it is the run's last."""
            log_step(metrics)
            history.append(metrics)
            log_rows.extend({"step": step, **row} for row in rows)
            done = step + 1
            last = done == cfg.steps or budget_spent(history, cfg.max_rollouts)
            if last and done < cfg.steps:
                log.info("train.max_rollouts=%d reached after step %d", cfg.max_rollouts, step)
            if done % cfg.checkpoint_every == 0 or last:
                # Every process holds the same weights: the main one writes them; and the same
                # trainer state but under DeepSpeed, where each writes its shard.
                if process.is_main:
                    save_checkpoint(policy, done)
                save_resume(fingerprint, done, trainer, sampler, history, log_rows, process.barrier)
                process.barrier()
            return last

        run(trainer, questions, cfg.steps, params.run_seed, on_step, sampler=sampler, start=start)
    return policy, log_rows


def budget_spent(history: list[dict[str, float]], max_rollouts: int | None) -> bool:
    """Whether the steps of `history` sampled at least `max_rollouts` rollouts (None: never)."""
    if max_rollouts is None:
        return False
    return sum(m["num_rollouts"] for m in history) >= max_rollouts


def _backend(params: TrainStage, tokenizer):
    """The rollout backend `train.rollout_backend` names (None: the policy samples);
    synced from the policy before the first rollout."""
    if params.train.rollout_backend != "vllm":
        return None
    return VLLMBackend(
        BASE_MODEL,
        tokenizer,
        gpu_memory_utilization=params.train.vllm_gpu_memory_utilization,
        seed=params.run_seed,
    )


@contextlib.contextmanager
def step_logger(
    main: bool, history: list[dict], directory: str | Path = METRICS_DIR
) -> Iterator[Callable[[dict[str, float]], None]]:
    """A function that logs one step's metrics to `directory` with dvclive, on the main
    process (elsewhere it does nothing); a resumed run's `history` is logged first, so its
    curves start at step 0 too. dvclive must not write dvc.yaml or make experiments of its
    own inside a DVC stage."""
    if not main:
        yield lambda metrics: None
        return
    with Live(dir=str(directory), save_dvc_exp=False, dvcyaml=None) as live:

        def log_step(metrics: dict[str, float]) -> None:
            for name, value in metrics.items():
                live.log_metric(name, value)
            live.next_step()

        for metrics in history:
            log_step(metrics)
        yield log_step
