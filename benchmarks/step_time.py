"""Time per RL step of grpo-lab's GRPO trainer against TRL's `GRPOTrainer`, same model and batch.

    python -m benchmarks.step_time [--model DIR] --prompts 16 --group 8 --new-tokens 16 --steps 10

A *step* is what `grpo_core.training.trainer.GRPOTrainer.step` does: one rollout batch of
`--prompts`
tiny-world arithmetic prompts x `--group` completions, its rewards and old log-probs, then
`updates_per_batch` optimizer steps on it. TRL runs the same work as `num_iterations` optimizer
steps per generation batch (per_device_train_batch_size = prompts x group, one micro-batch,
`steps_per_generation=1`), so one of our steps is compared with `num_iterations` of TRL's.

Both trainers get the same model (`--model DIR`, default: the tiny-world Llama of the
`model.tiny` defaults, 0.79M parameters, built here with random weights), the same params as
far as they have a common meaning (the `grpo` preset: lr with its linear warmup, clip 0.2,
token-mean loss = TRL's "dapo", beta 0, group-normalised advantages, max grad norm 1, AdamW)
and the same reward: `agreement`, the fraction of a completion's characters equal to the
reference solution's at the same position. It is verifiable and cheap, and unlike the
final-answer verifier it differs within almost every group even at 16 tokens (too short for an
answer), so both trainers train on the whole batch. `frac_trained` reports how much of it ours
kept: the `grpo` preset leaves out groups whose rewards are all equal, which TRL trains on
anyway, so a confident model (`--model models/base`: about 0.37 of the rows kept) makes ours
look faster than it is; the random-weight default keeps the two doing the same work.

Exact lengths (`--exact-length`, on by default): EOS is kept from being sampled before
`--new-tokens` tokens (HF's `min_new_tokens`: EOS's probability set to 0), so every completion
of both trainers is exactly `--new-tokens` long. Ours gets it through
`grpo_core.rollout.sampler.generate(min_new_tokens=...)`, bound into the function the trainer calls
by
this script only; TRL through `GRPOConfig.generation_kwargs`. `--natural-length` lets EOS end
completions (lengths then differ between the two, and so does the work).

Each trainer runs in its own spawned process (own peak memory, own torch state); the parent
alternates them step by step (ours, TRL, TRL, ours, ...), so a noisy machine slows both alike.
The first `--warmup` steps of each are not timed. Reported per trainer: the median
`ms_per_step`, the median time in generation, `rollout_tokens_per_s` (completion tokens of a
step / median step time), `generation_tokens_per_s` (/ median generation time), completion
lengths seen, and peak RSS (`ru_maxrss`) of its process, with the RSS before the model was
loaded (torch, transformers and TRL imported) for reference. `ratio` = TRL ms / our ms, i.e.
our steps per second over TRL's. The last line printed is JSON.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import json
import multiprocessing as mp
import os
import statistics
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

DOMAIN = "bench"  # the verifier domain the benchmark reward is registered under
LEVELS = (3, 4)  # the default train.levels: the prompts the pipeline trains on
TARGET = 1.5  # the target: at least 1.5x TRL's steps per second


def agreement(completion: str, solution: str) -> float:
    """Fraction of the completion's characters equal to the reference solution's at the same
    position (0 for an empty completion)."""
    if not completion:
        return 0.0
    return sum(a == b for a, b in zip(completion, solution, strict=False)) / len(completion)


def trl_agreement(prompts, completions, solution, **_) -> list[float]:
    """`agreement` as a TRL reward function (the dataset's `solution` column is passed in)."""
    return [agreement(c, s) for c, s in zip(completions, solution, strict=True)]


def bench_problems(n: int, seed: int) -> list[dict]:
    """`n` tiny-world arithmetic problems, alternating over `LEVELS`."""
    from grpo_core.data.tiny import arith

    per = -(-n // len(LEVELS))
    by_level = [arith.generate_level(lv, per, 0, seed)["train"] for lv in LEVELS]
    rows = [r for group in zip(*by_level, strict=True) for r in group]
    return rows[:n]


def build_tiny(path: Path, seed: int) -> Path:
    """The tiny-world Llama (`model.tiny` defaults, random weights) and character tokenizer."""
    from grpo_core.config.model import TinyModelParams
    from grpo_core.data.tiny import arith
    from grpo_core.models.tiny import build_char_tokenizer, build_tiny_model

    texts = [arith.prompt(47, 38), arith.solution(47, 38), "0123456789+=?:QA \n\\boxed{}"]
    tokenizer = build_char_tokenizer(texts)
    build_tiny_model(tokenizer, TinyModelParams(), seed).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


# ---- the workers: one process per trainer, one step per "step" message ----------------------


def _rss_mb() -> float:
    import psutil

    return psutil.Process().memory_info().rss / 2**20


def _peak_rss_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def _quiet() -> None:
    os.environ["HF_HUB_OFFLINE"] = "1"  # before huggingface_hub reads it: no hub access
    import warnings

    import transformers

    transformers.logging.set_verbosity_error()
    warnings.filterwarnings("ignore")


def _worker(kind: str, cfg: dict, conn) -> None:
    os.dup2(2, 1)  # the workers' prints go to stderr: the parent's JSON stays the last line
    try:
        _quiet()
        import torch

        if cfg["threads"]:
            torch.set_num_threads(cfg["threads"])
        # Both import both trainers, so that their baseline memory is the same.
        import datasets  # noqa: F401
        from trl import GRPOConfig, GRPOTrainer  # noqa: F401

        import grpo_core.training.trainer  # noqa: F401

        baseline = _rss_mb()
        # the two trainers' set-up: this module's (the tiny world) or cfg["module"]'s
        # (benchmarks.trl_smollm2: SmolLM2 with LoRA in bf16)
        module = importlib.import_module(cfg.get("module", __name__))
        getattr(module, "_ours" if kind == "ours" else "_trl")(cfg, conn, baseline)
    except BaseException:
        conn.send(("error", traceback.format_exc()))
        raise
    finally:
        conn.close()


def _load(cfg):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(cfg["model"], dtype="float32")
    return model, AutoTokenizer.from_pretrained(cfg["model"])


def _train_params(cfg: dict):
    from grpo_core.config.params import parse_params

    train = {
        "prompts_per_step": cfg["prompts"],
        "group_size": cfg["group"],
        "max_new_tokens": cfg["new_tokens"],
    }
    return parse_params({"algo": "grpo", "train": train}).train


def _ours(cfg: dict, conn, baseline: float) -> None:
    import torch

    from grpo_core.rewards import verify as rewards
    from grpo_core.rollout import sampler as rollout
    from grpo_core.training import sampling
    from grpo_core.training.batch import Question
    from grpo_core.training.trainer import GRPOTrainer

    rewards.VERIFIERS[DOMAIN] = agreement  # this process only
    model, tokenizer = _load(cfg)
    params = _train_params(cfg)
    trainer = GRPOTrainer(model, tokenizer, params)
    questions = [
        Question(r["id"], DOMAIN, r["level"], r["prompt"], r["solution"], r["solution"])
        for r in bench_problems(cfg["prompts"] * cfg["total"], cfg["seed"])
    ]
    gen = rollout.generate
    if cfg["exact_length"]:
        gen = functools.partial(gen, min_new_tokens=cfg["new_tokens"])
    seen: dict[str, Any] = {}

    def timed_generate(*args, **kwargs):
        t0 = time.perf_counter()
        ro = gen(*args, **kwargs)
        seen["gen_s"] = seen.get("gen_s", 0.0) + time.perf_counter() - t0
        seen["lengths"] = ro.lengths.tolist()
        return ro

    sampling.generate = timed_generate  # what GroupSampler.sample calls
    conn.send(("ready", None))
    p = cfg["prompts"]
    for step in range(cfg["total"]):
        if conn.recv() != "step":
            return
        seen.clear()
        torch.manual_seed(cfg["seed"] * 100_003 + step)  # as grpo_core.training.run.run
        t0 = time.perf_counter()
        metrics, _ = trainer.step(questions[step * p : (step + 1) * p])
        conn.send(
            (
                "step",
                {
                    "s": time.perf_counter() - t0,
                    "gen_s": seen["gen_s"],
                    "lengths": seen["lengths"],
                    "frac_trained": metrics["frac_sequences_trained"],
                    "reward": metrics["reward"],
                },
            )
        )
    conn.recv()
    conn.send(("done", {"peak_rss_mb": _peak_rss_mb(), "baseline_rss_mb": baseline}))


def _trl(cfg: dict, conn, baseline: float) -> None:
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    model, tokenizer = _load(cfg)
    params = _train_params(cfg)
    updates = params.updates_per_batch
    rows = bench_problems(cfg["prompts"] * cfg["total"], cfg["seed"])
    dataset = Dataset.from_dict(
        {"prompt": [r["prompt"] for r in rows], "solution": [r["solution"] for r in rows]}
    )
    gen_kwargs = {"min_new_tokens": cfg["new_tokens"]} if cfg["exact_length"] else None
    args = GRPOConfig(
        output_dir=tempfile.mkdtemp(prefix="trl-step-time-"),
        report_to="none",
        use_cpu=True,
        bf16=False,
        gradient_checkpointing=False,
        seed=cfg["seed"],
        disable_tqdm=True,
        logging_strategy="no",
        save_strategy="no",
        per_device_train_batch_size=params.prompts_per_step * params.group_size,
        gradient_accumulation_steps=1,
        steps_per_generation=1,
        num_generations=params.group_size,
        num_iterations=updates,
        max_steps=cfg["total"] * updates,
        max_completion_length=params.max_new_tokens,
        generation_kwargs=gen_kwargs,
        temperature=params.temperature,
        top_k=0,
        top_p=1.0,
        learning_rate=params.lr,
        lr_scheduler_type="constant_with_warmup",
        warmup_steps=params.warmup_steps,
        weight_decay=params.weight_decay,
        max_grad_norm=params.max_grad_norm,
        optim="adamw_torch",
        loss_type="dapo",  # token-mean over the batch: our "token-mean"
        scale_rewards="group",
        beta=0.0,
        epsilon=params.clip_low,
        epsilon_high=params.clip_high,
        importance_sampling_level="token",
        top_entropy_quantile=1.0,
        use_vllm=False,
    )
    seen: dict[str, Any] = {}
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=trl_agreement,
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        callbacks=[trl_turns(conn, updates, seen)],
    )
    serve_trl(trainer, conn, baseline, seen)


def trl_turns(conn, updates: int, seen: dict[str, Any]):
    """A TRL callback that hands the turn back to the parent after each rollout batch's last
    update (`updates` optimizer steps), with the step's seconds and what `seen` gathered."""
    from transformers import TrainerCallback

    class Turns(TrainerCallback):
        def __init__(self):
            self.t0 = 0.0

        def on_train_begin(self, args, state, control, **kwargs):
            conn.send(("ready", None))
            self._wait()

        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step % updates:
                return
            conn.send(("step", {"s": time.perf_counter() - self.t0, **seen}))
            seen.clear()
            if state.global_step < args.max_steps:
                self._wait()

        def _wait(self):
            if conn.recv() != "step":
                raise SystemExit(0)
            self.t0 = time.perf_counter()

    return Turns()


def serve_trl(trainer, conn, baseline: float, seen: dict[str, Any]) -> None:
    """Time TRL's generation into `seen` (seconds, completion lengths), train step by step as
    the parent asks (`trl_turns`), then report the process's peak memory."""
    generate = trainer._generate_single_turn

    def timed_generate(*a, **kw):
        t0 = time.perf_counter()
        completion_ids, logprobs = generate(*a, **kw)
        seen["gen_s"] = seen.get("gen_s", 0.0) + time.perf_counter() - t0
        seen["lengths"] = seen.get("lengths", []) + [len(c) for c in completion_ids]
        return completion_ids, logprobs

    trainer._generate_single_turn = timed_generate
    trainer.train()
    conn.recv()
    conn.send(("done", {"peak_rss_mb": _peak_rss_mb(), "baseline_rss_mb": baseline}))


# ---- the parent -------------------------------------------------------------------------


class _Worker:
    def __init__(self, kind: str, cfg: dict):
        ctx = mp.get_context("spawn")
        self.kind = kind
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker, args=(kind, cfg, child), daemon=True)
        self.proc.start()
        child.close()

    def expect(self, tag: str):
        try:
            got, payload = self.conn.recv()
        except EOFError:
            code = self.proc.exitcode
            raise RuntimeError(f"{self.kind} worker died (exit code {code})") from None
        if got == "error":
            raise RuntimeError(f"{self.kind} worker failed:\n{payload}")
        if got != tag:
            raise RuntimeError(f"{self.kind} worker sent {got!r}, expected {tag!r}")
        return payload

    def step(self) -> dict:
        self.conn.send("step")
        return self.expect("step")

    def finish(self) -> dict:
        self.conn.send("stop")
        out = self.expect("done")
        self.proc.join(timeout=60)
        return out


