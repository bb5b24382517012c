"""dvc.yaml lists, for every stage, exactly the code the stage runs: every module its command
imports, directly or not. A missing one would let DVC report "up to date" after a change that
alters the stage's output; an extra one would rerun it for nothing."""

import ast
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("grpo_core", "stages")
# Files a stage runs without importing them: scripts started in the sandbox's child process
# (its boot, and the code reward's test harness).
RUN_NOT_IMPORTED = {
    "grpo_core/code_reward.py": {"grpo_core/sandbox_harness.py"},
    "grpo_core/sandbox.py": {"grpo_core/sandbox_boot.py"},
}


def _module_file(name: str) -> str | None:
    path = ROOT / Path(*name.split("."))
    if path.with_suffix(".py").is_file():
        return str(path.with_suffix(".py").relative_to(ROOT))
    if (path / "__init__.py").is_file():
        return str((path / "__init__.py").relative_to(ROOT))
    return None


def _imports(file: str) -> set[str]:
    tree = ast.parse((ROOT / file).read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # `from grpo_core.tiny import arith` imports the submodule grpo_core.tiny.arith
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        for name in names:
            if name.split(".")[0] in PACKAGES and (path := _module_file(name)):
                found.add(path)
    return found | RUN_NOT_IMPORTED.get(file, set())


def _closure(file: str) -> set[str]:
    seen, todo = set(), [file]
    while todo:
        f = todo.pop()
        if f not in seen:
            seen.add(f)
            todo.extend(_imports(f))
    # Package __init__ files are empty markers; dvc.yaml need not list them.
    return {f for f in seen if not f.endswith("__init__.py")}


def test_every_stage_depends_on_exactly_the_code_it_runs():
    stages = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    for name, stage in stages.items():
        module = stage["cmd"].split("python -m ", 1)[1].split()[0]
        expected = _closure(_module_file(module))
        listed = {d for d in stage["deps"] if d.endswith(".py")}
        assert listed == expected, (
            f"stage {name}: missing {sorted(expected - listed)}, extra {sorted(listed - expected)}"
        )
