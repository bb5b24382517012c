"""Every command in a shell block of README.md and docs/ runs as shown.

Each command is taken from its ```bash block (continuation lines joined, comments and `...`
dropped, `&&` chains split) and checked by the first rule that fits it:

- short commands run for real in a fresh copy of the repository (its tracked files, `git init`,
  no DVC cache): `python -m stages.compare`, study reports, `dvc metrics`/`dvc exp show`;
  `make` runs as `make -n`, and `dvc repro [TARGET]` as `dvc dag [TARGET]` (the pipeline
  parses, the target is one);
- long ones (`dvc exp run`, benchmarks, a study's `dvc repro`) are checked in their parts:
  every `-S key=value` (each value of a `--queue` sweep) must make params.yaml valid, every
  `--option` must be one the command's `--help` lists, every path must exist;
- an experiment a command refers to (`dvc exp apply X`, `dvc plots diff A B`,
  `stages.compare A --baseline B`, ...) must be named with `-n` on the same page before, or be a
  commit (`main`, `HEAD~1`) or a placeholder the page's prose says is one.

A command no rule fits fails the test: add a rule for it here.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest
import yaml

from tests.conftest import copy_repository

ROOT = Path(__file__).resolve().parents[1]
PAGES = ["README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md"))]
BIN = Path(sys.executable).parent

# refs that are commits, not experiments; placeholders the pages introduce as such
COMMITS = {"main", "HEAD", "HEAD~1", "workspace"}
PLACEHOLDERS = {"exp-a", "exp-b", "my-exp", "v1"}


@dataclass(frozen=True)
class Command:
    page: str
    line: int
    argv: tuple[str, ...]

    def __str__(self) -> str:
        return f"{self.page}:{self.line}: {shlex.join(self.argv)}"


def commands(page: str) -> list[Command]:
    """The commands of a page's ```bash / ```sh blocks."""
    text = (ROOT / page).read_text()
    out = []
    for block in re.finditer(r"```(?:bash|sh|shell)\n(.*?)```", text, re.S):
        first = text.count("\n", 0, block.start(1)) + 1
        lines = block.group(1).splitlines()
        i = 0
        while i < len(lines):
            start, joined = i, lines[i]
            while joined.rstrip().endswith("\\") and i + 1 < len(lines):
                i += 1
                joined = joined.rstrip()[:-1] + " " + lines[i]
            i += 1
            words = shlex.split(joined, comments=True)
            words = [w for w in words if w != "..."]
            while words:
                cut = words.index("&&") if "&&" in words else len(words)
                out.append(Command(page, first + start, tuple(words[:cut])))
                words = words[cut + 1 :]
    return out


ALL = [c for page in PAGES for c in commands(page)]


def test_the_pages_have_commands():
    assert len(ALL) > 60
    assert any(c.argv[:3] == ("dvc", "exp", "run") for c in ALL)


# ---------------------------------------------------------------------------------------------
# the parts of a long command


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(
        PATH=f"{BIN}{os.pathsep}{env['PATH']}",
        DVC_NO_ANALYTICS="1",
        GIT_AUTHOR_NAME="t",
        GIT_AUTHOR_EMAIL="t@t",
        GIT_COMMITTER_NAME="t",
        GIT_COMMITTER_EMAIL="t@t",
    )
    return env


def run(argv, cwd: Path = ROOT, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        list(argv), cwd=cwd, env=_env(), capture_output=True, text=True, timeout=timeout
    )


@cache
def help_text(*prefix: str) -> str:
    done = run([*prefix, "--help"])
    assert done.returncode == 0, f"{' '.join(prefix)} --help failed:\n{done.stderr[-2000:]}"
    return done.stdout


def options(argv: tuple[str, ...]) -> list[str]:
    return [a.split("=")[0] for a in argv if a.startswith("-") and a != "-"]


def assert_options_known(cmd: Command, prefix: tuple[str, ...]) -> None:
    text = help_text(*prefix)
    for opt in options(cmd.argv[len(prefix) :]):
        assert re.search(rf"(^|[\s,\[]){re.escape(opt)}\b", text), (
            f"{cmd}: {opt} is not an option of `{' '.join(prefix)}`"
        )


def set_params(argv: tuple[str, ...]) -> list[str]:
    """The `-S key=value` overrides of a `dvc exp run`."""
    out, it = [], iter(argv)
    for a in it:
        if a in ("-S", "--set-param"):
            out.append(next(it))
    return out


def _split_sweep(value: str) -> list[str]:
    """DVC's (Hydra's) sweep: `a,b,c` outside brackets and quotes is three runs."""
    parts, depth, cur = [], 0, ""
    for ch in value:
        depth += ch in "[{" and 1 or ch in "]}" and -1 or 0
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    return [*parts, cur]


