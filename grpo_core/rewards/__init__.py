"""Verifiable rewards: math (math-verify), multiple choice (the answer letter), code (tests run
in a sandboxed subprocess), and the shaping terms (format, DAPO's overlong punishment) that the
training reward adds to the verifier's.

Imports: `grpo_core.errors`, `grpo_core.config`. A new reward lives here, registered by domain
in `verify` (docs/architecture.md)."""
