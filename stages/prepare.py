"""prepare: params `data`, `seed`, local dataset files under data/raw/ ->
data/prepared/{train,eval}.parquet: the tiny-world domains and any real datasets, in one
problem schema, every gold answer checked by its verifier's parser; data/prepared/sources.json:
where each real dataset was read (a package file with its sha256 and licence, a local file, the
hub), by split."""

from __future__ import annotations

from grpo_core.config.data import DatasetSpec, PrepareStage
from grpo_core.data.adapters.registry import ADAPTERS, benchmark_provenance, load_benchmark
from grpo_core.data.schema import problems_table
from grpo_core.data.tiny import arith, code, mcq
from grpo_core.errors import InputError
from grpo_core.io import write_json, write_parquet
from grpo_core.rewards.verify import check_gold
from stages.common import log, main

GENERATORS = {"arith": arith.generate_level, "mcq": mcq.generate_level, "code": code.generate_level}


def _check_specs(key: str, specs: list[DatasetSpec]) -> None:
    for i, spec in enumerate(specs):
        if spec.name not in ADAPTERS:
            raise InputError(
                f"data.{key}[{i}].name: unknown dataset {spec.name!r}; known: {sorted(ADAPTERS)}"
            )


def prepare(params: PrepareStage) -> None:
    cfg = params.data
    _check_specs("train", cfg.train)
    _check_specs("eval", cfg.eval)
    splits: dict[str, list[dict]] = {"train": [], "eval": []}
    sources: dict[str, dict] = {"train": {}, "eval": {}}
    for domain in cfg.domains:
        for level in cfg.levels:
            rows = GENERATORS[domain](level, cfg.train_per_level, cfg.eval_per_level, params.seed)
            for split, split_rows in rows.items():
                splits[split].extend(split_rows)
    for split, specs in (("train", cfg.train), ("eval", cfg.eval)):
        for spec in specs:
            rows = load_benchmark(spec.name, spec.path, spec.split, spec.limit, params.seed)
            sources[split][spec.name] = benchmark_provenance(spec.name, spec.path)
            log.info("%s (%s): %d problems", spec.name, spec.path or "hub", len(rows))
            splits[split].extend(rows)
    for split, rows in splits.items():
        seen: set[str] = set()
        for row in rows:
            if row["id"] in seen:
                raise InputError(f"{split} split: problem id {row['id']!r} appears twice")
            seen.add(row["id"])
            check_gold(row)
    tables = {split: problems_table(rows) for split, rows in splits.items()}
    for split, table in tables.items():
        write_parquet(table, f"data/prepared/{split}.parquet")
        log.info("data/prepared/%s.parquet: %d problems", split, table.num_rows)
    write_json(sources, "data/prepared/sources.json")


if __name__ == "__main__":
    main(prepare, PrepareStage)
