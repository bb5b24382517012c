"""The package layout is the architecture: grpo_core's subpackages import one way, down the
list in grpo_core/__init__.py, modules import one another without cycles, no module outgrows
one concern, and no stage holds library logic."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# grpo_core/__init__.py's list, top to bottom: each may import only what is above it.
LAYERS = [
    {"errors"},
    {"io", "registry", "codedeps", "compare"},
    {"algorithms"},
    {"config"},
    {"rewards"},
    {"rollout"},
    {"data"},
    {"models"},
    {"analysis"},
    {"training"},
    {"studies"},
    {"params_reference"},  # a leaf nothing imports: renders docs/params.md from config
]
MAX_MODULE_LINES = 500
MAX_STAGE_LINES = 120


def _layer(part: str) -> int:
    return next(i for i, names in enumerate(LAYERS) if part in names)


def _modules() -> dict[str, Path]:
    out = {}
    for path in (ROOT / "grpo_core").rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _imported(path: Path, modules: dict[str, Path]) -> set[str]:
    """The grpo_core modules `path` imports (a `from package import name` of a submodule
    counts as that submodule)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [f"{node.module}.{a.name}" for a in node.names] + [node.module]
        found |= {n for n in names if n in modules and n != "grpo_core"}
    return found


def test_subpackages_import_only_from_the_layers_above_them():
    modules = _modules()
    wrong = []
    for name, path in modules.items():
        parts = name.split(".")
        if len(parts) < 2:
            continue
        for dep in _imported(path, modules):
            dparts = dep.split(".")
            if dparts[1] == parts[1]:
                continue  # within one subpackage
            if _layer(dparts[1]) >= _layer(parts[1]):
                wrong.append(f"{name} imports {dep}")
    assert not wrong, "\n".join(wrong)


def test_the_library_never_imports_the_stages():
    for path in (ROOT / "grpo_core").rglob("*.py"):
        assert "from stages" not in path.read_text() and "import stages" not in path.read_text()


def test_modules_import_one_another_without_cycles():
    modules = _modules()
    graph = {name: _imported(path, modules) - {name} for name, path in modules.items()}
    state: dict[str, int] = {}

    def visit(node: str, trail: list[str]) -> None:
        if state.get(node) == 2:
            return
        if state.get(node) == 1:
            pytest.fail("import cycle: " + " -> ".join(trail + [node]))
        state[node] = 1
        for dep in sorted(graph[node]):
            visit(dep, trail + [node])
        state[node] = 2

    for node in sorted(graph):
        visit(node, [])


def test_every_subpackage_says_what_lives_there():
    for init in (ROOT / "grpo_core").rglob("__init__.py"):
        doc = ast.get_docstring(ast.parse(init.read_text()))
        assert doc and len(doc) > 80, f"{init.relative_to(ROOT)} has no docstring"


def test_no_module_outgrows_one_concern():
    big = {
        str(p.relative_to(ROOT)): n
        for p in (ROOT / "grpo_core").rglob("*.py")
        if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert not big, big


def test_stages_are_thin():
    fat = {
        p.name: n
        for p in (ROOT / "stages").glob("*.py")
        if (n := len(p.read_text().splitlines())) > MAX_STAGE_LINES
    }
    assert not fat, fat
