"""Sampling completions and scoring them: the padded `Rollouts` layout, the KV-cache sampler
(per-group random streams), token log-probs and entropies, and the rollout backends (the
training model itself, or a colocated vLLM engine).

Imports: torch and transformers, `grpo_core.errors`. Rewards are not computed here."""