def summarize(steps: list[dict], final: dict, tokens_per_step: int) -> dict[str, Any]:
    ms = [1000 * s["s"] for s in steps]
    gen_ms = [1000 * s["gen_s"] for s in steps]
    lengths = [n for s in steps for n in s["lengths"]]
    med, gen_med = statistics.median(ms), statistics.median(gen_ms)
    out = {
        "ms_per_step": round(med, 2),
        "generation_ms": round(gen_med, 2),
        "rollout_tokens_per_s": round(tokens_per_step / (med / 1000), 1),
        "generation_tokens_per_s": round(tokens_per_step / (gen_med / 1000), 1),
        "peak_rss_mb": round(final["peak_rss_mb"], 1),
        "baseline_rss_mb": round(final["baseline_rss_mb"], 1),
        "completion_length_min": min(lengths),
        "completion_length_max": max(lengths),
        "ms_per_step_all": [round(x, 2) for x in ms],
    }
    if "frac_trained" in steps[0]:
        out["frac_trained"] = round(statistics.mean(s["frac_trained"] for s in steps), 3)
    return out


def run(cfg: dict) -> dict[str, Any]:
    """Both trainers, alternating step by step; returns the report."""
    cfg = {**cfg, "total": cfg["warmup"] + cfg["steps"]}
    kinds = ["ours"] + (["trl"] if cfg["trl"] else [])
    workers = {k: _Worker(k, cfg) for k in kinds}
    try:
        for w in workers.values():
            w.expect("ready")
        steps: dict[str, list[dict]] = {k: [] for k in kinds}
        for i in range(cfg["total"]):
            for k in kinds if i % 2 == 0 else kinds[::-1]:
                steps[k].append(workers[k].step())
        finals = {k: w.finish() for k, w in workers.items()}
    finally:
        for w in workers.values():
            if w.proc.is_alive():
                w.proc.kill()
    tokens = cfg["prompts"] * cfg["group"] * cfg["new_tokens"]
    report = {k: summarize(steps[k][cfg["warmup"] :], finals[k], tokens) for k in kinds}
    ours = report["ours"]
    out: dict[str, Any] = {
        "ms_per_step": ours["ms_per_step"],
        "rollout_tokens_per_s": ours["rollout_tokens_per_s"],
        "peak_rss_mb": ours["peak_rss_mb"],
    }
    if cfg["trl"]:
        ratio = report["trl"]["ms_per_step"] / ours["ms_per_step"]
        out |= {"trl_ms_per_step": report["trl"]["ms_per_step"], "ratio": round(ratio, 3)}
        out["target_met"] = ratio >= TARGET
    config = {k: cfg[k] for k in ("model", "prompts", "group", "new_tokens", "steps", "warmup")}
    return out | report | {"config": config | {"exact_length": cfg["exact_length"]}}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument(
        "--model",
        type=Path,
        help="HF model directory, e.g. models/base (default: "
        "the tiny-world model with random weights, built in a temporary folder)",
    )
    ap.add_argument("--prompts", type=int, default=16, help="prompts per step")
    ap.add_argument("--group", type=int, default=8, help="completions per prompt")
    ap.add_argument("--new-tokens", type=int, default=16, help="tokens per completion")
    ap.add_argument("--steps", type=int, default=10, help="timed steps")
    ap.add_argument("--warmup", type=int, default=2, help="untimed steps first")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--no-trl", dest="trl", action="store_false", help="time ours only")
    length = ap.add_mutually_exclusive_group()
    length.add_argument(
        "--exact-length",
        dest="exact_length",
        action="store_true",
        default=True,
        help="suppress EOS: every completion has --new-tokens tokens (default)",
    )
    length.add_argument(
        "--natural-length",
        dest="exact_length",
        action="store_false",
        help="let EOS end completions",
    )
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="step-time-") as tmp:
        model = args.model or build_tiny(Path(tmp), args.seed)
        cfg = vars(args) | {"model": str(model)}
        report = run(cfg)
    ours = report["ours"]
    line = f"ours {ours['ms_per_step']:.1f} ms/step"
    if "trl" in report:
        line += f", TRL {report['trl']['ms_per_step']:.1f} ms/step: ratio {report['ratio']:.2f}x"
    print(line)
    print(json.dumps(report))
    return report


if __name__ == "__main__":
    main()
