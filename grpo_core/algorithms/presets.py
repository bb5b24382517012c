"""The named algorithm presets behind the top-level `algo` param.

A preset is a set of values for the `train` knobs that define an algorithm. In `params.yaml`
those knobs are `null`, meaning "the preset's value"; any of them set to a value overrides the
preset (`dvc exp run -S algo=dapo -S train.clip_high=0.3`). Everything else in `train`
(learning rate, group size, budget) is shared by all presets, so two presets at the same
params spend the same rollout budget, except where the algorithm itself draws more
(DAPO's dynamic sampling, OC-GRPO's guided re-rolls: both logged as `num_rollouts`).

- `grpo`: DeepSeekMath (Shao et al., 2024), sec. 4.1: group-normalised advantages, PPO clip
  0.2, here with the token-mean aggregation that TRL and verl use by default, and groups whose
  rewards are all equal left out of the token count (their advantage is 0 anyway).
- `dr_grpo`: "Understanding R1-Zero-Like Training" (Liu et al., 2025), sec. 3.1: no std in the
  advantage, token sums normalised by the constant generation budget.
- `dapo`: DAPO (Yu et al., 2025), sec. 3: clip-higher (0.2 / 0.28), token-mean, dynamic
  sampling (refill with informative groups) and overlong filtering (sec. 3.4; DAPO's final
  recipe uses soft overlong punishment instead, a reward-shaping term).
- `codapo`: CoDaPO: GRPO whose advantages are scaled by a per-question value from rollout
  confidence and empirical difficulty, and whose next mini-batch repeats the high-value,
  learnable questions (`train.codapo`; grpo_core.algorithms.codapo).
- `oc_grpo`: Off-Context GRPO: GRPO where a group whose rollouts all fail is re-rolled with a
  prefix of the reference solution, and the importance-corrected loss trains the unguided
  prompt (`train.oc_grpo`; grpo_core.algorithms.offcontext).
"""

from __future__ import annotations

from typing import Any

_GRPO: dict[str, Any] = {
    "advantage": "grpo",
    "loss_agg": "token-mean",
    "clip_high": 0.2,
    "filter_zero_std": True,
    "dynamic_sampling": False,
    "overlong_filter": False,
    "codapo.enabled": False,
    "oc_grpo.mode": "off",
}

PRESETS: dict[str, dict[str, Any]] = {
    "grpo": _GRPO,
    "dr_grpo": {**_GRPO, "advantage": "dr_grpo", "loss_agg": "seq-mean-token-sum-norm"},
    "dapo": {**_GRPO, "clip_high": 0.28, "dynamic_sampling": True, "overlong_filter": True},
    "codapo": {**_GRPO, "codapo.enabled": True},
    "oc_grpo": {**_GRPO, "oc_grpo.mode": "fixed"},
}
# The values `algo` takes: a new preset above is a new `algo`.
ALGOS = tuple(PRESETS)


def apply_preset(algo: str, train: dict[str, Any]) -> dict[str, Any]:
    """`train` with every preset knob that is missing or null filled from `PRESETS[algo]`.

    Keys with a dot name a field of a subsection (`codapo.enabled`). Unknown `algo` values are
    left for validation to report.
    """
    preset = PRESETS.get(algo)
    if preset is None:
        return train
    out = dict(train)
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
