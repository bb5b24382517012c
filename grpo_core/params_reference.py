"""docs/params.md, generated from the pydantic models that validate params.yaml: every key,
its type, its default and its description, section by section.

    python -m grpo_core.params_reference docs/params.md

`tests/test_config.py` checks that the page is current, so a new or changed key that is not
regenerated fails the suite.
"""

from __future__ import annotations

import json
import sys
import types
import typing
from pathlib import Path

import annotated_types
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from grpo_core.config.params import Params
from grpo_core.io import atomic_path

_BOUNDS = {"gt": ">", "ge": ">=", "lt": "<", "le": "<="}


def _bounds(metadata: list) -> list[str]:
    out = []
    # a Field() inside Annotated holds its bounds in its own metadata
    flat = [x for m in metadata for x in (m.metadata if isinstance(m, FieldInfo) else [m])]
    for m in flat:
        for attr, sign in _BOUNDS.items():
            value = getattr(m, attr, None)
            if value is not None and isinstance(m, annotated_types.BaseMetadata):
                out.append(f"{sign} {value}")
        if isinstance(m, annotated_types.MinLen) and m.min_length:
            out.append(f"at least {m.min_length}")
    return out


def type_name(annotation: object, metadata: list | None = None) -> str:
    """A short, readable name for a field's type: `0 < float <= 1`-style bounds, Literal
    choices joined by |, `list of ...`, `null` for None."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        return type_name(args[0], [*args[1:], *(metadata or [])])
    if origin is typing.Literal:
        return " \\| ".join(json.dumps(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(type_name(a) for a in args)
    if origin is list:
        return f"list of {type_name(args[0])}" if args else "list"
    if origin is dict:
        return "mapping"
    if annotation is type(None):
        return "null"
    name = getattr(annotation, "__name__", str(annotation))
    bounds = _bounds(metadata or [])
    return f"{name} ({', '.join(bounds)})" if bounds else name


def _default(info: FieldInfo) -> str:
    value = info.default_factory() if info.default_factory is not None else info.default
    if isinstance(value, BaseModel):
        return "(section)"
    return f"`{json.dumps(value)}`"


def _section_of(annotation: object) -> type[BaseModel] | None:
    """The params section (a BaseModel) a field holds, also when it may be null."""
    candidates = typing.get_args(annotation) or (annotation,)
    for c in candidates:
        if isinstance(c, type) and issubclass(c, BaseModel):
            return c
    return None


def rows(model: type[BaseModel], prefix: str = "") -> list[list[str]]:
    """One row per key under `model` (nested sections flattened to dotted keys)."""
    out = []
    for name, info in model.model_fields.items():
        key = f"{prefix}{name}"
        section = _section_of(info.annotation)
        description = " ".join((info.description or "").split()).replace("|", "\\|")
        if section is not None:
            doc = " ".join((section.__doc__ or "").split()).replace("|", "\\|")
            nullable = " (null: off)" if type(None) in typing.get_args(info.annotation) else ""
            out.append([f"`{key}`", "section" + nullable, _default(info), description or doc])
            out += rows(section, key + ".")
            continue
        kind = type_name(info.annotation, list(info.metadata))
        out.append([f"`{key}`", kind, _default(info), description])
    return out


def render() -> str:
    lines = [
        "# Every parameter",
        "",
        "_Generated from the pydantic models in `grpo_core/config/` by `python -m "
        "grpo_core.params_reference docs/params.md`; do not edit. Each key is declared, "
        "validated and described in the module of its section; `params.yaml` spells every "
        "one out._",
        "",
    ]
    for name, info in Params.model_fields.items():
        section = _section_of(info.annotation)
        lines.append(f"## `{name}`")
        lines.append("")
        if section is None:
            kind = type_name(info.annotation, list(info.metadata))
            lines += [f"{kind}, default {_default(info)}.", ""]
            continue
        doc = " ".join((section.__doc__ or "").split())
        lines += [doc, "", "| key | type | default | description |", "|---|---|---|---|"]
        lines += ["| " + " | ".join(r) + " |" for r in rows(section, name + ".")]
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str]) -> None:
    if len(argv) != 1:
        raise SystemExit("usage: python -m grpo_core.params_reference docs/params.md")
    with atomic_path(Path(argv[0])) as tmp:
        tmp.write_text(render())
    print(argv[0])


if __name__ == "__main__":
    main(sys.argv[1:])
