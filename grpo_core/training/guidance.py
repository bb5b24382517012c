"""Off-Context GRPO in the loop (the math: grpo_core.algorithms.offcontext; the reference:
AgPriyank/OC-GRPO): which rows are sampled with a hint, from which context, and under which
context they are trained.

- `fixed` (the reference's offline augmentation): every question the guide stage unlocked has
  a guided twin in the pool (`questions.training_questions`), sampled from its hinted prompt at
  the fraction data/guides.parquet holds, as a group of its own beside the original's.
- `adaptive`: a group whose G rollouts all fail is re-rolled at each of `fractions` in turn,
  all G rollouts (or `guided_rollouts` of them) from the hinted prompt; the first fraction with
  a correct rollout replaces the group; a question no fraction unlocks keeps its failed group.

What a guided row is sampled from and trained under (`correction`):

| correction  | sampled from              | trained under | token weight            | reward on |
|-------------|---------------------------|---------------|-------------------------|-----------|
| importance  | x~ (hint in the prompt)   | x             | w_t (offcontext)        | y         |
| none        | x~                        | x             | 1                       | y         |
| hinted      | x~                        | x~            | 1                       | y         |
| prefix_rl   | x + prefix (assistant turn) | x + prefix  | 1                       | prefix + y |

Every token of y is the model's own sample: nothing is forced into the response.
"""

from __future__ import annotations

import dataclasses

import torch

from grpo_core.algorithms.offcontext import importance_weights
from grpo_core.config.train import TrainParams
from grpo_core.data.prompts import char_prefix, render_hinted
from grpo_core.rewards.verify import final_answer
from grpo_core.rollout.rollouts import Rollouts
from grpo_core.rollout.scoring import score_rollouts
from grpo_core.training.batch import Question, Sampled
from grpo_core.training.sampling import GroupSampler

# The corrections that sample under x~ and train under x (the rows `Sampled.hinted` marks).
UNDER_UNGUIDED = ("importance", "none")


def sampling_context(q: Question, fraction: float | None, correction: str, tokenizer) -> str:
    """The prompt a row of `q` is sampled from: its own (`fraction` None); with the hint at
    `fraction`, the guided prompt x~ (through the chat template when `q`'s prompt is), or for
    `prefix_rl` the prompt followed by the prefix itself."""
    if fraction is None:
        return q.prompt
    if correction == "prefix_rl":
        return q.prompt + char_prefix(q.solution, fraction)
    return render_hinted(tokenizer, q.text, q.solution, fraction, q.chat, q.domain)


def relay(ro: Rollouts, prompts: list[str], tokenizer, n: int) -> Rollouts:
    """The same completion tokens after other prompts (`prompts[i]` before rows i*n..i*n+n-1),
    left-padded: the rollouts as the trainer sees them when they were sampled from another
    context. The sampler's log-probs belong to the old context and are dropped."""
    p_ids = tokenizer(prompts, add_special_tokens=False)["input_ids"]
    width = max(len(p) for p in p_ids)
    pad = tokenizer.pad_token_id
    ids = torch.full((len(p_ids), width), pad, dtype=torch.long)
    attn = torch.zeros_like(ids)
    for i, p in enumerate(p_ids):
        ids[i, width - len(p) :] = torch.tensor(p, dtype=torch.long)
        attn[i, width - len(p) :] = 1
    device = ro.input_ids.device
    ids, attn = ids.repeat_interleave(n, 0).to(device), attn.repeat_interleave(n, 0).to(device)
    completion_attn = ro.attention_mask[:, ro.prompt_len :]
    return Rollouts(
        input_ids=torch.cat([ids, ro.completion_ids], dim=1),
        attention_mask=torch.cat([attn, completion_attn], dim=1),
        completion_mask=ro.completion_mask,
        prompt_len=width,
        texts=ro.texts,
        truncated=ro.truncated,
        is_weight=ro.is_weight,
    )


