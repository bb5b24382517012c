"""The RL loop: `GRPOTrainer.step` (sample, reward, guide or resample, advantages, update, log),
the clipped policy-gradient update, data parallelism behind a small interface (accelerate, DDP,
DeepSpeed ZeRO), LoRA, checkpoints and the resume state of a stopped run.

Imports: everything above it in `grpo_core`; only `stages.train` imports it."""
