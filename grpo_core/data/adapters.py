"""Real benchmarks mapped to the unified problem schema (`grpo_core.data.schema.PROBLEM_SCHEMA`).

Each entry of `ADAPTERS` names a benchmark: its default Hugging Face hub id, config(s) and
split, its domain, the columns it needs and a row-mapping function. `load_benchmark` reads the
rows through `datasets`, either from the hub or from a local file (parquet, json/jsonl, csv) or
a directory of such files, in which case nothing touches the network. The local file must have
the dataset's real column layout, as on the hub.

Conventions of the rows it returns:

- `source` is the adapter name (the key in metrics/eval.json); `id` is
  `f"{source}-{original id}"`, or `f"{source}-{row index}"` when the dataset has no id (the
  index in the file, before any filtering); ids are unique.
- `level` is the dataset's difficulty level when it has one (MATH: 1..5, "Level ?" -> 0), else 0
  ("no level").
- `meta` is a JSON object with source-specific fields (subject, type, url, year, ...).
- math: `answer` is the bare gold answer as math-verify reads it ("85", "\\frac{1}{2}"); numbers
  stored as floats are written without a trailing ".0"; OlympiadBench's `final_answer` list is
  stripped of surrounding `$` and joined with ", ". `solution` is the reference solution, or ""
  when the dataset has none. GSM8K's solution ends with "The final answer is \\boxed{N}." in
  place of its "#### N" line, and its calculator annotations `<<...>>` are removed, so that it is
  a completion the math prompt asks for (an SFT target and a guidance prefix).
- mcq: `answer` is the gold letter ("A".."J"); the prompt lists the options as "A) text" lines
  and asks for a last line "Answer: X"; `meta["options"]` holds the option texts in that order.
  GPQA ships the correct answer first, so its options are shuffled deterministically from
  (seed, Record ID); its solution is the explanation followed by "Answer: X".
- code: `answer` is a JSON string `{"entry_point", "tests", "setup", "prefix"}`: the function
  the program must define, one Python statement per test, code to run before the tests, and
  code to prepend when the completion does not define `entry_point` (HumanEval's prompt).
  `solution` is the canonical solution (for HumanEval, the body that continues `prefix`).

A row whose gold answer is empty or has no recognisable form (GSM8K without "####", a MATH
solution without `\\boxed{}`, an MCQ key that is not one of the options, a code task without
tests) raises InputError naming the file and the row index: rows are never dropped silently.
"""

from __future__ import annotations

import ast
import builtins
import hashlib
import json
import math
import random
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grpo_core.data import prompts
from grpo_core.data.prompts import OPTION_LETTERS
from grpo_core.errors import InputError
from grpo_core.rewards.verifiers import last_boxed

Row = Mapping[str, Any]
# to_row(row, index, seed) -> fields of the mapped row, or None for a row outside the benchmark
# (an MMLU subject that is not STEM). The fields: key (id without the source prefix), level,
# prompt, answer, solution, meta (a dict).
RowMapper = Callable[[Row, int, int], "dict[str, Any] | None"]


class RowError(ValueError):
    """A row cannot be mapped; `load_benchmark` adds the file and the row index."""


@dataclass(frozen=True)
class Adapter:
    hub_id: str
    config: str | tuple[str, ...] | None  # a tuple: each config is loaded, then concatenated
    split: str
    domain: str  # math | mcq | code
    columns: tuple[tuple[str, ...], ...]  # needed columns; each entry lists accepted names
    to_row: RowMapper


# ---------------------------------------------------------------------------------------------
# Field helpers


def _col(row: Row, *names: str) -> Any:
    """The value of the first of `names` that is a column of `row` (None if none is)."""
    for name in names:
        if name in row:
            return row[name]
    return None


def _text(value: Any) -> str:
    """A cell as text: None and NaN are "", integral floats lose their ".0"."""
    if value is None:
        return ""
    if isinstance(value, float):
        if math.isnan(value):
            return ""
        # Parquet/pandas store integer answers of a column with a missing value as floats.
        return str(int(value)) if value.is_integer() else repr(value)
    return str(value).strip()


