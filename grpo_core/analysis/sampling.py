"""Sample a fixed model on a list of problems and score every completion: what the
`profile`, `guide` and `evaluate` stages share."""

from __future__ import annotations

from tqdm.auto import tqdm

from grpo_core.algorithms.losses import masked_mean
from grpo_core.config.sampling import SamplingParams
from grpo_core.config.user_reward import RewardFunction
from grpo_core.rewards.code import CodeRewardConfig, active_code_config
from grpo_core.rewards.verify import final_answer, verify_batch
from grpo_core.rollout.sampler import computes_in_float32, generate
from grpo_core.rollout.scoring import score_rollouts


def generate_calls(
    num_problems: int, samples: int, batch_size: int
) -> list[tuple[int, int, int, int]]:
    """How `sample_problems` splits `samples` completions of each of `num_problems` problems
    into generate calls of at most `batch_size` sequences, in row order: (first problem, number
    of problems, first sample, samples each) per call. Whole problems share a call while
    `samples` fits in it (`batch_size // samples` of them); otherwise each problem's samples are
    split over calls of `batch_size` (the last one holds the rest)."""
    if samples <= batch_size:
        per_call = batch_size // samples
        return [
            (start, min(per_call, num_problems - start), 0, samples)
            for start in range(0, num_problems, per_call)
        ]
    return [
        (index, 1, first, min(batch_size, samples - first))
        for index in range(num_problems)
        for first in range(0, samples, batch_size)
    ]


def sample_problems(
    model,
    tokenizer,
    problems: list[dict],
    cfg: SamplingParams,
    desc: str,
    with_logprobs: bool = False,
    code: CodeRewardConfig | None = None,
    greedy: bool = False,
    function: RewardFunction | None = None,
) -> list[dict]:
    """`cfg.samples` completions per problem (each problem a dict with at least `domain`,
    `prompt`, `answer`), in generate calls of at most `cfg.batch_size` sequences
    (`generate_calls`; scored in forwards of at most as many); with `greedy`, one greedy
    completion per problem instead. The completions draw from torch's global generator, call
    after call: the same seed, problems and params give the same rows.

    Returns one row per completion, problem by problem: `index` (into `problems`), `sample`,
    `completion` (the model's text alone), `reward` (the verifier's on that text, so a hint in
    the prompt earns nothing; code checked in parallel with `code`'s limits and scored all or
    nothing, as benchmarks score it, whatever `code.binary` says; `function`, a
    user's `reward.function`, instead of the verifiers), `answer` (the
    final answer it commits to, None if none), `length` (tokens), `truncated`, and with
    `with_logprobs` the completion's `mean_logprob` (mean token log-prob under `model`).
    """
    model.eval()
    # Scored as a benchmark scores: a program solves its problem when it passes all its tests.
    code = active_code_config(code).model_copy(update={"binary": True})
    rows: list[dict] = []
    calls = generate_calls(len(problems), 1 if greedy else cfg.samples, cfg.batch_size)
    for start, count, first, n in tqdm(calls, desc=desc, unit="batch"):
        chunk = problems[start : start + count]
        ro = generate(
            model,
            tokenizer,
            [p["prompt"] for p in chunk],
            n,
            cfg.temperature,
            cfg.max_new_tokens,
            greedy=greedy,
            draw=cfg.draw,
            compact=cfg.compact,
            # what scoring reuses (a float32 model's log-probs), or nothing: a bf16 model's
            # are scored by a forward anyway (`sampler.computes_in_float32`), and recording
            # them costs a third of its sampling (the exp over the vocabulary at every token)
            record="entropy" if with_logprobs and computes_in_float32(model) else "none",
        )
        lengths = ro.lengths.tolist()
        mean_logp: list[float] = []
        if with_logprobs:
            logp, _ = score_rollouts(model, ro, cfg.temperature, cfg.batch_size)
            mean_logp = masked_mean(logp, ro.completion_mask, dim=1).tolist()
        owners = [chunk[i // n] for i in range(len(ro.texts))]
        rewards = verify_batch(
            [p["domain"] for p in owners], ro.texts, [p["answer"] for p in owners], code, function
        )
        for i, text in enumerate(ro.texts):
            row = {
                "index": start + i // n,
                "sample": first + i % n,
                "completion": text,
                "reward": rewards[i],
                "answer": final_answer(owners[i]["domain"], text),
                "length": lengths[i],
                "truncated": bool(ro.truncated[i]),
            }
            if with_logprobs:
                row["mean_logprob"] = mean_logp[i]
            rows.append(row)
    return rows
