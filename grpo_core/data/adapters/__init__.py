"""Real benchmarks mapped to the unified problem schema (`grpo_core.data.schema.PROBLEM_SCHEMA`).

- `base`: the `Adapter` record, `RowError`, the helpers row mappers read cells with, and the
  conventions of the mapped rows;
- `math`, `mcq`, `code`: the row mappers of each benchmark family;
- `registry`: `ADAPTERS`, every benchmark by name, and `load_benchmark`, which reads one from
  the hub or a local file.

A new benchmark is a row mapper `to_row(row, index, seed)` in the module of its family (a new
family gets a module of its own) and one `Adapter` entry in `registry.ADAPTERS`
(docs/architecture.md).
"""