def _required(row: Row, names: Sequence[str], what: str) -> str:
    text = _text(_col(row, *names))
    if not text:
        raise RowError(f"empty {what} (column {names[0]!r})")
    return text


def _present(meta: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in meta.items() if v not in (None, "", [])}


def _math(key: Any, problem: str, answer: str, solution: str, level: int, meta: dict) -> dict:
    return {
        "key": key,
        "level": level,
        "prompt": prompts.math_prompt(problem),
        "answer": answer,
        "solution": solution,
        "meta": _present(meta),
    }


# ---------------------------------------------------------------------------------------------
# Math


def _gsm8k(row: Row, index: int, seed: int) -> dict:
    question = _required(row, ["question"], "question")
    rationale, sep, final = _text(row["answer"]).rpartition("####")
    answer = final.strip().replace(",", "")
    if not sep or not answer:
        raise RowError("the answer has no final '#### <number>' line")
    rationale = re.sub(r"<<[^>]*>>", "", rationale).strip()
    solution = f"{rationale}\nThe final answer is \\boxed{{{answer}}}."
    return _math(index, question, answer, solution, 0, {})


_MATH_LEVEL = re.compile(r"Level\s+(\d+|\?)")


def _math_level(value: Any) -> int:
    if isinstance(value, int):
        return value
    match = _MATH_LEVEL.fullmatch(_text(value))
    if not match:
        raise RowError(f"level {value!r} is neither 'Level N' nor 'Level ?'")
    return 0 if match.group(1) == "?" else int(match.group(1))


def _math_train(row: Row, index: int, seed: int) -> dict:
    solution = _required(row, ["solution"], "solution")
    answer = last_boxed(solution)
    if not answer:
        raise RowError("the solution has no \\boxed{} answer")
    meta = {"type": _text(row["type"])}
    problem = _required(row, ["problem"], "problem")
    return _math(index, problem, answer, solution, _math_level(row["level"]), meta)


def _math500(row: Row, index: int, seed: int) -> dict:
    meta = {"subject": _text(row["subject"])}
    return _math(
        _text(row["unique_id"]),
        _required(row, ["problem"], "problem"),
        _required(row, ["answer"], "answer"),
        _text(row.get("solution")),
        _math_level(row["level"]),
        meta,
    )


def _competition(problem_cols: Sequence[str], id_cols: Sequence[str]) -> RowMapper:
    """AIME/AMC-style rows: a problem, a short answer, maybe an id, solution, url and year."""

    def to_row(row: Row, index: int, seed: int) -> dict:
        key = _text(_col(row, *id_cols)) or index
        meta = {"url": _text(row.get("url")), "year": _text(row.get("year"))}
        return _math(
            key,
            _required(row, problem_cols, "problem"),
            _required(row, ["answer", "Answer"], "answer"),
            _text(_col(row, "solution", "Solution")),
            0,
            meta,
        )

    return to_row


def _olympiadbench(row: Row, index: int, seed: int) -> dict:
    finals = row["final_answer"]
    finals = [finals] if isinstance(finals, str) else list(finals or [])
    answers = [_text(a).strip("$").strip() for a in finals]
    answers = [a for a in answers if a]
    if not answers:
        raise RowError("empty final_answer")
    problem = _required(row, ["question"], "question")
    context = _text(row.get("context"))
    if context:
        problem = f"{context}\n{problem}"
    solutions = row.get("solution")
    solutions = [solutions] if isinstance(solutions, str) else list(solutions or [])
    meta = {
        k: row.get(k)
        for k in ("subfield", "answer_type", "unit", "is_multiple_answer", "error", "language")
    }
    return _math(
        _text(row.get("id")) or index,
        problem,
        ", ".join(answers),
        "\n\n".join(_text(s) for s in solutions),
        0,
        meta,
    )


# ---------------------------------------------------------------------------------------------
# Multiple choice


