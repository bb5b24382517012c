"""Problems: the unified problem schema every source maps to, the prompt templates, the real
benchmark adapters (by family: math, multiple choice, code) and the tiny world's generators.

Imports: `grpo_core.errors`, `grpo_core.config`, `grpo_core.rewards` (gold answers are read by
their verifiers). A new benchmark is an adapter in `adapters` (docs/architecture.md)."""
