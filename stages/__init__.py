"""One thin module per DVC stage: read params and inputs, call grpo_core, write outputs.

Importing this package sets the CPU kernels and thread count that params.yaml's `numerics` and
`threads` name (grpo_core/config/runtime.py), before torch, MKL or oneDNN is loaded: they read
them once, when they load."""

from grpo_core.config.runtime import apply as _apply_runtime

_apply_runtime()
