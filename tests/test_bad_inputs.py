"""Bad inputs, one table: what a user did wrong, the stage that meets it, and what it says.

Every row runs a real stage (`python -m stages.<name>`) in its own copy of a small workdir,
built once per session by the real `prepare` and `base` stages on tiny settings (plus a
profile and guides written as their stages write them), and checks:

- the exit status: 2 for bad input, 130 for an interrupt;
- exactly one `error: ...` (or `interrupted: ...`) line, whose message names the key, the file
  or the row (`expect`), no traceback, and no retry loop against the hub;
- that nothing was lost: every file the workdir held before the run is there after it, byte
  for byte (but the ones the row itself edited), and the run left no new file behind, so no
  half-written temporary either.

A new row is one `Case` in CASES: its params edits (dotted keys), a function that breaks files
of the workdir, or both.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests/fixtures/benchmarks"
RAW_FILES = ("gsm8k_main_test.parquet", "math500_test.jsonl")
DELETE = object()  # a params value: remove the key

# The session's workdir: 3 levels of 20 arith problems, a 1-layer model of hidden size 32
# warm-started for 20 SFT steps, and training settings that fit it.
SMALL = {
    "data.levels": [1, 2, 3],
    "data.train_per_level": 20,
    "data.eval_per_level": 4,
    "model.tiny": {"hidden_size": 32, "num_layers": 1, "num_heads": 2, "intermediate_size": 64},
    "model.sft": {
        "steps": 20,
        "batch_size": 8,
        "warmup_steps": 2,
        "level_weights": [1.0, 1.0, 1.0],
        "guided_batch_size": 4,
        "guided_level_weights": [1.0, 1.0, 1.0],
        "stop": None,
    },
    "profile.samples": 2,
    "profile.max_new_tokens": 16,
    "profile.max_per_level": 20,
    "guide.samples": 2,
    "guide.max_new_tokens": 16,
    "train.levels": [1, 2],
    "train.steps": 2,
    "train.prompts_per_step": 4,
    "train.group_size": 2,
    "train.max_new_tokens": 16,
    "train.micro_batch_size": 8,
    "eval.samples": 2,
    "eval.max_new_tokens": 16,
    "eval.pass_at": [2],
}
# The profile the session writes (as the `profile` stage would): level 1 all easy, level 2 all
# never solved but one question (hard), level 3 all solved.
BINS = {1: "easy", 2: "unsolved", 3: "solved"}
HARD_AT_LEVEL_2 = 1


def set_params(params: dict, edits: dict) -> None:
    """Apply {"a.b.c": value} to the nested `params` (DELETE removes the key)."""
    for key, value in edits.items():
        *parents, leaf = key.split(".")
        node = params
        for part in parents:
            node = node.setdefault(part, {})
        if value is DELETE:
            del node[leaf]
        else:
            node[leaf] = value


def _closed_port() -> int:
    """A local port nothing listens on: connections to it are refused at once."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
UNREACHABLE_HUB = {"HF_ENDPOINT": f"http://127.0.0.1:{_closed_port()}"}


# ---------------------------------------------------------------------------------------------
# What a row does to the workdir's files


def garbage(path: str) -> Callable[[Path], None]:
    def edit(work: Path) -> None:
        (work / path).write_bytes(bytes(range(256)) * 8)

    return edit


