"""Supervised warm start on reference solutions: the loss covers completion tokens only.

With `model.sft.stop`, SFT is calibrated: every `every` steps the model samples a probe of
held-out train questions of one level, and training ends at the first check whose accuracy
reaches the target, so that the base starts RL with that level at about the same accuracy
whatever the seed or the CPU (the levels around it still move; docs/pipeline.md#calibration).
Every check samples with the same seed, so two checks differ by the model, not the draw.

Each batch also holds `model.sft.guided_batch_size` guided examples: the prompt carries a hint,
a prefix of the reference solution (`hinted_prompt`, Off-Context GRPO's guided prompt x~), and
the target is still the whole solution, so that the base learns to read a hint before the
`guide` stage and OC-GRPO prompt it with one. The probe is never guided.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm
from transformers import get_cosine_schedule_with_warmup

from grpo_core.config.model import SFTParams, SFTStop
from grpo_core.data.prompts import hinted_prompt
from grpo_core.errors import InputError
from grpo_core.rewards.code import CodeRewardConfig
from grpo_core.rewards.verify import verify_batch
from grpo_core.rollout.sampler import generate

ANSWER_LINE_SALT = 0x616E73  # drop_answer_lines' own random stream


def sft_batch(tokenizer, prompts: list[str], targets: list[str]) -> dict[str, torch.Tensor]:
    """Right-padded prompt+target+EOS sequences; labels are -100 outside target+EOS."""
    p_ids = tokenizer(prompts, add_special_tokens=False)["input_ids"]
    t_ids = tokenizer(targets, add_special_tokens=False)["input_ids"]
    seqs = [p + t + [tokenizer.eos_token_id] for p, t in zip(p_ids, t_ids, strict=True)]
    width = max(len(s) for s in seqs)
    input_ids = torch.full((len(seqs), width), tokenizer.pad_token_id, dtype=torch.long)
    labels = torch.full_like(input_ids, -100)
    attention = torch.zeros_like(input_ids)
    for i, (p, s) in enumerate(zip(p_ids, seqs, strict=True)):
        input_ids[i, : len(s)] = torch.tensor(s)
        labels[i, len(p) : len(s)] = torch.tensor(s[len(p) :])
        attention[i, : len(s)] = 1
    return {"input_ids": input_ids, "attention_mask": attention, "labels": labels}


def drop_answer_lines(targets: list[str], fraction: float, seed: int) -> list[str]:
    """`targets` with the last line (the answer in the domain's format) removed from a
    `fraction` of them, chosen by a generator of their own seeded by `seed`; a one-line target
    is kept whole."""
    if fraction <= 0:
        return list(targets)
    drop = np.random.default_rng([seed, ANSWER_LINE_SALT]).random(len(targets)) < fraction
    return [
        t.rsplit("\n", 1)[0] if d and "\n" in t else t for t, d in zip(targets, drop, strict=True)
    ]


def level_mixture(
    levels: np.ndarray, level_weights: list[float], name: str = "model.sft.level_weights"
) -> np.ndarray:
    """Per-row sampling probabilities so that level L gets weight level_weights[L-1] in total
    (`name`: the param the weights come from, for errors)."""
    if levels.max() > len(level_weights):
        raise InputError(
            f"{name} has {len(level_weights)} entries but the data has level {levels.max()}"
        )
    weights = np.asarray(level_weights, dtype=float)[levels - 1]
    counts = np.bincount(levels)[levels]
    p = weights / counts
    if p.sum() <= 0:
        raise InputError(f"{name} gives every training level weight 0")
    return p / p.sum()


# Salt of the hints' random stream, so that drawing them leaves the batch indices alone.
HINT_SALT = 0x68696E74  # "hint"


def guided_examples(
    prompts: list[str],
    solutions: list[str],
    probs: np.ndarray | None,
    params: SFTParams,
    rng: np.random.Generator,
) -> tuple[list[str], list[str], list[float]]:
    """`params.guided_batch_size` guided examples drawn by `probs` (the guided level mixture):
    their hinted prompts `hinted_prompt(prompt, solution, f)` at a fraction f drawn uniformly
    from `params.guided_fractions`, their targets (the whole solutions) and their fractions."""
    n = params.guided_batch_size
    if n == 0:
        return [], [], []
    idx = rng.choice(len(prompts), size=n, p=probs)
    fractions = rng.choice(np.asarray(params.guided_fractions, dtype=float), size=n).tolist()
    hinted = [
        hinted_prompt(prompts[i], solutions[i], f) for i, f in zip(idx, fractions, strict=True)
    ]
    return hinted, [solutions[i] for i in idx], fractions


@dataclass
class Probe:
    """Held-out questions the warm start is calibrated on."""

    prompts: list[str]
    answers: list[str]
    domains: list[str]
    stop: SFTStop
    seed: int
    code: CodeRewardConfig | None = None  # sandbox limits for code questions

    def accuracy(self, model, tokenizer) -> float:
        """Mean reward of `stop.samples` completions per question at `stop.temperature`,
        from a random stream of its own (SFT's is left where it was)."""
        was_training = model.training
        model.eval()
        n = self.stop.samples
        with torch.random.fork_rng():
            torch.manual_seed(self.seed)
            ro = generate(
                model, tokenizer, self.prompts, n, self.stop.temperature, self.stop.max_new_tokens
            )
        model.train(was_training)
        owners = [i // n for i in range(len(ro.texts))]
        rewards = verify_batch(
            [self.domains[i] for i in owners],
            ro.texts,
            [self.answers[i] for i in owners],
            self.code,
        )
        return float(np.mean(rewards))


def hold_out_probe(levels: np.ndarray, stop: SFTStop, seed: int) -> np.ndarray:
    """Indices of the probe: `stop.questions` rows at `stop.level`, drawn with `seed`."""
    at_level = np.flatnonzero(levels == stop.level)
    if len(at_level) <= stop.questions:
        raise InputError(
            f"model.sft.stop: the train split has {len(at_level)} questions at level "
            f"{stop.level}; the probe holds out {stop.questions} of them (stop.questions) and "
            "SFT needs some left: lower stop.questions, or pick another stop.level"
        )
    rng = np.random.default_rng([seed, stop.level])
    return np.sort(rng.choice(at_level, size=stop.questions, replace=False))


def _check_due(step: int, last: int, stop: SFTStop) -> bool:
    """Checks at steps `first`, `first + every`, ... and at the last step."""
    return step == last or (step >= stop.first and (step - stop.first) % stop.every == 0)


@dataclass
class WarmStart:
    """What the warm start did: the loss of every step and each probe check."""

    losses: list[float] = field(default_factory=list)
    checks: list[dict] = field(default_factory=list)  # {"step", "accuracy"}
    reached: bool | None = None  # None: no target

    @property
    def steps(self) -> int:
        return len(self.losses)

    def write_curves(self, folder: Path, target: float | None) -> None:
        """`loss.csv` (step, loss) and `probe.csv` (step, accuracy, target) in `folder`: the
        DVC plots of the warm start (headers only when there was none)."""
        folder.mkdir(parents=True, exist_ok=True)
        loss = ["step,loss", *(f"{i},{x:.6g}" for i, x in enumerate(self.losses, 1))]
        probe = ["step,accuracy,target"]
        probe += [f"{c['step']},{c['accuracy']:.6g},{target}" for c in self.checks]
        (folder / "loss.csv").write_text("\n".join(loss) + "\n")
        (folder / "probe.csv").write_text("\n".join(probe) + "\n")


def warm_start(
    model,
    tokenizer,
    prompts: list[str],
    targets: list[str],
    levels: np.ndarray,
    params: SFTParams,
    seed: int,
    probe: Probe | None = None,
) -> WarmStart:
    """Train `model` in place on (prompt, target) pairs drawn by `params.level_weights`, on a
    cosine schedule of `params.steps`; with `probe`, check its accuracy every
    `probe.stop.every` steps from step `probe.stop.first`, and stop at the first check that
    reaches `probe.stop.accuracy` (the last step is checked too).

    The targets are the reference solutions. Each batch also holds `params.guided_batch_size`
    guided examples (`guided_examples`), a prefix of their target as the hint in their prompt,
    drawn by `params.guided_level_weights` from a random stream of their own (seeded by `seed`
    and `HINT_SALT`), so the unguided examples are those of a warm start without them."""
    out = WarmStart(reached=None if probe is None else False)
    if params.steps == 0:
        return out
    rng = np.random.default_rng(seed)
    hints = np.random.default_rng([seed, HINT_SALT])
    probs = level_mixture(levels, params.level_weights)
    guided_probs = None
    if params.guided_batch_size:
        guided_probs = level_mixture(
            levels, params.guided_level_weights, "model.sft.guided_level_weights"
        )
    opt = torch.optim.AdamW(model.parameters(), lr=params.lr, weight_decay=0.0)
    sched = get_cosine_schedule_with_warmup(opt, params.warmup_steps, params.steps)
    torch.manual_seed(seed)
    model.train()
    bar = tqdm(range(1, params.steps + 1), desc="sft", unit="step")
    for step in bar:
        idx = rng.choice(len(prompts), size=params.batch_size, p=probs)
        hinted, hinted_targets, _ = guided_examples(prompts, targets, guided_probs, params, hints)
        batch = sft_batch(
            tokenizer,
            [prompts[i] for i in idx] + hinted,
            [targets[i] for i in idx] + hinted_targets,
        )
        loss = model(**batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        out.losses.append(loss.item())
        bar.set_postfix(loss=f"{out.losses[-1]:.3f}")
        if probe is not None and _check_due(step, params.steps, probe.stop):
            acc = probe.accuracy(model, tokenizer)
            out.checks.append({"step": step, "accuracy": acc})
            bar.set_postfix(loss=f"{out.losses[-1]:.3f}", probe=f"{acc:.3f}")
            if acc >= probe.stop.accuracy:
                out.reached = True
                break
    model.eval()
    return out