def _mcq(key: Any, question: str, options: list[str], gold: int, solution: str, meta: dict) -> dict:
    if not options[gold]:
        raise RowError(f"the correct option ({OPTION_LETTERS[gold]}) is empty")
    return {
        "key": key,
        "level": 0,
        "prompt": prompts.mcq_prompt(question, options),
        "answer": OPTION_LETTERS[gold],
        "solution": solution,
        "meta": _present({**meta, "options": options}),
    }


def _options(values: Any, what: str) -> list[str]:
    options = [_text(v) for v in (values or [])]
    if not 2 <= len(options) <= len(OPTION_LETTERS):
        raise RowError(f"{what} must be 2 to {len(OPTION_LETTERS)} options, got {options!r}")
    return options


def shuffled_order(n: int, key: str, seed: int) -> list[int]:
    """A permutation of range(n) fixed by (seed, key): the same on every run and machine."""
    digest = hashlib.sha256(f"{seed}:{key}".encode()).digest()
    order = list(range(n))
    random.Random(int.from_bytes(digest[:8], "big")).shuffle(order)
    return order


def _gpqa(row: Row, index: int, seed: int) -> dict:
    key = _text(row.get("Record ID")) or index
    columns = ["Correct Answer", "Incorrect Answer 1", "Incorrect Answer 2", "Incorrect Answer 3"]
    choices = _options([row[c] for c in columns], "the four answers")
    order = shuffled_order(len(choices), str(key), seed)
    options = [choices[i] for i in order]
    gold = order.index(0)
    explanation = _text(row.get("Explanation"))
    solution = f"{explanation}\n\nAnswer: {OPTION_LETTERS[gold]}" if explanation else ""
    meta = {
        "high_level_domain": _text(row.get("High-level domain")),
        "subdomain": _text(row.get("Subdomain")),
    }
    question = _required(row, ["Question"], "Question")
    return _mcq(key, question, options, gold, solution, meta)


def _arc(row: Row, index: int, seed: int) -> dict:
    choices = row["choices"] or {}
    options = _options(choices.get("text"), "choices.text")
    labels = [_text(label) for label in choices.get("label") or []]
    answer_key = _text(row["answerKey"])
    # Some ARC questions are labelled 1-4 instead of A-D: the letter is the option's position.
    if len(labels) != len(options) or answer_key not in labels:
        raise RowError(f"answerKey {answer_key!r} is not one of the labels {labels!r}")
    question = _required(row, ["question"], "question")
    key = _text(row.get("id")) or index
    return _mcq(key, question, options, labels.index(answer_key), "", {})


# STEM subjects as grouped by common harnesses (lm-evaluation-harness `mmlu_stem`,
# OpenCompass `mmlu-stem`): the MMLU paper's STEM categories plus anatomy.
MMLU_STEM_SUBJECTS = frozenset(
    {
        "abstract_algebra",
        "anatomy",
        "astronomy",
        "college_biology",
        "college_chemistry",
        "college_computer_science",
        "college_mathematics",
        "college_physics",
        "computer_security",
        "conceptual_physics",
        "electrical_engineering",
        "elementary_mathematics",
        "high_school_biology",
        "high_school_chemistry",
        "high_school_computer_science",
        "high_school_mathematics",
        "high_school_physics",
        "high_school_statistics",
        "machine_learning",
    }
)


def _mmlu_stem(row: Row, index: int, seed: int) -> dict | None:
    subject = _text(row["subject"])
    if subject not in MMLU_STEM_SUBJECTS:
        return None
    options = _options(row["choices"], "choices")
    answer = row["answer"]
    # cais/mmlu stores a ClassLabel index; some copies store the letter.
    gold = answer
    if isinstance(answer, str):
        gold = OPTION_LETTERS.index(answer) if len(answer) == 1 and answer in OPTION_LETTERS else -1
    if not isinstance(gold, int) or not 0 <= gold < len(options):
        raise RowError(f"answer {answer!r} is not one of the {len(options)} options")
    question = _required(row, ["question"], "question")
    return _mcq(index, question, options, gold, "", {"subject": subject})


# ---------------------------------------------------------------------------------------------
# Code