def truncate(path: str) -> Callable[[Path], None]:
    def edit(work: Path) -> None:
        data = (work / path).read_bytes()
        (work / path).write_bytes(data[: len(data) // 2])

    return edit


def drop_column(path: str, column: str) -> Callable[[Path], None]:
    def edit(work: Path) -> None:
        table = pq.read_table(work / path)
        pq.write_table(table.drop_columns([column]), work / path)

    return edit


def remove(path: str) -> Callable[[Path], None]:
    def edit(work: Path) -> None:
        target = work / path
        shutil.rmtree(target) if target.is_dir() else target.unlink()

    return edit


def write(path: str, text: str) -> Callable[[Path], None]:
    def edit(work: Path) -> None:
        (work / path).write_text(text)

    return edit


def unparseable_math500(work: Path) -> None:
    """A MATH-500 file whose second problem's gold answer no verifier can read."""
    rows = [("What is 1+1?", "2"), ("What is x?", "\\frac{")]
    (work / "data/raw/math500_bad.jsonl").write_text(
        "".join(
            json.dumps(
                {
                    "problem": problem,
                    "answer": answer,
                    "solution": "",
                    "subject": "Algebra",
                    "level": i + 1,
                    "unique_id": f"test/algebra/{i + 1}.json",
                }
            )
            + "\n"
            for i, (problem, answer) in enumerate(rows)
        )
    )


@dataclass(frozen=True)
class Case:
    """One bad input: what the user did (`params` edits, an `edit` of the workdir's files, or
    both), the stage that meets it, its exit status and the substrings of what it says (of its
    `error:`/`interrupted:` line, or of its whole stderr for a run that only warns, rc 0)."""

    id: str
    stage: str
    expect: tuple[str, ...]
    params: dict = field(default_factory=dict)
    edit: Callable[[Path], None] | None = None
    env: dict = field(default_factory=dict)
    rc: int = 2
    writes: tuple[str, ...] = ()  # paths (or folders) the run may write: a row that only warns
    signal: int | None = None  # sent once the stage has written its first line to stderr
    slow: bool = False
    xfail: str | None = None


LEARNABLE = {"train.curriculum": "learnable"}

CASES = [
    # --- params.yaml: every stage checks the whole file before any work ----------------------
    Case(
        "unknown-top-level-key",
        "prepare",
        ("bogus: unknown key", "allowed keys here: seed, algo"),
        {"bogus": 1},
    ),
    Case(
        "unknown-nested-key",
        "train",
        ("train.group_sise: unknown key", "group_size"),
        {"train.group_sise": 8},
    ),
    Case(
        "misspelt-key-of-a-section-the-stage-does-not-read",
        "train",
        ("eval.sampels: unknown key",),
        {"eval.sampels": 2, "eval.samples": DELETE},
    ),
    Case("wrong-type", "base", ("train.lr", "'fast'"), {"train.lr": "fast"}),
    Case(
        "out-of-range",
        "evaluate",
        ("train.group_size", "greater than or equal to 2", "(got -1)"),
        {"train.group_size": -1},
    ),
    Case("bad-algo", "train", ("algo", "'ppo'", "allowed values", "'oc_grpo'"), {"algo": "ppo"}),
    Case(
        "bad-launch",
        "train",
        ("launch", "configs/accelerate/ddp_cpu3.yaml"),
        {"launch": "ddp_cpu3"},
    ),
    Case(
        "fractions-not-increasing",
        "guide",
        ("guide.fractions", "must be increasing"),
        {"guide.fractions": [0.8, 0.4]},
    ),
    Case(
        "data-levels-out-of-range",
        "prepare",
        ("data.levels.0", "data.levels.1"),
        {"data.levels": [0, 6]},
    ),
    Case("train-levels-out-of-range", "profile", ("train.levels.0",), {"train.levels": [6]}),
    Case(
        "pass-at-above-samples",
        "evaluate",
        ("pass_at values [8] exceed samples (2)",),
        {"eval.pass_at": [8]},
    ),
    Case(
        "params-not-yaml",
        "prepare",
        ("params.yaml: not valid YAML",),
        edit=write("params.yaml", "train: [unclosed\n"),
    ),
    Case(
        "params-missing",
        "prepare",
        ("params.yaml: not found",),
        edit=remove("params.yaml"),
    ),
    Case(  # the pipeline's first stage: checks keys no stage reads before any stage runs
        "unknown-key-no-stage-reads",
        "validate",
        ("notes: unknown key",),
        {"notes": "lr sweep"},
    ),
    Case(
        "valid-params-but-unknown-key-at-validate-after-a-valid-run",
        "validate",
        ("train.kl_coeff: unknown key", "kl_coef"),
        {"train.kl_coeff": 0.1},
        edit=write("data/params.ok", "from the last valid run\n"),
    ),
    # --- datasets ------------------------------------------------------------------------------
    Case(
        "dataset-path-outside-data-raw",
        "prepare",
        ("data.eval.0.path", "outside data/raw/", "move it under data/raw/"),
        {"data.eval": [{"name": "math500", "path": str(FIXTURES / "math500_test.jsonl")}]},
    ),
    Case(
        "unknown-dataset-name",
        "prepare",
        ("data.eval[0].name: unknown dataset 'math5000'", "math500"),
        {"data.eval": ["math5000"]},
    ),
    Case(
        "dataset-file-missing",
        "prepare",
        ("data/raw/nowhere.jsonl: not found",),
        {"data.eval": [{"name": "math500", "path": "data/raw/nowhere.jsonl"}]},
    ),
    Case(
        "benchmark-hub-id-offline",
        "prepare",
        ("benchmark 'math500'", "HuggingFaceH4/MATH-500", "HF_HUB_OFFLINE is set", "`path:`"),
        {"data.eval": ["math500"]},
        env=OFFLINE,
    ),
    Case(
        "benchmark-hub-unreachable",
        "prepare",
        ("benchmark 'aime25'", "the hub is unreachable", "data/raw/", "HF_HUB_OFFLINE=1"),
        {"data.eval": ["aime25"]},
        env=UNREACHABLE_HUB,
    ),
    Case(
        "dataset-parquet-garbage",
        "prepare",
        ("data/raw/gsm8k_main_test.parquet: cannot be read as parquet",),
        {"data.train": [{"name": "gsm8k", "path": "data/raw/gsm8k_main_test.parquet"}]},
        edit=garbage("data/raw/gsm8k_main_test.parquet"),
    ),
    Case(
        "dataset-parquet-truncated",
        "prepare",
        ("data/raw/gsm8k_main_test.parquet: cannot be read as parquet",),
        {"data.train": [{"name": "gsm8k", "path": "data/raw/gsm8k_main_test.parquet"}]},
        edit=truncate("data/raw/gsm8k_main_test.parquet"),
    ),
    Case(
        "dataset-parquet-missing-a-column",
        "prepare",
        ("data/raw/gsm8k_main_test.parquet", "needs column 'answer'"),
        {"data.train": [{"name": "gsm8k", "path": "data/raw/gsm8k_main_test.parquet"}]},
        edit=drop_column("data/raw/gsm8k_main_test.parquet", "answer"),
    ),
    Case(
        "dataset-row-with-an-unreadable-gold-answer",
        "prepare",
        ("math500-test/algebra/2.json", "cannot be parsed"),
        {"data.eval": [{"name": "math500", "path": "data/raw/math500_bad.jsonl"}]},
        edit=unparseable_math500,
    ),
    # --- the pipeline's own files ----------------------------------------------------------------
    Case(
        "prepared-data-missing",
        "train",
        ("data/prepared/train.parquet: not found",),
        edit=remove("data/prepared"),
    ),
    Case(
        "prepared-data-missing-a-column",
        "train",
        ("data/prepared/train.parquet: missing columns ['solution']",),
        edit=drop_column("data/prepared/train.parquet", "solution"),
    ),
    Case(
        "prepared-data-garbage",
        "train",
        ("data/prepared/train.parquet: not a readable Parquet file", "`prepare` stage"),
        edit=garbage("data/prepared/train.parquet"),
    ),
    Case(
        "profile-garbage-at-guide",
        "guide",
        ("data/profile.parquet: not a readable Parquet file", "`profile` stage"),
        edit=garbage("data/profile.parquet"),
    ),
    Case(
        "base-model-missing",
        "train",
        ("models/base: not found",),
        edit=remove("models/base"),
    ),
    Case("policy-missing-before-train", "evaluate", ("models/policy: not found",)),
    Case(
        "base-model-config-truncated",
        "profile",
        ("models/base: cannot load the model", "dvc checkout models/base"),
        edit=truncate("models/base/config.json"),
    ),
    Case(
        "base-model-weights-garbage",
        "guide",
        ("models/base: cannot load the model",),
        edit=garbage("models/base/model.safetensors"),
    ),
    Case(
        "model-name-neither-tiny-nor-local-nor-cached",
        "base",
        ("model.name='acme/no-such-model'", "HF cache", "HF_HUB_OFFLINE", "local model directory"),
        {"model.name": "acme/no-such-model"},
        env=OFFLINE,
    ),
    # --- which questions train -------------------------------------------------------------------
    Case(
        "train-domains-without-data",
        "train",
        ("train.domains=['code']", "no code problems", "the domains there: ['math']"),
        {"train.domains": ["code"]},
    ),
    Case(  # `profile` runs first in the pipeline: it names train.domains too
        "train-domains-without-data-at-profile",
        "profile",
        ("train.domains=['code']", "no code problems", "the domains there: ['math']"),
        {"train.domains": ["code"]},
    ),
    Case(
        "train-levels-without-data",
        "train",
        ("train.levels=[5]", "its levels: [1, 2, 3]"),
        {"train.levels": [5]},
    ),
    Case(
        "curriculum-leaves-less-than-a-batch",
        "train",
        (
            "train.curriculum='learnable' at train.levels=[2]",
            "1 training question remains",
            "unsolved 19, hard 1",
            "train.prompts_per_step=4",
        ),
        {**LEARNABLE, "train.levels": [2]},
    ),
    Case(
        "curriculum-without-a-profile",
        "train",
        ("data/profile.parquet: not found", "profile"),
        LEARNABLE,
        edit=remove("data/profile.parquet"),
    ),
    Case(
        "profile-garbage",
        "train",
        ("data/profile.parquet: not a readable Parquet file", "dvc checkout data/profile.parquet"),
        LEARNABLE,
        edit=garbage("data/profile.parquet"),
    ),
    Case(
        "profile-missing-a-column",
        "train",
        ("data/profile.parquet: missing columns ['bin']",),
        LEARNABLE,
        edit=drop_column("data/profile.parquet", "bin"),
    ),
    Case(
        "guides-truncated",
        "train",
        ("data/guides.parquet: not a readable Parquet file", "`guide` stage"),
        {"algo": "oc_grpo"},
        edit=truncate("data/guides.parquet"),
    ),
    # --- runs that cannot learn: they train, and say so ------------------------------------------
    Case(
        "every-completion-cut-off-by-max-new-tokens",
        "train",
        ("all 16 completions reached train.max_new_tokens=1", "raise train.max_new_tokens"),
        {"train.max_new_tokens": 1},
        rc=0,
        writes=("models/policy", "checkpoints", "data/rollouts.parquet", "metrics", ".grpo_lab"),
    ),
    # --- interrupts: nothing half-written, one line, status 130 ---------------------------------
    Case(
        "ctrl-c-during-the-warm-start",
        "base",
        ("interrupted: base", "no output is half-written", "rerun `dvc repro`"),
        {"model.sft.steps": 100_000},
        rc=130,
        signal=signal.SIGINT,
        slow=True,
    ),
    Case(
        "dvc-stops-the-stage-with-sigterm",
        "base",
        ("interrupted: base",),
        {"model.sft.steps": 100_000},
        rc=130,
        signal=signal.SIGTERM,
        slow=True,
    ),
]


# ---------------------------------------------------------------------------------------------
# The workdir and the runner


def _env(hf_home: Path, extra: dict) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "ACCELERATE_"))}
    # An empty HF cache: "not cached" holds whatever the machine's cache has.
    env.update(PYTHONPATH=str(ROOT), HF_HOME=str(hf_home), **extra)
    return env


