"""Atomic outputs: write under a temporary name beside the target, then rename.

An interrupted stage therefore never leaves a half-written artifact for DVC to cache; the
previous version (if any) stays intact until the new one is complete.
"""

from __future__ import annotations

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
