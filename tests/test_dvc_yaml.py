"""dvc.yaml lists, for every stage, exactly the code the stage runs: every module its command
imports, directly or not, a package's folder standing for all of its modules where the stage
uses every one. A missing one would let DVC report "up to date" after a change that alters the
stage's output; an extra one would rerun it for nothing. And each stage's params in dvc.yaml
are the sections its view of params.yaml holds."""

import importlib
from pathlib import Path

import yaml

from grpo_core.codedeps import closure, listed_code, sync_dvc_yaml
from grpo_core.codedeps import module_file as _module_file

ROOT = Path(__file__).resolve().parents[1]
# Imported by every stage to check the whole params file, never to read it (stages/common.py
# says why): a section a stage does not read decides whether it starts, not what it writes.
CHECKED_NOT_READ = "grpo_core/config/params.py"


def _py_files(folder: str) -> set[str]:
    return {str(p.relative_to(ROOT)) for p in (ROOT / folder).rglob("*.py")}


def _stage_module(stage: dict) -> str:
    return stage["cmd"].split("python -m ", 1)[1].split()[0]


def _stages() -> dict:
    return yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]


def test_every_stage_depends_on_exactly_the_code_it_runs():
    for name, stage in _stages().items():
        expected = closure(_stage_module(stage))
        if name != "validate":  # the one stage whose job is the whole file
            assert CHECKED_NOT_READ not in expected, f"stage {name} imports the whole params model"
        listed = listed_code(stage["deps"])
        assert listed == expected, (
            f"stage {name}: missing {sorted(expected - listed)}, extra {sorted(listed - expected)}"
            ": `python -m grpo_core.codedeps --dvc-yaml` updates dvc.yaml"
        )


def test_a_package_folder_is_listed_only_where_every_module_in_it_runs():
    for name, stage in _stages().items():
        expected = closure(_stage_module(stage))
        for dep in stage["deps"]:
            if (ROOT / dep / "__init__.py").is_file():
                assert _py_files(dep) <= expected, f"stage {name}: {dep} holds unused modules"
                for file in _py_files(dep):  # and no file is listed twice
                    assert file not in stage["deps"], f"stage {name}: {file} is under {dep}"


def test_every_stage_checks_the_whole_params_file_by_name():
    common = importlib.import_module("stages.common")
    assert _module_file(common.WHOLE_FILE) == CHECKED_NOT_READ


def _declared(view) -> set[str]:
    """The params keys a stage view reads: its sections, and for a partial section (a `...View`
    that ignores the keys other stages read) the keys it holds."""
    keys = set()
    for field, info in view.model_fields.items():
        model = info.annotation
        if isinstance(model, type) and model.__name__.endswith("View"):
            keys |= {f"{field}.{sub}" for sub in model.model_fields}
        else:
            keys.add(field)
    return keys


def test_each_stage_reads_the_params_dvc_yaml_declares():
    from grpo_core.config.core import StageParams

    for name, stage in _stages().items():
        if name == "validate":  # reads the whole file as a file dep, below
            continue
        module = importlib.import_module(_stage_module(stage))
        (view,) = {
            v
            for v in vars(module).values()
            if isinstance(v, type) and issubclass(v, StageParams) and v is not StageParams
        }
        assert _declared(view) == set(stage.get("params", [])), name


def test_every_stage_waits_for_the_whole_params_file_to_be_checked():
    """`validate` depends on the whole params.yaml (a key no stage reads included) and every
    other stage on its output, so `dvc repro` and `dvc exp run` check every edit first."""
    from stages.validate import OK, PARAMS

    stages = _stages()
    assert PARAMS in stages["validate"]["deps"] and "params" not in stages["validate"]
    assert [next(iter(o)) if isinstance(o, dict) else o for o in stages["validate"]["outs"]] == [OK]
    for name, stage in stages.items():
        if name != "validate":
            assert OK in stage["deps"], f"stage {name} does not wait for {OK}"


def test_the_code_deps_are_brought_up_to_date_in_place(tmp_path):
    """`python -m grpo_core.codedeps --dvc-yaml` (what the recipes run after adding a module):
    a missing module goes in, in sorted place among its package's deps, a module the stage
    does not run comes out, and every other line (comments, data deps) stays."""
    expected = sorted(closure("stages.validate"))
    kept = [f for f in expected if f != "grpo_core/errors.py"]
    lines = [
        "stages:",
        "  validate:  # a comment",
        "    cmd: python -m stages.validate",
        "    deps:",
        "    - params.yaml  # data",
        *(f"    - {f}" for f in kept),
        "    - grpo_core/studies/report.py",
        "    outs:",
        "    - data/params.ok",
    ]
    text = "\n".join(lines) + "\n"
    (tmp_path / "dvc.yaml").write_text(text)
    changes = sync_dvc_yaml(tmp_path / "dvc.yaml")
    assert "validate: + grpo_core/errors.py" in changes
    assert "validate: - grpo_core/studies/report.py" in changes
    after = yaml.safe_load((tmp_path / "dvc.yaml").read_text())["stages"]["validate"]
    assert listed_code(after["deps"]) == set(expected)
    assert after["deps"][0] == "params.yaml" and after["outs"] == ["data/params.ok"]
    lines = (tmp_path / "dvc.yaml").read_text().splitlines()
    assert "  validate:  # a comment" in lines and "    - params.yaml  # data" in lines
    code = [d for d in after["deps"] if d.startswith("grpo_core/")]
    assert code == sorted(code)
    assert sync_dvc_yaml(tmp_path / "dvc.yaml") == []  # nothing left to do


def test_every_lock_entry_is_a_stage_of_its_pipeline():
    """dvc.lock keeps an entry for a stage removed from dvc.yaml (a study variant dropped)
    until someone removes it: an entry no stage owns is a result no code can reproduce."""
    from dvc.repo import Repo
    from dvc.scm import NoSCM

    stages: dict[str, set[str]] = {}
    # NoSCM: the recipes run this file in a copy of the repository that is no git repo
    for stage in Repo(str(ROOT), scm=NoSCM(str(ROOT))).index.stages:
        stages.setdefault(stage.path_in_repo, set()).add(stage.name)
    for dvcfile, names in stages.items():
        lock = ROOT / Path(dvcfile).with_suffix(".lock")
        if lock.exists():
            orphans = set(yaml.safe_load(lock.read_text())["stages"]) - names
            assert not orphans, f"{lock.relative_to(ROOT)}: entries of no stage: {sorted(orphans)}"
