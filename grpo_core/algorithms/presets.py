"""The named algorithm presets behind the top-level `algo` param.

A preset is a set of values for the `train` knobs that define an algorithm (`PRESETS`), and
for the reward shaping that is part of one (`REWARD_PRESETS`: DAPO's overlong punishment). In
`params.yaml` those knobs are `null`, meaning "the preset's value"; any of them set to a value
overrides the preset (`dvc exp run -S algo=dapo -S train.clip_high=0.3`). Everything else in `train`
(learning rate, group size, budget) is shared by all presets, so two presets at the same
params spend the same rollout budget, except where the algorithm itself draws more
(DAPO's dynamic sampling, OC-GRPO's guided rollouts: both logged as `num_rollouts`).

- `grpo`: DeepSeekMath (Shao et al., 2024), sec. 4.1: group-normalised advantages, PPO clip
  0.2, no KL, with the token-mean aggregation that TRL (`loss_type="dapo"`) and verl use by
  default: the mean over every completion token of the batch, groups whose rewards are all
  equal (advantage 0) included in the count.
- `dr_grpo`: "Understanding R1-Zero-Like Training" (Liu et al., 2025), sec. 3.1: no std in the
  advantage, token sums normalised by the constant generation budget; uniform groups left out
  of the loss (`filter_zero_std`), as grpo-lab has always trained it.
- `dapo`: DAPO (Yu et al., 2025), its final recipe (sec. 3): clip-higher (0.2 / 0.28),
  token-mean, dynamic sampling (uniform groups dropped, refilled with informative ones) and the
  soft overlong punishment (sec. 3.4, eq. 13: `reward.weights.overlong` 0.5, the cache 20% of
  the budget as DAPO's 4,096 of 20,480 tokens); overlong filtering stays an option, off.
- `codapo`: CoDaPO (tmlr-group/CoDaPO, on verl): GRPO whose advantages are scaled by a
  per-question value from rollout confidence and empirical difficulty, on alternating steps: a
  fresh batch, then a batch of the questions it valued most (`train.codapo`;
  grpo_core.algorithms.codapo); with verl's loss terms, dual clip 3.0 and entropy bonus 0.001.
- `oc_grpo`: Off-Context GRPO (AgPriyank/OC-GRPO), its fixed variant: every question the
  `guide` stage unlocked also gets a guided row, sampled with a prefix of the reference solution
  in the prompt and trained on the unguided prompt with per-token importance weights
  (`train.oc_grpo`; grpo_core.training.guidance, grpo_core.algorithms.offcontext).
"""

from __future__ import annotations

from typing import Any

_GRPO: dict[str, Any] = {
    "advantage": "grpo",
    "loss_agg": "token-mean",
    "clip_high": 0.2,
    "filter_zero_std": False,
    "dynamic_sampling": False,
    "overlong_filter": False,
    "dual_clip": None,
    "entropy_coef": 0.0,
    "codapo.enabled": False,
    "oc_grpo.mode": "off",
}

PRESETS: dict[str, dict[str, Any]] = {
    "grpo": _GRPO,
    "dr_grpo": {
        **_GRPO,
        "advantage": "dr_grpo",
        "loss_agg": "seq-mean-token-sum-norm",
        "filter_zero_std": True,
    },
    "dapo": {**_GRPO, "clip_high": 0.28, "dynamic_sampling": True},
    "codapo": {**_GRPO, "codapo.enabled": True, "dual_clip": 3.0, "entropy_coef": 0.001},
    "oc_grpo": {**_GRPO, "oc_grpo.mode": "fixed"},
}
# The values `algo` takes: a new preset above is a new `algo`.
ALGOS = tuple(PRESETS)


# The `reward` knobs a preset decides (keys of the `reward` section, null in params.yaml); a
# preset not listed here, and every key it does not name, takes `_NO_SHAPING`'s value.
_NO_SHAPING: dict[str, Any] = {"weights.overlong": 0.0}
REWARD_PRESETS: dict[str, dict[str, Any]] = {
    # DAPO sec. 3.4, eq. 13: the soft overlong punishment, 0 down to -1, added to a correctness
    # reward of +1 / -1. Ours is 1 / 0 (weights.correct 1): half DAPO's gap, so half its weight
    # keeps the ratio, and after group normalisation the advantages are DAPO's.
    "dapo": {"weights.overlong": 0.5},
}
# `reward.overlong_cache` when null, for every preset: this share of train.max_new_tokens, as
# DAPO's cache is 4,096 of its 20,480-token budget.
OVERLONG_CACHE_SHARE = 0.2


def overlong_cache(max_new_tokens: int) -> int:
    """The overlong punishment's cache for a generation budget: `OVERLONG_CACHE_SHARE` of it,
    rounded, at least 1 token."""
    return max(1, round(OVERLONG_CACHE_SHARE * max_new_tokens))


def apply_preset(algo: str, train: dict[str, Any]) -> dict[str, Any]:
    """`train` with every preset knob that is missing or null filled from `PRESETS[algo]`.

    Keys with a dot name a field of a subsection (`codapo.enabled`). Unknown `algo` values are
    left for validation to report.
    """
    preset = PRESETS.get(algo)
    if preset is None:
        return train
    return _fill(train, preset)


def apply_reward_preset(algo: str, reward: dict[str, Any], max_new_tokens: int) -> dict[str, Any]:
    """`reward` with every preset knob that is missing or null filled: from
    `REWARD_PRESETS[algo]` over `_NO_SHAPING`, and `overlong_cache` from the generation budget
    `max_new_tokens` (`overlong_cache`). `reward.code` is left as it is."""
    out = _fill(reward, {**_NO_SHAPING, **REWARD_PRESETS.get(algo, {})})
    if out.get("overlong_cache") is None:
        out["overlong_cache"] = overlong_cache(max_new_tokens)
    return out


def _fill(params: dict[str, Any], preset: dict[str, Any]) -> dict[str, Any]:
    """`params` (one section) with each of `preset`'s keys that is missing or null filled."""
    out = dict(params)
    for key, value in preset.items():
        section, _, leaf = key.rpartition(".")
        target = out
        if section:
            sub = out.get(section)
            if sub is not None and not isinstance(sub, dict):
                continue  # validation reports the wrong type
            target = out[section] = dict(sub or {})
        if target.get(leaf) is None:
            target[leaf] = value
    return out
