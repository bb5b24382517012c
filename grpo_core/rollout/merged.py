"""The merged-LoRA rollout backend (`train.rollout_backend=hf_merged`): a LoRA policy samples
through a copy of itself whose adapters are merged into its weights.

Sampling through unmerged adapters runs every adapted linear layer three times per token (the
base matmul and the two low-rank ones); on SmolLM2-135M with LoRA r 16 on every linear layer,
bf16, that is 12.4 s of generation a step against 10.1 s from the merged copy, and 46.8 s
against 46.0 s for the whole step (benchmarks/results/smollm2-step-merged.md). vLLM's backend and
verl's rollout workers sample from merged weights for the same reason. `MergedLoRABackend`
keeps one copy of the model in the policy's dtype, its weights set to W + scale * B @ A by
`grpo_core.rollout.vllm.policy_weights` (the policy itself untouched: no merge/unmerge round
trip, which is not exact in bf16) after every optimizer step, and samples with the pipeline's
own sampler, with the per-group random streams the trainer passes.

Its log-probs are the copy's. In float32 they equal the policy's to rounding; in bfloat16 the
merged weight is rounded once to bf16 where the policy adds a float32 delta to a bf16 weight, so
the trainer scores pi_old with the policy and corrects the difference with the truncated
importance weights of `backends.truncated_is_weights`, as for vLLM.
"""

from __future__ import annotations

import copy

import torch

from grpo_core.errors import InputError
from grpo_core.rollout import sampler
from grpo_core.rollout.rollouts import Rollouts
from grpo_core.rollout.vllm import _unwrap_for_weights, policy_weights


def merged_copy(policy) -> torch.nn.Module:
    """A plain Hugging Face model shaped as `policy`'s base, in its dtype, with `policy`'s
    weights (LoRA merged), frozen and in eval mode. InputError unless `policy` has LoRA
    adapters (without them the policy itself is what this copy would be)."""
    model = _unwrap_for_weights(policy)
    if not (hasattr(model, "peft_config") and hasattr(model, "get_base_model")):
        raise InputError(
            "train.rollout_backend=hf_merged samples from a copy with the LoRA adapters merged: "
            "it needs train.lora.enabled: true (without LoRA use rollout_backend=hf)"
        )
    if any(hasattr(q, "ds_id") for q in model.parameters()):
        raise InputError(
            "train.rollout_backend=hf_merged keeps a whole copy of the model in each process: "
            "not with DeepSpeed ZeRO-3 (launch.zero_stage=3), whose processes hold shards"
        )
    copied = copy.deepcopy(model).merge_and_unload()
    copied.eval().requires_grad_(False)
    return copied


class MergedLoRABackend:
    """Samples with `merged_copy(policy)`, refreshed from the policy by `sync_weights`."""

    def __init__(self, policy, tokenizer, draw: str = "multinomial", compact: bool = False):
        self.model = merged_copy(policy)
        self.tokenizer = tokenizer
        self.draw, self.compact = draw, compact
        self._params = dict(self.model.named_parameters())
        # Per weight of the copy, the policy tensor it was last copied from and that tensor's
        # version counter (which every in-place change moves: optimizer steps, loads).
        self._sources: dict[str, tuple[int, int]] = {}

    @torch.no_grad()
    def sync_weights(self, model) -> None:
        """Every weight of the copy from the policy's, LoRA merged (`policy_weights`); a name
        the copy lacks is an error, not a silently stale weight. A weight whose policy tensor
        is the one last copied, unchanged since (a frozen weight of a LoRA policy), is not
        copied again: after the first sync only the merged layers and whatever else trains
        are, not the 270 MB of SmolLM2's frozen weights."""
        seen = set()
        # A merged weight is a new tensor each time, which may reuse a freed one's memory (and
        # version 0): only the policy's own parameters are skipped.
        live = {q.data_ptr() for q in model.parameters()}
        for name, tensor in policy_weights(model):
            if name not in self._params:
                raise KeyError(f"the merged copy has no weight {name!r}")
            source = (tensor.data_ptr(), tensor._version)
            if source[0] not in live or self._sources.get(name) != source:
                self._params[name].copy_(tensor)
                self._sources[name] = source
            seen.add(name)
        missing = set(self._params) - seen
        if missing:
            raise KeyError(f"the policy gave no weights for {sorted(missing)[:3]}")

    def generate(
        self,
        prompts: list[str],
        num_samples: int,
        temperature: float,
        max_new_tokens: int,
        greedy: bool = False,
        generators: list[torch.Generator] | None = None,
    ) -> Rollouts:
        """The pipeline's sampler on the merged copy (`generators`: one stream per prompt, as
        the policy would sample; `draw` as `train.draw`). It records the copy's log-probs
        (the importance weights' q) but not its entropies: the trainer scores the policy's."""
        return sampler.generate(
            self.model,
            self.tokenizer,
            prompts,
            num_samples,
            temperature,
            max_new_tokens,
            greedy=greedy,
            generators=generators,
            draw=self.draw,
            record="logp",
            compact=self.compact,
        )