def _run(work: Path, stage: str, env: dict, sig: int | None = None) -> tuple[int, str]:
    """Run `python -m stages.<stage>` in `work`: (exit status, stderr). With `sig`, send it
    once the stage has written its first line to stderr (it has started working)."""
    cmd = [sys.executable, "-m", f"stages.{stage}"]
    if sig is None:
        done = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, timeout=300)
        return done.returncode, done.stderr
    proc = subprocess.Popen(
        cmd, cwd=work, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    try:
        ready, _, _ = select.select([proc.stderr], [], [], 120)
        assert ready, "the stage wrote nothing to stderr in 120 s"
        first = proc.stderr.readline()
        proc.send_signal(sig)
        rest = proc.stderr.read()
        return proc.wait(timeout=120), first + rest
    finally:
        if proc.poll() is None:
            proc.kill()


def _files(work: Path) -> dict[str, bytes | None]:
    """Every file under `work` with its bytes, and every folder (None): a temporary folder
    left behind, even empty, is a half-written output."""
    return {
        str(p.relative_to(work)): p.read_bytes() if p.is_file() else None
        for p in sorted(work.rglob("*"))
        if "__pycache__" not in p.parts
    }


@pytest.fixture(scope="session")
def workdir(tmp_path_factory) -> Path:
    """prepare + base on SMALL, and a profile and guides, as the stages leave them."""
    work = tmp_path_factory.mktemp("bad-inputs") / "work"
    (work / "data/raw").mkdir(parents=True)
    for name in RAW_FILES:
        shutil.copy(FIXTURES / name, work / "data/raw" / name)
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    set_params(params, SMALL)
    (work / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    env = _env(tmp_path_factory.mktemp("hf"), OFFLINE)
    for stage in ("prepare", "base"):
        rc, err = _run(work, stage, env)
        assert rc == 0, err
    from stages.guide import GUIDE_SCHEMA
    from stages.profile import PROFILE_SCHEMA

    rates = {"unsolved": 0.0, "hard": 0.25, "easy": 0.75, "solved": 1.0}
    profile, guides = [], []
    for r in pq.read_table(work / "data/prepared/train.parquet").to_pylist():
        hard = sum(p["bin"] == "hard" for p in profile) < HARD_AT_LEVEL_2
        b = "hard" if BINS[r["level"]] == "unsolved" and hard else BINS[r["level"]]
        profile.append(
            {"id": r["id"], "level": r["level"], "samples": 2, "pass_rate": rates[b]}
            | {"mean_logprob": -1.0, "confidence": 0.37, "mean_length": 10.0, "bin": b}
        )
        if b == "unsolved":  # the guide stage unlocks each at half the solution
            guides.append(
                {"id": r["id"], "level": r["level"], "fraction": 0.5, "pass_rate": 0.5}
                | {"tried": [0.5]}
            )
    for rows, schema, path in (
        (profile, PROFILE_SCHEMA, "data/profile.parquet"),
        (guides, GUIDE_SCHEMA, "data/guides.parquet"),
    ):
        pq.write_table(pa.Table.from_pylist(rows, schema=schema), work / path)
    return work


def _param(case: Case):
    marks = [pytest.mark.pipeline] if case.slow else []
    if case.xfail:
        marks.append(pytest.mark.xfail(reason=case.xfail, strict=False))
    return pytest.param(case, id=case.id, marks=marks)


@pytest.mark.parametrize("case", [_param(c) for c in CASES])
def test_a_bad_input_is_named_and_loses_nothing(case: Case, workdir, tmp_path):
    work = tmp_path / "work"
    shutil.copytree(workdir, work, symlinks=True)
    if case.params:
        params = yaml.safe_load((work / "params.yaml").read_text())
        set_params(params, case.params)
        (work / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    if case.edit is not None:
        case.edit(work)
    before = _files(work)  # after the row's own edits: the run itself must change nothing

    start = time.monotonic()
    rc, stderr = _run(work, case.stage, _env(tmp_path / "hf", case.env), case.signal)
    seconds = time.monotonic() - start

    assert rc == case.rc, stderr
    said = [line for line in stderr.splitlines() if line.startswith(("error:", "interrupted:"))]
    if case.rc == 0:
        assert said == [], stderr
        message = stderr
    else:
        prefix = "interrupted:" if case.rc == 130 else "error:"
        assert len(said) == 1 and said[0].startswith(prefix), stderr
        message = stderr[stderr.index(said[0]) :]  # the line (params errors list keys under it)
    for text in case.expect:
        assert text in message, f"{text!r} not in:\n{message}"
    assert "Traceback" not in stderr, stderr
    assert "Retrying in" not in stderr and seconds < 60, (seconds, stderr)

    after = _files(work)

    def may_write(path: str) -> bool:
        return any(path == w or path.startswith(w.rstrip("/") + "/") for w in case.writes)

    for path, data in before.items():
        if not may_write(path):
            assert after.get(path) == data, f"{path} changed or disappeared"
    left = [p for p in set(after) - set(before) if not may_write(p)]
    assert sorted(left) == [], "the run left files behind"


def test_an_interrupted_stage_prints_where_it_stopped(tmp_path):
    """`Interrupted` (raised by the training loop on Ctrl-C) is printed as it is, in one line,
    with exit status 130."""
    code = (
        "from grpo_core.config.core import StageParams\n"
        "from grpo_core.errors import Interrupted\n"
        "from stages.common import main\n"
        "def train(params):\n"
        "    raise Interrupted('train stopped after 12 of 40 steps; the last checkpoint is "
        "step 10: `dvc repro` resumes there')\n"
        "main(train, StageParams)\n"
    )
    (tmp_path / "params.yaml").write_text("seed: 0\n")
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env=_env(tmp_path / "hf", {}),
        capture_output=True,
        text=True,
    )
    assert done.returncode == 130
    assert done.stderr.strip().splitlines()[-1] == (
        "interrupted: train stopped after 12 of 40 steps; the last checkpoint is step 10: "
        "`dvc repro` resumes there"
    )
    assert "Traceback" not in done.stderr
