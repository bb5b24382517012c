"""The RL loop (`run`: steps of `prompts_per_step` questions, each seeded on its own) and the
train stage's run around it (`train_policy`): LoRA or the KL reference, the rollout backend,
resuming a stopped run, a checkpoint and resume state every `train.checkpoint_every` steps, the
step metrics logged to metrics/train with dvclive and watched for a run that cannot learn
(monitor.py), and a Ctrl-C turned into `Interrupted`, saying where the run stopped."""

from __future__ import annotations

import contextlib
import copy
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
from dvclive import Live
from tqdm.auto import tqdm

from grpo_core.config.train import TrainStage
from grpo_core.errors import Interrupted
from grpo_core.io import atomic_path
from grpo_core.models.loading import uses_chat
from grpo_core.rollout.merged import MergedLoRABackend
from grpo_core.rollout.vllm import VLLMBackend
from grpo_core.training.batch import Question, QuestionSampler
from grpo_core.training.checkpoints import RUN_DIR, checkpoint_dir, load_checkpoint, save_checkpoint
from grpo_core.training.heldout import HeldoutEval
from grpo_core.training.lora import add_lora
from grpo_core.training.monitor import RunMonitor, curves_csv, run_summary
from grpo_core.training.parallel import data_parallel
from grpo_core.training.resume import TRAIN_INPUTS, load_resume, run_fingerprint, save_resume
from grpo_core.training.trainer import GRPOTrainer

log = logging.getLogger(__name__)

# Step metrics go here (dvclive; a cached output in dvc.yaml), and the curves the plots draw
# to CURVES (git-tracked, plotted in dvc.yaml).
METRICS_DIR = "metrics/train"
CURVES = "metrics/train_curves.csv"
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


@dataclass
class Progress:
    """Where a run stands: what an interrupted one says (`stopped`)."""

    steps: int  # train.steps
    every: int  # train.checkpoint_every
    done: int = 0  # steps computed
    saved: int = 0  # steps in the last resume state (with its checkpoint); 0: none

    def stopped(self) -> str:
        """The message of `Interrupted`: where the run stopped and how to go on."""
        where = f"train stopped after {self.done} of {self.steps} steps"
        if not self.saved:
            return (
                f"{where}; no checkpoint yet (one every train.checkpoint_every={self.every} "
                "steps): `dvc repro` starts again from step 0"
            )
        return (
            f"{where}; the last checkpoint is step {self.saved} "
            f"({checkpoint_dir(RUN_DIR, self.saved)}): `dvc repro` with the same params "
            "resumes from there"
        )


def train_policy(
    params: TrainStage, policy, tokenizer, questions: list[Question], accelerator=None
) -> tuple[torch.nn.Module, list[dict], dict]:
    """Train `policy` (loaded from models/base) as `params` say, resuming a stopped run with
    the same params and inputs from RUN_DIR; returns it (with LoRA, its adapters unmerged),
    the log rows of every step (`rollout_log.ROLLOUT_LOG`) and the run's summary
    (`monitor.run_summary`: metrics/train.json), whose warnings say when it could not learn.

    Every process of a launched run calls it; only the main one writes the checkpoints and the
    metrics, except under DeepSpeed ZeRO, where each also writes its optimizer shard.

    A KeyboardInterrupt anywhere in it (Ctrl-C) becomes `Interrupted`, whose message names the
    step it stopped after and the checkpoint a rerun resumes from. Nothing is left
    half-written: checkpoints and resume states are written under a temporary name and
    renamed (checkpoints.py, resume.py)."""
    progress = Progress(params.train.steps, params.train.checkpoint_every)
    try:
        return _train_policy(params, policy, tokenizer, questions, accelerator, progress)
    except KeyboardInterrupt as exc:
        raise Interrupted(progress.stopped()) from exc


