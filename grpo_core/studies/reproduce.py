"""Whether a re-run cell reproduced the committed one: its files compared bit for bit, or,
where they differ, by their largest numeric difference (`stages.study_reproduce`).

A committed cell is a claim that the code at its commit produced it. A lock recorded with `dvc
commit` after a code change says "the same outputs" without showing it; re-running a cell from
the committed code and comparing shows it. Timing fields (`wall_s`) and the git state a cell
records (`git`) are not outputs and are left out of the comparison.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq

from grpo_core.errors import InputError

# how long it took, from what commit, on what machine: not results
IGNORED_KEYS = frozenset({"wall_s", "git", "machine"})


@dataclass(frozen=True)
class FileDiff:
    """One output file of a cell against its committed version."""

    path: str
    identical: bool  # the same bytes (after dropping IGNORED_KEYS from JSON)
    max_diff: float  # the largest absolute difference of a number (inf: not comparable)
    where: str = ""  # where the largest difference is, or why not comparable

    def passes(self, tolerance: float) -> bool:
        return self.identical or self.max_diff <= tolerance


def _numbers(value: object, prefix: str = "") -> dict[str, object]:
    """A JSON value flattened to {dotted key: leaf}, IGNORED_KEYS left out."""
    if isinstance(value, dict):
        out: dict[str, object] = {}
        for key, item in value.items():
            if key not in IGNORED_KEYS:
                out |= _numbers(item, f"{prefix}{key}.")
        return out
    if isinstance(value, list):
        out = {}
        for i, item in enumerate(value):
            out |= _numbers(item, f"{prefix}{i}.")
        return out
    return {prefix.rstrip("."): value}


def _compare_leaves(a: dict[str, object], b: dict[str, object]) -> tuple[float, str]:
    """The largest |a - b| over the leaves of two flattened records, and where; inf and the
    key where they do not have the same keys or a non-number differs."""
    if a.keys() != b.keys():
        extra = sorted(set(a) ^ set(b))[:3]
        return math.inf, f"keys differ: {', '.join(extra)}"
    worst, where = 0.0, ""
    for key in a:
        x, y = a[key], b[key]
        numeric = all(isinstance(v, int | float) and not isinstance(v, bool) for v in (x, y))
        if numeric:
            if math.isnan(x) and math.isnan(y):
                continue
            d = abs(float(x) - float(y))
            if not d <= worst:  # NaN against a number: not comparable
                worst, where = (d if not math.isnan(d) else math.inf), key
        elif x != y:
            return math.inf, f"{key}: {x!r} != {y!r}"
    return worst, where


def _rows(path: Path, data: bytes) -> dict[str, object]:
    """A cell file's content as {key: leaf}: JSON flattened, CSV by row and column, Parquet by
    row and column."""
    if path.suffix == ".json":
        return _numbers(json.loads(data))
    if path.suffix == ".csv":
        rows = list(csv.DictReader(io.StringIO(data.decode())))
        return {
            f"{i}.{k}": (float(v) if _is_number(v) else v)
            for i, row in enumerate(rows)
            for k, v in row.items()
        }
    if path.suffix == ".parquet":
        table = pq.read_table(io.BytesIO(data)).to_pylist()
        return _numbers(table)
    return {"bytes": data.decode(errors="replace")}


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def compare_file(rel: str, committed: bytes | None, reproduced: bytes | None) -> FileDiff:
    """One file of the cell, as committed and as re-run (None: missing)."""
    if committed is None or reproduced is None:
        which = "committed" if committed is None else "re-run"
        return FileDiff(rel, False, math.inf, f"missing in the {which} cell")
    path = Path(rel)
    if committed == reproduced:
        return FileDiff(rel, True, 0.0)
    a, b = _rows(path, committed), _rows(path, reproduced)
    if path.suffix == ".json" and a == b:  # only what IGNORED_KEYS holds differs
        return FileDiff(rel, True, 0.0)
    worst, where = _compare_leaves(a, b)
    return FileDiff(rel, False, worst, where)


def compare_trees(committed: dict[str, bytes], reproduced: dict[str, bytes]) -> list[FileDiff]:
    """Every file of either tree ({relative path: bytes}), compared."""
    names = sorted(set(committed) | set(reproduced))
    return [compare_file(n, committed.get(n), reproduced.get(n)) for n in names]


def read_tree(paths: list[Path], root: Path) -> dict[str, bytes]:
    """{path relative to `root`: bytes} of the files at `paths` (files or folders)."""
    out: dict[str, bytes] = {}
    for p in paths:
        files = [p] if p.is_file() else sorted(f for f in p.rglob("*") if f.is_file())
        for f in files:
            out[f.relative_to(root).as_posix()] = f.read_bytes()
    return out


def render(cell: str, diffs: list[FileDiff], tolerance: float) -> str:
    """The verdict on one cell and a line per file that is not bit for bit the same."""
    bad = [d for d in diffs if not d.passes(tolerance)]
    same = sum(d.identical for d in diffs)
    worst = max((d.max_diff for d in diffs), default=0.0)
    verdict = "reproduced" if not bad else "NOT reproduced"
    head = f"{cell}: {verdict}: {same} of {len(diffs)} files bit for bit the same"
    if worst:
        head += f"; largest difference {worst:.3g} (tolerance {tolerance:g})"
    lines = [head]
    for d in diffs:
        if not d.identical:
            mark = "ok  " if d.passes(tolerance) else "FAIL"
            lines.append(f"  {mark} {d.path}: {d.max_diff:.3g} at {d.where}")
    return "\n".join(lines)


def git(*args: str, cwd: Path) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True)
    if done.returncode:
        raise InputError(f"git {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout


def cell_stage(root: Path, study_dir: Path, key: str):
    """The DVC stage of the cell `key` (variant-seed) and its deps (paths from the root)."""
    from dvc.repo import Repo

    target = f"{study_dir}/dvc.yaml:cell@{key}"
    try:
        (stage,) = Repo(str(root)).stage.collect(target)
    except Exception as exc:  # DVC's own errors say what is missing
        raise InputError(f"{target}: no such cell ({type(exc).__name__}: {exc})") from None
    return target, [str(d.def_path) for d in stage.deps]


def changed_inputs(root: Path, target: str, deps: list[str]) -> list[str]:
    """The cell's data inputs (deps git does not track) that differ from its dvc.lock entry."""
    done = subprocess.run(
        [sys.executable, "-m", "dvc", "status", "--json", target],
        cwd=root,
        capture_output=True,
        text=True,
    )
    if done.returncode:
        raise InputError(f"dvc status {target}: {done.stderr.strip()}")
    tracked = set(git("ls-files", "--", *deps, cwd=root).split())
    changed = []
    for entry in json.loads(done.stdout or "{}").get(target, []):
        deps_changed = entry.get("changed deps", {}) if isinstance(entry, dict) else {}
        for path, state in deps_changed.items():
            in_git = any(t == path or t.startswith(path.rstrip("/") + "/") for t in tracked)
            if not in_git and isinstance(state, str):  # params come as {key: state}
                changed.append(f"{path} ({state})")
    return changed


