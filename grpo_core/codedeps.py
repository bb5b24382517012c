"""The code a `python -m module` command runs: every module of ours it imports, directly or
not. dvc.yaml lists it as each stage's deps (tests/test_dvc_yaml.py checks the main pipeline;
grpo_core.studies.dvcfile writes the studies' lists).

    python -m grpo_core.codedeps OUT MODULE...   # OUT: md5 and path of each file they run

A study's cells depend on that one file (studies/<name>/code.md5, written by its own stage,
which depends on the files) rather than on each file: the same staleness, with one entry per
cell in dvc.lock instead of ~55, which is what DVC parses on every `dvc repro`."""

from __future__ import annotations

import ast
import hashlib
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("grpo_core", "stages")
# Files a stage runs without importing them: scripts started in the sandbox's child process
# (its boot, and the code reward's test harness).
RUN_NOT_IMPORTED = {
    "grpo_core/rewards/code.py": {"grpo_core/rewards/sandbox_harness.py"},
    "grpo_core/rewards/sandbox.py": {"grpo_core/rewards/sandbox_boot.py"},
}


def module_file(name: str) -> str | None:
    path = ROOT / Path(*name.split("."))
    if path.with_suffix(".py").is_file():
        return str(path.with_suffix(".py").relative_to(ROOT))
    if (path / "__init__.py").is_file():
        return str((path / "__init__.py").relative_to(ROOT))
    return None


def packages(name: str) -> list[str]:
    """The __init__ files Python runs to import `name`: one per enclosing package."""
    parts = name.split(".")
    return [f for i in range(1, len(parts)) if (f := module_file(".".join(parts[:i])))]


def imports(file: str) -> set[str]:
    tree = ast.parse((ROOT / file).read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # `from grpo_core.data.tiny import arith` imports the submodule
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        for name in names:
            if name.split(".")[0] in PACKAGES and (path := module_file(name)):
                found.add(path)
                found.update(packages(name))
    return found | RUN_NOT_IMPORTED.get(file, set())


def closure(module: str) -> set[str]:
    """Every file of ours that `python -m module` runs."""
    seen, todo = set(), [module_file(module), *packages(module)]
    while todo:
        f = todo.pop()
        if f not in seen:
            seen.add(f)
            todo.extend(imports(f))
    return seen


def manifest(modules: list[str]) -> str:
    """One line per file that `python -m` any of `modules` runs, sorted: its md5 and path (the
    format of `md5sum`). It changes exactly when one of those files does."""
    files = sorted(set().union(*(closure(m) for m in modules)))
    return "".join(f"{hashlib.md5((ROOT / f).read_bytes()).hexdigest()}  {f}\n" for f in files)


def write_manifest(out: str | Path, modules: list[str]) -> None:
    """`manifest(modules)` into `out`, atomically."""
    out = Path(out)
    for m in modules:
        if module_file(m) is None:
            raise SystemExit(f"error: no module {m!r} in {', '.join(PACKAGES)}")
    text = manifest(modules)
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", dir=out.parent)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, out)


if __name__ == "__main__":
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    write_manifest(sys.argv[1], sys.argv[2:])
