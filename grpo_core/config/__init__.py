"""params.yaml, one module per section, each field documented where it is declared.

`core` holds what every section shares (the base class, field types, the top-level key names,
parsing with messages that name the key). Each section's module ends with the view of the
stage that reads it (`PrepareStage` in `data`, `EvaluateStage` in `eval`, ...), so a stage's
code dependencies are the sections it reads and nothing else. `params` is the whole file, for
tests and tools.

Imports: `grpo_core.errors`, `grpo_core.algorithms.presets` (the `algo` presets)."""
