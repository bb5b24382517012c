"""Where a model comes from: the tiny world's character tokenizer and small decoder, a local
directory or a hub id (resolved and recorded), and the supervised warm start (SFT).

Imports: `grpo_core.errors`, `grpo_core.config`."""
