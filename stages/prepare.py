"""prepare: params `data`, `seed` -> data/prepared/{train,eval}.parquet"""

from __future__ import annotations

from grpo_core.config import Params
from grpo_core.io import write_parquet
from grpo_core.schema import problems_table
from grpo_core.tiny import arith
from stages.common import log, main

GENERATORS = {"arith": arith.generate_level}


def prepare(params: Params) -> None:
    splits: dict[str, list[dict]] = {"train": [], "eval": []}
    for domain in params.data.domains:
        for level in params.data.levels:
            rows = GENERATORS[domain](
                level, params.data.train_per_level, params.data.eval_per_level, params.seed
            )
            for split, split_rows in rows.items():
                splits[split].extend(split_rows)
    tables = {split: problems_table(rows) for split, rows in splits.items()}
    for split, table in tables.items():
        write_parquet(table, f"data/prepared/{split}.parquet")
        log.info("data/prepared/%s.parquet: %d problems", split, table.num_rows)


if __name__ == "__main__":
    main(prepare)