class OffContext:
    """Samples a batch's groups as `train.oc_grpo` says (see the module docstring)."""

    def __init__(self, sampler: GroupSampler, cfg: TrainParams):
        self.sampler = sampler
        self.cfg = cfg
        self.oc = cfg.oc_grpo

    def rollout(self, questions: list[Question], base: int, first: int) -> Sampled:
        """G rewarded rollouts per question: fixed-mode guided twins from their hinted prompt;
        in adaptive mode, failed groups re-rolled with growing hints. `base` / `first`: the
        rollout call's base seed and the position of questions[0] among its questions (the
        groups' sampling streams are keyed by both)."""
        g = self.cfg.group_size
        fractions = [q.guide_fraction if q.guided else None for q in questions]
        gens = self.sampler.generators(base, range(first, first + len(questions)), 0)
        sampled = self.sample(questions, fractions, g, gens)
        if self.oc.mode == "adaptive":
            sampled = self.cascade(questions, sampled, base, first)
        return sampled

    def sample(
        self,
        questions: list[Question],
        fractions: list[float | None],
        n: int,
        generators: list[torch.Generator] | None = None,
    ) -> Sampled:
        """`n` rewarded rollouts per question, each question's from its hint at its fraction
        (None: unguided), laid out under the context `correction` trains them under."""
        correction, tok = self.oc.correction, self.sampler.tokenizer
        pairs = list(zip(questions, fractions, strict=True))
        contexts = [sampling_context(q, f, correction, tok) for q, f in pairs]
        prefixes = None
        if correction == "prefix_rl":
            prefixes = ["" if f is None else char_prefix(q.solution, f) for q, f in pairs]
        part = self.sampler.sample(
            questions, n=n, generators=generators, contexts=contexts, reward_prefixes=prefixes
        )
        part = dataclasses.replace(part, fractions=list(fractions))
        if correction in UNDER_UNGUIDED and any(f is not None for f in fractions):
            part = self.under_unguided(questions, fractions, part, n)
        return part

    def under_unguided(
        self, questions: list[Question], fractions: list[float | None], part: Sampled, n: int
    ) -> Sampled:
        """The guided rows of `part` laid out under their unguided prompt x, with their tokens'
        log-probs under x~ (`hinted_logp`: the sampler's own, else one forward) and under x (one
        forward over the guided rows; the unguided rows keep the sampler's)."""
        cfg, model, tok = self.cfg, self.sampler.model, self.sampler.tokenizer
        ro = part.ro
        device = ro.input_ids.device
        hinted = torch.tensor([f is not None for f in fractions], device=device)
        hinted = hinted.repeat_interleave(n)
        hinted_logp = ro.sampler_logp
        if hinted_logp is None:
            hinted_logp, _ = score_rollouts(model, ro, cfg.temperature, cfg.micro_batch_size)
        hinted_logp = torch.where(hinted.unsqueeze(1), hinted_logp, torch.zeros_like(hinted_logp))
        relaid = relay(ro, [q.prompt for q in questions], tok, n)
        if ro.sampler_logp is not None:
            # pi_old under x: a forward over the guided rows only (their record is under x~).
            rows = torch.nonzero(hinted).flatten()
            logp_x, entropy_x = score_rollouts(
                model, relaid.select(rows), cfg.temperature, cfg.micro_batch_size
            )
            logp, entropy = ro.sampler_logp.clone(), ro.sampler_entropy.clone()
            logp[rows], entropy[rows] = logp_x, entropy_x
            relaid = dataclasses.replace(
                relaid, sampler_logp=logp, sampler_entropy=entropy, sampler_key=ro.sampler_key
            )
        return dataclasses.replace(part, ro=relaid, hinted=hinted, hinted_logp=hinted_logp)

    def cascade(
        self, questions: list[Question], sampled: Sampled, base: int, first: int
    ) -> Sampled:
        """Adaptive mode: each group whose rollouts all fail re-rolled at each fraction in
        turn until one of its rollouts is correct; that fraction's group replaces it (its
        first G - k unguided rollouts kept when `guided_rollouts` is k < G)."""
        g = self.cfg.group_size
        k = min(self.oc.guided_rollouts or g, g)
        solved = sampled.solved.view(-1, g).any(dim=1).tolist()
        pending = [
            i
            for i, ok in enumerate(solved)
            if not ok and questions[i].solution and not questions[i].guided
        ]
        parts, chosen = [sampled], {}  # group -> (part, group within part, fraction)
        for r, fraction in enumerate(self.oc.fractions, start=1):
            if not pending:
                break
            gens = self.sampler.generators(base, [first + i for i in pending], r)
            todo = [questions[i] for i in pending]
            part = self.sample(todo, [fraction] * len(todo), k, gens)
            parts.append(part)
            unlocked = part.solved.view(-1, k).any(dim=1).tolist()
            for j, i in enumerate(pending):
                if unlocked[j]:
                    chosen[i] = (len(parts) - 1, j, fraction)
            pending = [i for i in pending if i not in chosen]
        if len(parts) == 1:
            return sampled
        offsets = [0]
        for part in parts[:-1]:
            offsets.append(offsets[-1] + len(part.rewards))
        rows, fractions = [], []
        for i in range(len(questions)):
            part, j, f = chosen.get(i, (0, i, sampled.fractions[i]))
            if part == 0:
                rows.extend(range(i * g, (i + 1) * g))
            else:
                rows.extend(range(i * g, i * g + g - k))
                rows.extend(range(offsets[part] + j * k, offsets[part] + (j + 1) * k))
            fractions.append(f)
        return Sampled.cat(parts, self.sampler.tokenizer.pad_token_id).select(rows, fractions)


