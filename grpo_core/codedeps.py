"""The code a `python -m module` command runs: every module of ours it imports, directly or
not. dvc.yaml lists it as each stage's deps (tests/test_dvc_yaml.py checks the main pipeline;
grpo_core.studies.dvcfile writes the studies' lists).

    python -m grpo_core.codedeps OUT MODULE...   # OUT: md5 and path of each file they run
    python -m grpo_core.codedeps --dvc-yaml [dvc.yaml]   # each stage's code deps brought up
                                                         # to date (after adding a module)

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
    "grpo_core/rewards/code.py": {
        "grpo_core/rewards/plain.py",
        "grpo_core/rewards/code_runner.py",
        "grpo_core/rewards/code_tester.py",
    },
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


def listed_code(deps: list[str]) -> set[str]:
    """The code files a stage's deps name: `.py` files, and every module under a package
    folder (one holding an `__init__.py`)."""
    files: set[str] = set()
    for dep in deps:
        if dep.endswith(".py"):
            files.add(dep)
        elif (ROOT / dep / "__init__.py").is_file():
            files |= {str(p.relative_to(ROOT)) for p in (ROOT / dep).rglob("*.py")}
    return files


def _dep_value(line: str) -> str:
    return line.strip()[2:].split("#")[0].strip()


def sync_dvc_yaml(path: str | Path = "dvc.yaml") -> list[str]:
    """Bring the code deps of every `python -m` stage of the dvc.yaml at `path` up to date
    with what the stage runs (`closure`): a file it now imports is added among the stage's
    code deps (in sorted place), a listed file it no longer runs is removed; comments and
    every other line are kept. Returns the changes ("stage: + file"); writes atomically."""
    import yaml

    path = Path(path)
    lines = path.read_text().splitlines(keepends=True)
    stages = yaml.safe_load("".join(lines))["stages"]
    changes: list[str] = []
    for name, stage in stages.items():
        if "python -m " not in stage.get("cmd", ""):
            continue
        module = stage["cmd"].split("python -m ", 1)[1].split()[0]
        expected, listed = closure(module), listed_code(stage.get("deps", []))
        start = next(i for i, x in enumerate(lines) if x.split("#")[0].rstrip() == f"  {name}:")
        first = next(i for i in range(start, len(lines)) if lines[i] == "    deps:\n") + 1
        end = first
        while end < len(lines) and lines[end].startswith("    - "):
            end += 1
        deps = lines[first:end]
        for extra in sorted(listed - expected):
            if f"    - {extra}\n" not in [f"    - {_dep_value(x)}\n" for x in deps]:
                raise SystemExit(
                    f"error: {path}: stage {name} lists a folder with {extra}, which it does not "
                    "run: list the folder's modules one by one"
                )
            deps = [x for x in deps if _dep_value(x) != extra]
            changes.append(f"{name}: - {extra}")
        for missing in sorted(expected - listed):
            code = [i for i, x in enumerate(deps) if _dep_value(x).split("/")[0] in PACKAGES]
            same = [i for i in code if _dep_value(deps[i]).split("/")[0] == missing.split("/")[0]]
            after = [i for i in same if _dep_value(deps[i]) > missing]
            at = after[0] if after else (same or code or [-1])[-1] + 1
            deps.insert(at, f"    - {missing}\n")
            changes.append(f"{name}: + {missing}")
        lines[first:end] = deps
    if changes:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        with os.fdopen(fd, "w") as f:
            f.write("".join(lines))
        os.replace(tmp, path)
    return changes


if __name__ == "__main__":
    if sys.argv[1:2] == ["--dvc-yaml"]:
        done = sync_dvc_yaml(sys.argv[2] if len(sys.argv) > 2 else "dvc.yaml")
        print("\n".join(done) if done else "every stage's code deps are up to date")
        sys.exit(0)
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    write_manifest(sys.argv[1], sys.argv[2:])