def _code(
    key: Any,
    prompt: str,
    entry_point: str,
    tests: list[str],
    setup: str,
    prefix: str,
    solution: str,
    meta: dict,
) -> dict:
    if not tests:
        raise RowError("no tests")
    answer = {"entry_point": entry_point, "tests": tests, "setup": setup, "prefix": prefix}
    return {
        "key": key,
        "level": 0,
        "prompt": prompt,
        "answer": json.dumps(answer, ensure_ascii=False),
        "solution": solution,
        "meta": _present(meta),
    }


class _Rename(ast.NodeTransformer):
    def __init__(self, old: str, new: str) -> None:
        self.old, self.new = old, new

    def visit_Name(self, node: ast.Name) -> ast.Name:
        if node.id == self.old:
            node.id = self.new
        return node


def humaneval_tests(test: str, entry_point: str) -> tuple[list[str], str]:
    """(tests, setup) from a HumanEval `test` source.

    When `check(candidate)` is only assert statements, each becomes one test with `candidate`
    renamed to the entry point, and the module-level statements (METADATA, imports, helpers)
    become the setup; otherwise the single test `check(entry_point)` runs the whole source,
    which is then the setup.
    """
    try:
        tree = ast.parse(test)
    except SyntaxError as exc:
        raise RowError(f"the test source does not parse: {exc}") from None
    checks = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "check"]
    if len(checks) == 1 and len(checks[0].args.args) == 1:
        check = checks[0]
        body = check.body
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            body = body[1:]  # a docstring is not a test
        if body and all(isinstance(stmt, ast.Assert) for stmt in body):
            rename = _Rename(check.args.args[0].arg, entry_point)
            tests = [ast.unparse(rename.visit(stmt)) for stmt in body]
            setup = [ast.get_source_segment(test, n) for n in tree.body if n is not check]
            return tests, "\n".join(s for s in setup if s)
    return [f"check({entry_point})"], test


def _humaneval(row: Row, index: int, seed: int) -> dict:
    entry_point = _required(row, ["entry_point"], "entry_point")
    _required(row, ["prompt"], "prompt")
    _required(row, ["test"], "test")
    # Verbatim, not stripped: the canonical solution continues the prompt's last line.
    prefix = row["prompt"]
    tests, setup = humaneval_tests(row["test"], entry_point)
    return _code(
        _text(row["task_id"]) or index,
        prompts.continuation_prompt(prefix),
        entry_point,
        tests,
        setup,
        prefix,
        row.get("canonical_solution") or "",
        {},
    )


_BUILTINS = frozenset(dir(builtins))


def _mbpp_entry_point(tests: list[str], code: str) -> str:
    """The function the first test calls that `code` defines; failing that, the first
    non-builtin function it calls; failing that, the first function `code` defines."""
    try:
        defined = [
            n.name
            for n in ast.parse(code).body
            if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
        ]
    except SyntaxError:
        defined = []
    try:
        calls = [
            n.func.id
            for n in ast.walk(ast.parse(tests[0]))
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
        ]
    except SyntaxError as exc:
        raise RowError(f"the first test does not parse: {exc}") from None
    for name in calls:
        if name in defined:
            return name
    for name in calls:
        if name not in _BUILTINS:
            return name
    if defined:
        return defined[0]
    raise RowError("cannot tell which function the tests call")


def _mbpp(row: Row, index: int, seed: int) -> dict:
    # Both layouts: full (text, test_setup_code, challenge_test_list) and sanitized (prompt,
    # test_imports). MBPP ships Windows line endings in its code.
    tests = [_text(t) for t in row.get("test_list") or [] if _text(t)]
    if not tests:
        raise RowError("empty test_list")
    code = (row.get("code") or "").replace("\r\n", "\n")
    entry_point = _mbpp_entry_point(tests, code)
    if "test_setup_code" in row:
        setup = _text(row["test_setup_code"]).replace("\r\n", "\n")
    else:
        setup = "\n".join(_text(t) for t in row.get("test_imports") or [])
    task = _required(row, ["text", "prompt"], "task text")
    challenge = [_text(t) for t in row.get("challenge_test_list") or [] if _text(t)]
    return _code(
        _text(row["task_id"]) or index,
        prompts.code_prompt(task, entry_point, tests[:1]),
        entry_point,
        tests,
        setup,
        "",
        code,
        {"challenge_tests": challenge},
    )


