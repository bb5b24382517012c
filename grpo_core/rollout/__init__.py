"""Sampling completions and scoring them: the padded `Rollouts` layout (`rollouts`), calling the
model with a group's prompt computed once (`forward`), the KV-cache sampler with per-group random
streams (`sampler`), token log-probs and entropies (`scoring`), and the rollout backends: the
training model itself (`backends`, with the contract every backend's rollouts pass) or a
colocated vLLM engine (`vllm`).

Imports: torch and transformers, `grpo_core.errors`. Rewards are not computed here."""