def _train_policy(
    params: TrainStage,
    policy,
    tokenizer,
    questions: list[Question],
    accelerator,
    progress: Progress,
) -> tuple[torch.nn.Module, list[dict], dict]:
    """`train_policy`, keeping `progress` up to date."""
    began = time.monotonic()
    cfg = params.train
    process = data_parallel(accelerator)
    policy, reference = policy_and_reference(policy, cfg)
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
    start = resumed_from = 0
    if resume is not None:
        start = resumed_from = resume["step"]
        load_checkpoint(policy, checkpoint_dir(RUN_DIR, start))
        sampler.load_state_dict(resume["sampler"])
        history, log_rows = resume["history"], resume["log_rows"]
        progress.done = progress.saved = start
        log.info("resuming from step %d of %d (%s)", start, cfg.steps, RUN_DIR)
        if budget_spent(history, cfg.max_rollouts):
            start = cfg.steps  # the stopped run had ended on its rollout budget
    # A resumed run replays its history: its warnings stand (logged again), streaks continue.
    monitor = RunMonitor(cfg, emit=process.is_main)
    for metrics in history:
        monitor.observe(metrics)
    # Built after the resumed weights are in: preparing broadcasts them from the main process.
    trainer = GRPOTrainer(
        policy,
        tokenizer,
        cfg,
        reference=reference,
        reward=params.reward,
        accelerator=accelerator,
        backend=rollout_backend(params, tokenizer, policy),
    )
    if resume is not None:
        trainer.load_state_dict(resume["trainer"], questions)
    heldout = HeldoutEval(params, tokenizer, uses_chat(BASE_MODEL))

    with step_logger(process.is_main, history) as log_step:

        def on_step(step: int, metrics: dict[str, float], rows: list[dict]) -> bool:
            """Evaluate (held out), log, watch and checkpoint step `step`; True when it is the
            run's last."""
            progress.done = done = step + 1
            last = done == cfg.steps or budget_spent([*history, metrics], cfg.max_rollouts)
            if heldout.due(done, last):
                with trainer.parallel.gathered(policy):
                    metrics = {**metrics, **heldout(trainer.sampler.eval_model(policy), done)}
            log_step(metrics)
            history.append(metrics)
            monitor.observe(metrics)
            log_rows.extend({"step": step, **row} for row in rows)
            if last and done < cfg.steps:
                log.info("train.max_rollouts=%d reached after step %d", cfg.max_rollouts, step)
            if done % cfg.checkpoint_every == 0 or last:
                # Every process holds the same weights (ZeRO-3: once gathered): the main one
                # writes them; and the same trainer state but under DeepSpeed, where each
                # writes its shard.
                with trainer.parallel.gathered(policy):
                    if process.is_main:
                        save_checkpoint(policy, done)
                save_resume(fingerprint, done, trainer, sampler, history, log_rows, process.barrier)
                process.barrier()
                progress.saved = done
            return last

        run(trainer, questions, cfg.steps, params.run_seed, on_step, sampler=sampler, start=start)
    monitor.finish()
    if process.is_main:
        with atomic_path(CURVES) as tmp:
            tmp.write_text(curves_csv(history))
    summary = run_summary(history, monitor.warnings, time.monotonic() - began, resumed_from)
    return policy, log_rows, summary


def policy_and_reference(policy, cfg) -> tuple[torch.nn.Module, torch.nn.Module | None]:
    """What trains and what the KL term compares with: with LoRA, the policy with adapters
    (its reference is itself with them off); else the policy, and a frozen copy of it when
    `kl_coef` > 0."""
    if cfg.lora.enabled:
        return add_lora(policy, cfg.lora), None
    if cfg.kl_coef > 0:
        return policy, copy.deepcopy(policy).eval().requires_grad_(False)
    return policy, None


def budget_spent(history: list[dict[str, float]], max_rollouts: int | None) -> bool:
    """Whether the steps of `history` sampled at least `max_rollouts` rollouts (None: never)."""
    if max_rollouts is None:
        return False
    return sum(m["num_rollouts"] for m in history) >= max_rollouts


def rollout_backend(params: TrainStage, tokenizer, policy):
    """The rollout backend `train.rollout_backend` names (None: the policy samples);
    synced from the policy before the first rollout."""
    if params.train.rollout_backend == "hf_merged":
        return MergedLoRABackend(policy, tokenizer, params.train.draw, params.train.compact)
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