def params_after(overrides: list[str], queue: bool) -> list[dict]:
    """params.yaml with the overrides applied, one dict per run of a sweep."""
    runs = [yaml.safe_load((ROOT / "params.yaml").read_text())]
    for item in overrides:
        key, _, value = item.partition("=")
        values = _split_sweep(value) if queue else [value]
        nxt = []
        for params in runs:
            for v in values:
                p = yaml.safe_load(yaml.safe_dump(params))
                node, *_ = [p]
                *path, last = key.lstrip("+").split(".")
                for k in path:
                    node = node.setdefault(k, {})
                node[last] = yaml.safe_load(v)
                nxt.append(p)
        runs = nxt
    return runs


def assert_params_valid(cmd: Command) -> None:
    from grpo_core.config.params import parse_params

    overrides = set_params(cmd.argv)
    cwd = os.getcwd()
    os.chdir(ROOT)  # reward.function names a file under the repository
    try:
        for params in params_after(overrides, queue="--queue" in cmd.argv):
            try:
                parse_params(params, "params.yaml")
            except Exception as exc:  # noqa: BLE001 - the message is the point
                pytest.fail(f"{cmd}: the params it sets are invalid: {exc}")
    finally:
        os.chdir(cwd)


# ---------------------------------------------------------------------------------------------
# experiment names


def referred_experiments(argv: tuple[str, ...]) -> list[str]:
    a = list(argv)
    if a[:3] == ["dvc", "exp", "apply"]:
        return a[3:4]
    if a[:3] in (["dvc", "exp", "push"], ["dvc", "exp", "pull"]):
        return a[4:5]  # after the remote
    if a[:3] in (["dvc", "plots", "diff"], ["dvc", "metrics", "diff"], ["dvc", "exp", "diff"]):
        rest, out, skip = a[3:], [], False
        for w in rest:
            if skip:
                skip = False
            elif w.startswith("-"):
                skip = w in ("--targets", "-t")
            else:
                out.append(w)
        return out
    if a[:3] == ["python", "-m", "stages.compare"]:
        out, i = [], 3
        while i < len(a):
            if a[i] in ("--baseline", "--rev"):  # their values are experiments or commits
                out.append(a[i + 1])
                i += 2
            elif a[i] == "--metric":  # its value is a metric
                i += 2
            elif a[i].startswith("-"):
                i += 1
            else:
                out.append(a[i])
                i += 1
        return out
    return []


@pytest.mark.parametrize("page", PAGES)
def test_every_experiment_a_command_names_was_named_before(page):
    named: set[str] = set()
    for cmd in commands(page):
        a = cmd.argv
        if a[:3] == ("dvc", "exp", "run") and "-n" in a:
            named.add(a[a.index("-n") + 1])
        for name in referred_experiments(a):
            assert name in named or name in COMMITS or name in PLACEHOLDERS, (
                f"{cmd}: experiment {name!r} is never named on {page}: `dvc exp run` gives a "
                f"random name unless `-n {name}`"
            )


# ---------------------------------------------------------------------------------------------
# the fresh copy, for the short commands


@pytest.fixture(scope="module")
def copy(tmp_path_factory) -> Path:
    """The repository's files (tracked, and new ones git does not ignore) in a new git repo."""
    repo = copy_repository(tmp_path_factory.mktemp("fresh"))
    for argv in (
        ["git", "init", "-q", "-b", "main"],
        ["git", "add", "-A"],
        ["git", "commit", "-qm", "x"],
    ):
        done = run(argv, cwd=repo)
        assert done.returncode == 0, done.stderr
    return repo


RUN_FOR_REAL = [
    # (argv prefix, what the output must show)
    (("python", "-m", "stages.compare"), "of the policy, % (metrics/eval.json)"),
    (("python", "-m", "stages.study_report", "report"), ""),
    (("python", "-m", "stages.study_report", "findings"), ""),
    (("dvc", "metrics", "show"), "metrics/eval.json"),
    (("dvc", "metrics", "diff"), ""),
    (("dvc", "exp", "show"), ""),
]


def _real(cmd: Command) -> tuple[str, ...] | None:
    for prefix, _ in RUN_FOR_REAL:
        if cmd.argv[: len(prefix)] == prefix:
            if referred_experiments(cmd.argv):
                return None  # needs the experiments: checked by name above
            return prefix
    return None


def _python(argv: tuple[str, ...]) -> tuple[str, ...]:
    return (sys.executable, *argv[1:]) if argv[0] == "python" else argv


@pytest.mark.parametrize("cmd", [c for c in ALL if _real(c)], ids=str)
def test_a_short_command_runs_in_a_fresh_copy(cmd, copy):
    done = run(_python(cmd.argv), cwd=copy)
    assert done.returncode == 0, f"{cmd} failed:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    want = dict(RUN_FOR_REAL)[_real(cmd)]
    assert want in done.stdout + done.stderr