def answer_tokens(tokenizer, ro: Rollouts, rows: list[int], domains: list[str]) -> torch.Tensor:
    """(B, T) bool: for each row of `rows` (its domain in `domains`), the completion tokens that
    write the answer the verifier reads (`verify.final_answer`'s text, where it occurs last in
    the completion: a box's content, a stated answer, an option letter); False elsewhere and in
    a row that gives no answer. A token is one when its characters overlap the answer's, its
    characters found by decoding the completion's tokens up to it and up to the one before."""
    out = torch.zeros_like(ro.completion_mask, dtype=torch.bool)
    for b, domain in zip(rows, domains, strict=True):
        ids = ro.completion_ids[b][ro.completion_mask[b].bool()].tolist()
        text = tokenizer.decode(ids, skip_special_tokens=True)
        answer = final_answer(domain, text)
        start = text.rfind(answer) if answer else -1
        if start < 0:  # none, or read through a normalisation that left the text
            continue
        end, before = start + len(answer), 0
        for t in range(len(ids)):
            after = len(tokenizer.decode(ids[: t + 1], skip_special_tokens=True))
            out[b, t] = before < end and after > start
            before = after
    return out


def guided_token_weights(
    sampled: Sampled,
    old_logp: torch.Tensor,
    cfg: TrainParams,
    answer: torch.Tensor | None = None,
) -> tuple[torch.Tensor | None, dict[str, float]]:
    """(B, T) OC-GRPO's importance weights (`correction: importance`; None otherwise or when
    no row is guided), w_t on the guided rows' completion tokens and 1 elsewhere; and the
    guidance metrics. `old_logp`: pi_old under the context each row is trained under (x).

    `answer` (B, T) bool marks the answer's tokens (`answer_tokens`) of the solved guided
    rows: their weights' mean, `oc/answer_weight_mean`, says whether the correction keeps the
    gradient on the answers the hint unlocked (the paper's point: near 1 where the model
    would write the answer unguided, near the floor where only the hint gives it). Logged only
    at steps with such tokens (`oc/answer_tokens`)."""
    oc, g = cfg.oc_grpo, cfg.group_size
    guided = torch.tensor([f is not None for f in sampled.fractions], device=old_logp.device)
    metrics = {
        "oc/guided_groups": float(guided.sum()),
        "oc/guided_solved": (
            float((sampled.solved.view(-1, g).any(dim=1) & guided).sum() / guided.sum())
            if guided.any()
            else 0.0
        ),
    }
    if oc.correction not in UNDER_UNGUIDED:
        return None, metrics
    tokens = sampled.guided_rows.unsqueeze(1) & sampled.ro.completion_mask.bool()
    # Logged under `none` too, where they are not applied: what the correction would do.
    metrics |= {
        "oc/weight_mean": 1.0,
        "oc/weight_std": 0.0,
        "oc/weight_min": 1.0,
        "oc/weight_at_floor": 0.0,
        "oc/weight_below_half": 0.0,
        "oc/weighted_tokens": float(tokens.sum()),
        "oc/answer_tokens": 0.0,
    }
    if not tokens.any():
        return None, metrics
    w = importance_weights(old_logp, sampled.hinted_logp, oc.gamma, oc.floor, oc.cap)
    on = w[tokens]
    metrics |= {
        "oc/weight_mean": float(on.mean()),
        "oc/weight_std": float(on.std()) if on.numel() > 1 else 0.0,
        "oc/weight_min": float(on.min()),
        "oc/weight_at_floor": float((on <= oc.floor).float().mean()),
        "oc/weight_below_half": float((on < 0.5).float().mean()),
    }
    if answer is not None:
        answer = answer & tokens
        metrics["oc/answer_tokens"] = float(answer.sum())
        if answer.any():
            metrics["oc/answer_weight_mean"] = float(w[answer].mean())
    if oc.correction != "importance":
        return None, metrics
    return torch.where(tokens, w, torch.ones_like(w)), metrics
