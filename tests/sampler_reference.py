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