def reproduce(
    root: Path, study_dir: Path, key: str, tolerance: float, keep: Path | None = None
) -> bool:
    """Re-run the cell `key` of `study_dir` from HEAD in a git worktree of `root` and compare
    its files with HEAD's (`render` prints the verdict); True when every file passes."""
    target, deps = cell_stage(root, study_dir, key)
    changed = changed_inputs(root, target, deps)
    if changed:
        raise InputError(
            f"{target}: its inputs are not the ones it was made from: {', '.join(changed)}. "
            "Rebuild them from the committed params (`dvc repro` upstream, or `dvc checkout`), "
            "or re-run the cell: a cell cannot be reproduced on other inputs"
        )
    outputs = [f"{study_dir}/cells/{key}", f"{study_dir}/cells/{key}.json"]
    committed_files = git("ls-files", "--", *outputs, cwd=root).split()
    if not committed_files:
        raise InputError(f"{target}: no committed outputs ({outputs[0]}) to compare with")
    work = keep or Path(tempfile.mkdtemp(prefix="grpo-lab-reproduce-"))
    tree = work / "repo"
    git("worktree", "add", "--detach", "--force", str(tree), "HEAD", cwd=root)
    try:
        committed = {
            f: subprocess.run(["git", "show", f"HEAD:{f}"], cwd=root, capture_output=True).stdout
            for f in committed_files
        }
        for rel in deps:
            if not (tree / rel).exists() and (root / rel).exists():
                (tree / rel).parent.mkdir(parents=True, exist_ok=True)
                os.symlink((root / rel).resolve(), tree / rel)
        for out in outputs:  # the re-run writes them afresh
            path = tree / out
            shutil.rmtree(path) if path.is_dir() else path.unlink(missing_ok=True)
        variant, seed = key.rsplit("-", 1)
        cmd = [sys.executable, "-m", "stages.study_cell", "cell", str(study_dir), variant, seed]
        print(f"{target}: re-running in {tree}", file=sys.stderr, flush=True)
        done = subprocess.run(cmd, cwd=tree)
        if done.returncode:
            raise InputError(f"{target}: the re-run failed (exit {done.returncode})")
        reproduced = read_tree([tree / o for o in outputs if (tree / o).exists()], tree)
        diffs = compare_trees(committed, reproduced)
        print(render(target, diffs, tolerance))
        return all(d.passes(tolerance) for d in diffs)
    finally:
        if keep is None:
            git("worktree", "remove", "--force", str(tree), cwd=root)
            shutil.rmtree(work, ignore_errors=True)
