"""The math of RL fine-tuning, as pure functions over padded (batch, tokens) tensors with masks
(verl's `core_algos` discipline): advantage estimators and policy losses registered by name,
CoDaPO's question values, Off-Context GRPO's hints and importance weights, and the
named presets behind the top-level `algo` param (`presets`).

Imports: torch and `grpo_core.registry` only. A new algorithm lives here: its functions in a
module of its own (registered where it is an advantage or a loss), its knobs in
`grpo_core.config.train`, its preset in `presets` (docs/architecture.md)."""
