"""Atomic outputs: write under a temporary name beside the target, then rename.

An interrupted stage therefore never leaves a half-written artifact for DVC to cache; the
previous version (if any) stays intact until the new one is complete.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from grpo_core.errors import InputError


@contextmanager
def atomic_path(target: str | Path) -> Iterator[Path]:
    """Yield a temporary sibling path; on success it replaces `target` (file or directory)."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent)) / target.name
    try:
        yield tmp
        if target.is_dir() and not target.is_symlink():
            old = target.with_name(f".{target.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            target.rename(old)
            tmp.rename(target)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, target)
    finally:
        shutil.rmtree(tmp.parent, ignore_errors=True)


def write_parquet(table: pa.Table, target: str | Path) -> None:
    with atomic_path(target) as tmp:
        pq.write_table(table, tmp)


def write_json(obj: object, target: str | Path) -> None:
    with atomic_path(target) as tmp:
        tmp.write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n")


def read_stage_output(path: str, columns: list[str], stage: str) -> pa.Table:
    """`columns` of the Parquet file `path` that stage `stage` writes. Missing, unreadable
    (corrupt, truncated) or short of a column, it is an InputError naming the file and how to
    get it back, instead of pyarrow's traceback."""
    if not Path(path).exists():
        raise FileNotFoundError(f"{path}: not found; run the `{stage}` stage (dvc repro)")
    restore = f"restore it (`dvc checkout {path}`) or rerun the `{stage}` stage (`dvc repro`)"
    try:
        schema = pq.read_schema(path)
        missing = [c for c in columns if c not in schema.names]
        if missing:
            raise InputError(f"{path}: missing columns {missing} of {columns}; {restore}")
        return pq.read_table(path, columns=columns)
    except (pa.ArrowInvalid, OSError) as exc:
        reason = " ".join(str(exc).split())
        raise InputError(f"{path}: not a readable Parquet file ({reason}); {restore}") from None


def digest(path: str | Path) -> str:
    """A short content hash of a file or a directory (its files' relative paths and bytes, in
    sorted order; hidden files left out): what a run records of the base model and the eval
    set it used, so that two runs are compared only on the same ones. 16 hex digits of
    SHA-256."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: not found")
    files = (
        [path]
        if path.is_file()
        else sorted(
            p
            for p in path.rglob("*")
            if p.is_file() and not any(part.startswith(".") for part in p.relative_to(path).parts)
        )
    )
    h = hashlib.sha256()
    for f in files:
        h.update(f.relative_to(path).as_posix().encode() if f != path else b"")
        h.update(b"\0")
        with open(f, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
        h.update(b"\1")
    return h.hexdigest()[:16]