def check_long(cmd: Command, copy: Path) -> None:
    """The rules for everything not run for real; fails on a command no rule fits."""
    a = cmd.argv
    if a[:1] == ("make",):
        done = run(["make", "-n", *a[1:]], cwd=copy)
        assert done.returncode == 0, f"{cmd}: make -n: {done.stderr}"
    elif a[:2] == ("source", ".venv/bin/activate"):
        assert (
            "-m venv $(VENV)" in (ROOT / "Makefile").read_text()
            and "VENV := .venv" in (ROOT / "Makefile").read_text()
        ), f"{cmd}: the set-up no longer makes .venv"
    elif a[:3] == ("dvc", "exp", "run"):
        assert_options_known(cmd, ("dvc", "exp", "run"))
        assert_params_valid(cmd)
    elif a[:2] == ("dvc", "repro"):
        assert_options_known(cmd, ("dvc", "repro"))
        targets = [w for w in a[2:] if not w.startswith("-")]
        # the pipeline (or the study's) parses and the target is one: `dvc dag` reads it
        # without hashing anything, where `--dry` would need the data in the copy
        done = run(["dvc", "dag", *targets], cwd=copy)
        assert done.returncode == 0, f"{cmd}: dvc dag: {done.stderr[-2000:]}"
        assert "+-------" in done.stdout or "*" in done.stdout
    elif a[:1] == ("dvc",):
        sub = a[:3] if a[1] in ("exp", "plots", "metrics", "queue", "remote") else a[:2]
        assert_options_known(cmd, sub)
    elif a[:2] == ("python", "-m") or (a[:1] == ("python",) and a[1].endswith(".py")):
        prefix = a[:3] if a[1] == "-m" else a[:2]
        if a[1] == "-m" and a[2] == "stages.study_report":
            prefix = a[:4]
            for path in a[4:]:
                assert (ROOT / path).exists(), f"{cmd}: {path} does not exist"
        assert_options_known(cmd, _python(prefix))
    elif a[:1] == ("scripts/gpu_check.sh",):
        assert os.access(ROOT / a[0], os.X_OK), f"{cmd}: not executable"
        done = run(["bash", "-n", a[0]])
        assert done.returncode == 0, f"{cmd}: {done.stderr}"
    elif a[:2] == ("pip", "install"):
        extras = re.findall(r"\.\[(\w+)\]", " ".join(a))
        opt = (ROOT / "pyproject.toml").read_text()
        for extra in extras:
            assert re.search(rf"^{extra}\s*=", opt, re.M), (
                f"{cmd}: no extra [{extra}] in pyproject.toml"
            )
    elif a[:1] == ("cd",):
        assert re.fullmatch(r"<\w+>", a[1]), f"{cmd}: cd into a folder no rule knows"
    elif a[:1] == ("git",):
        assert a[1] in ("clone", "commit", "restore", "checkout", "push"), (
            f"{cmd}: a git command no rule knows"
        )
    else:
        pytest.fail(f"{cmd}: no rule checks this command: add one to tests/test_doc_commands.py")


@pytest.mark.parametrize("cmd", [c for c in ALL if not _real(c)], ids=str)
def test_a_long_command_is_checked_in_its_parts(cmd, copy):
    check_long(cmd, copy)


# ---------------------------------------------------------------------------------------------
# the rules themselves


def test_a_sweep_is_one_params_file_per_value_and_a_bad_key_fails():
    runs = params_after(["train.group_size=4,8,16", "data.domains=[arith,mcq]"], queue=True)
    assert [r["train"]["group_size"] for r in runs] == [4, 8, 16]
    assert all(r["data"]["domains"] == ["arith", "mcq"] for r in runs)
    with pytest.raises(pytest.fail.Exception, match="train.grup_size"):
        assert_params_valid(Command("x.md", 1, ("dvc", "exp", "run", "-S", "train.grup_size=4")))
    with pytest.raises(pytest.fail.Exception, match="algo"):
        assert_params_valid(Command("x.md", 1, ("dvc", "exp", "run", "-S", "algo=nope")))


def test_an_unknown_option_and_an_unnamed_experiment_fail():
    with pytest.raises(AssertionError, match="--baselin is not an option"):
        assert_options_known(
            Command("x.md", 1, ("python", "-m", "stages.compare", "--baselin", "x")),
            _python(("python", "-m", "stages.compare")),
        )
    page = ["dvc exp run -S algo=codapo", "python -m stages.compare dapo codapo --baseline dapo"]
    names = referred_experiments(tuple(shlex.split(page[1])))
    assert names == ["dapo", "codapo", "dapo"]
    assert referred_experiments(("python", "-m", "stages.compare", "--metric", "greedy")) == []
    assert referred_experiments(
        ("dvc", "metrics", "diff", "main", "codapo", "--targets", "m.json")
    ) == ["main", "codapo"]


def test_commands_are_read_as_a_shell_reads_them(tmp_path, monkeypatch):
    page = tmp_path / "p.md"
    page.write_text(
        "text\n```bash\n"
        "dvc exp run -S a=1 \\\n  -S 'b=[x,y]' ...   # a comment\n"
        "dvc exp run --queue -S c=1,2 && dvc queue start\n"
        "```\n```text\nnot a command\n```\n"
    )
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    got = commands("p.md")
    assert [(c.line, c.argv) for c in got] == [
        (3, ("dvc", "exp", "run", "-S", "a=1", "-S", "b=[x,y]")),
        (5, ("dvc", "exp", "run", "--queue", "-S", "c=1,2")),
        (5, ("dvc", "queue", "start")),
    ]
