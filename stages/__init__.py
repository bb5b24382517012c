"""One thin module per DVC stage: read params and inputs, call grpo_core, write outputs."""