# ---------------------------------------------------------------------------------------------
# Registry

ADAPTERS: dict[str, Adapter] = {
    "gsm8k": Adapter("openai/gsm8k", "main", "test", "math", (("question",), ("answer",)), _gsm8k),
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
        _math_train,
    ),
    "math500": Adapter(
        "HuggingFaceH4/MATH-500",
        None,
        "test",
        "math",
        (("problem",), ("answer",), ("subject",), ("level",), ("unique_id",)),
        _math500,
    ),
    # HuggingFaceH4/aime_2024 (id, problem, solution, answer, url, year); Maxwell-Jia/AIME_2024
    # capitalises its columns (ID, Problem, Solution, Answer).
    "aime24": Adapter(
        "HuggingFaceH4/aime_2024",
        None,
        "train",
        "math",
        (("problem", "Problem"), ("answer", "Answer")),
        _competition(["problem", "Problem"], ["id", "ID"]),
    ),
    # opencompass/AIME2025 ships AIME I and II as two configs of (question, answer) rows;
    # math-ai/aime25's (id, problem, answer) layout is accepted too.
    "aime25": Adapter(
        "opencompass/AIME2025",
        ("AIME2025-I", "AIME2025-II"),
        "test",
        "math",
        (("question", "problem"), ("answer",)),
        _competition(["question", "problem"], ["id"]),
    ),
    # math-ai/amc23 (id, question, answer, url); AI-MO/aimo-validation-amc names it `problem`.
    "amc23": Adapter(
        "math-ai/amc23",
        None,
        "test",
        "math",
        (("question", "problem"), ("answer",)),
        _competition(["question", "problem"], ["id"]),
    ),
    "minerva_math": Adapter(
        "math-ai/minervamath",
        None,
        "test",
        "math",
        (("question", "problem"), ("answer",)),
        _competition(["question", "problem"], ["id"]),
    ),
    "olympiadbench": Adapter(
        "Hothan/OlympiadBench",
        "OE_TO_maths_en_COMP",
        "train",
        "math",
        (("question",), ("final_answer",)),
        _olympiadbench,
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
        _gpqa,
    ),
    "arc_challenge": Adapter(
        "allenai/ai2_arc",
        "ARC-Challenge",
        "test",
        "mcq",
        (("question",), ("choices",), ("answerKey",)),
        _arc,
    ),
    "mmlu_stem": Adapter(
        "cais/mmlu",
        "all",
        "test",
        "mcq",
        (("question",), ("subject",), ("choices",), ("answer",)),
        _mmlu_stem,
    ),
    "humaneval": Adapter(
        "openai/openai_humaneval",
        "openai_humaneval",
        "test",
        "code",
        (("task_id",), ("prompt",), ("test",), ("entry_point",)),
        _humaneval,
    ),
    "mbpp": Adapter(
        "google-research-datasets/mbpp",
        "full",
        "test",
        "code",
        (("task_id",), ("text", "prompt"), ("code",), ("test_list",)),
        _mbpp,
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


def _load(adapter: Adapter, path: str | Path | None, split: str | None) -> tuple[Any, str]:
    """The dataset, and how error messages name where it came from."""
    import datasets  # heavy; only the stages that read benchmarks pay for it

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
            detail = exc.__cause__ or exc
            raise InputError(f"{path}: cannot be read as {builder}: {detail}") from None
        return ds, str(path)
    split = split or adapter.split
    configs = adapter.config if isinstance(adapter.config, tuple) else (adapter.config,)
    parts = [datasets.load_dataset(adapter.hub_id, c, split=split) for c in configs]
    ds = parts[0] if len(parts) == 1 else datasets.concatenate_datasets(parts)
    shown = "+".join(c for c in configs if c)
    return ds, f"{adapter.hub_id}" + (f" [{shown}]" if shown else "") + f" split {split}"


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
    ds, where = _load(adapter, path, split)
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
