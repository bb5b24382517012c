"""The sampler as it decoded before its speed-ups (a `DynamicCache` grown by `torch.cat`, the
draw's scores not floored), to test that the speed-ups draw the same tokens with the same
log-probs and entropies, bit for bit."""

from __future__ import annotations

import torch
from transformers import DynamicCache

import grpo_core.rollout.sampler as sampler


def assert_the_same_draws(model, tokenizer, prompts, monkeypatch, temperature, new_tokens):
    """For each draw and record mode (and greedy): the same tokens, log-probs and entropies
    with and without the growing cache and the floor. Returns how many scores the floor
    raised, so that a caller can check it had work to do."""
    floors = []
    floored = sampler.floored

    def counting(scores, inplace=False):
        floor = scores.amax(dim=-1, keepdim=True) - sampler.SCORE_FLOOR
        floors.append(int((scores < floor).sum()))
        return floored(scores, inplace)

    def run(**kw):
        gens = [torch.Generator().manual_seed(i) for i in range(len(prompts))]
        return sampler.generate(
            model, tokenizer, prompts, 4, temperature, new_tokens, generators=gens, **kw
        )

    settings = [{"greedy": True}] + [
        {"draw": d, "record": r} for d in sampler.DRAWS for r in sampler.RECORDS
    ]
    for kw in settings:
        with monkeypatch.context() as m:
            m.setattr(sampler, "floored", counting)
            now = run(**kw)
        with monkeypatch.context() as m:
            m.setattr(sampler, "growing_cache", lambda config, reserve: DynamicCache(config=config))
            m.setattr(sampler, "floored", lambda scores, inplace=False: scores)
            before = run(**kw)
        assert torch.equal(now.input_ids, before.input_ids), kw
        for a, b in (
            (now.sampler_logp, before.sampler_logp),
            (now.sampler_entropy, before.sampler_entropy),
        ):
            assert (a is None) == (b is None), kw
            if a is not None:
                assert (
                    torch.equal(a, b)
                    or torch.equal(a.isnan(), b.isnan())
                    and torch.equal(a.nan_to_num(), b.nan_to_num())
                ), kw
    return sum(floors)


def assert_compaction_keeps_draws(
    model, tokenizer, prompts, temperature, new_tokens, atol, max_differ=1 / 8
):
    """For each draw and record mode (and greedy), `compact=True` against off. A row's logits
    move by float rounding when fewer rows share its batch, so a draw near the boundary
    between two tokens may flip: each row must agree with its uncompacted twin token for
    token, with log-probs and entropies within `atol`, up to its first differing token, and
    at most a `max_differ` share of the rows may differ at all. Returns (the smallest batch
    decoded, the number of rows that differed) over every setting."""
    batches = []
    forward = sampler.forward

    def spy(model, ids, *args, **kw):
        batches.append(ids.shape[0])
        return forward(model, ids, *args, **kw)

    settings = [{"greedy": True}] + [
        {"draw": d, "record": r} for d in sampler.DRAWS for r in sampler.RECORDS
    ]
    rows = len(prompts) * 4
    smallest, differed = rows, 0
    for kw in settings:
        runs = []
        for compact in (False, True):
            gens = [torch.Generator().manual_seed(i) for i in range(len(prompts))]
            batches.clear()
            sampler.forward = spy
            try:
                runs.append(
                    sampler.generate(
                        model,
                        tokenizer,
                        prompts,
                        4,
                        temperature,
                        new_tokens,
                        generators=gens,
                        compact=compact,
                        **kw,
                    )
                )
            finally:
                sampler.forward = forward
        smallest = min([smallest, *batches])
        off, on = runs
        width = min(off.input_ids.shape[1], on.input_ids.shape[1])
        same = (off.input_ids[:, :width] == on.input_ids[:, :width]).cumprod(1).bool()
        n = int((~same.all(1)).sum())
        differed += n
        assert n <= max_differ * rows, (kw, n)
        # completion positions up to each row's first differing token
        mask = off.completion_mask[:, : width - off.prompt_len].bool()
        mask &= same[:, off.prompt_len :]
        for a, b in (
            (off.sampler_logp, on.sampler_logp),
            (off.sampler_entropy, on.sampler_entropy),
        ):
            assert (a is None) == (b is None), kw
            if a is not None:
                cut = width - off.prompt_len
                torch.testing.assert_close(
                    a[:, :cut][mask].nan_to_num(), b[:, :cut][mask].nan_to_num(), atol=atol, rtol=0
                )
    return smallest, differed
