"""The shared core of the params: the section base class, field types, the names of the
top-level keys, and reading params.yaml into a stage's view of it with messages that name the
key and what is allowed.

Every knob is documented where it is declared (the TRL `GRPOConfig` habit), one module per
`params.yaml` section, so a stage's code dependencies hold only the sections it reads: editing
the declaration of `eval` reruns `evaluate` alone. Each stage validates the sections it reads
(its view, a `StageParams`) before doing any work; a key that belongs to no section at all is
an error in every stage.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal, TypeVar

import yaml
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from grpo_core.errors import InputError

# The top-level keys of params.yaml, in its order.
SECTIONS = (
    "seed",
    "algo",
    "data",
    "model",
    "profile",
    "guide",
    "train",
    "dynamics",
    "eval",
    "reward",
    "launch",
    "numerics",
    "threads",
)

PositiveInt = Annotated[int, Field(gt=0)]
PositiveFloat = Annotated[float, Field(gt=0)]
Fraction = Annotated[float, Field(gt=0, le=1)]
Seed = Annotated[int, Field(ge=0)]

# How a stage computes on the model (`dtype`) and draws its tokens (`draw`): train, profile,
# guide and eval each have both. The defaults are the reference: float32 weights, and
# torch.multinomial's draw, the random numbers of `model.generate`.
Dtype = Annotated[
    Literal["float32", "bfloat16"],
    Field(
        description="The parameters' dtype while the stage runs: float32, or bfloat16 "
        "(grpo_core.models.precision), where a CPU with AVX512-BF16/AMX multiplies 3-7x "
        "faster; token log-probs then move by 0.035 nats on average "
        "(benchmarks/results/cpu-dtype-smollm2.md). In train it needs LoRA (the adapters "
        "stay float32, and the policy is merged and saved in float32).",
    ),
]
Draw = Annotated[
    Literal["multinomial", "inverse_cdf"],
    Field(
        description="How a sampled token is drawn from its distribution. multinomial: "
        "torch.multinomial, the random numbers of `model.generate` (one exponential per "
        "vocabulary entry: on a CPU, a third of SmolLM2's generation time at its 49,152 "
        "tokens). inverse_cdf: one uniform per row against the cumulative probabilities, the "
        "same distribution from other random numbers (grpo_core.rollout.sampler).",
    ),
]


def _increasing(fractions: list[float]) -> list[float]:
    if fractions != sorted(set(fractions)):
        raise ValueError(f"fractions {fractions} must be increasing and distinct")
    return fractions


# Hint fractions (of the reference solution's characters, `char_prefix`), tried in order (OC-GRPO).
Fractions = Annotated[list[Fraction], Field(min_length=1), AfterValidator(_increasing)]
TinyLevel = Annotated[int, Field(ge=1, le=5)]
Level = Annotated[int, Field(ge=0, le=5)]  # 0: a real dataset without difficulty levels


class Section(BaseModel):
    # extra="forbid": an unknown key is an error, not silently ignored.
    model_config = ConfigDict(extra="forbid", frozen=True)


class StageParams(BaseModel):
    """A stage's view of params.yaml: the sections it reads, as fields. The other sections
    belong to other stages, which validate them."""

    model_config = ConfigDict(extra="ignore", frozen=True)


P = TypeVar("P", bound=StageParams)


class ParamsError(InputError):
    """params.yaml is missing, unreadable or invalid; the message says where and why."""


def _describe(err: dict) -> str:
    key = ".".join(str(p) for p in err["loc"]) or "(top level)"
    kind = err["type"]
    if kind == "extra_forbidden":
        return f"{key}: unknown key"
    if kind == "literal_error":
        allowed = err.get("ctx", {}).get("expected", "")
        return f"{key}: got {err.get('input')!r}; allowed values: {allowed}"
    return f"{key}: {err['msg']} (got {err.get('input')!r})"


def _allowed_keys(loc: tuple, model: type[BaseModel]) -> str:
    if len(loc) == 1:
        return ", ".join(SECTIONS)
    for part in loc[:-1]:
        field = model.model_fields.get(str(part))
        ann = getattr(field, "annotation", None)
        if not (isinstance(ann, type) and issubclass(ann, BaseModel)):
            return ""
        model = ann
    return ", ".join(model.model_fields)


def parse_params(raw: object, view: type[P], source: str = "params.yaml") -> P:
    """Validate a parsed YAML mapping as `view` (a stage's sections, or the whole file); raise
    ParamsError naming every bad key."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ParamsError(
            f"{source}: expected a mapping at the top level, got {type(raw).__name__}"
        )
    errors: list[dict] = []
    try:
        parsed = view.model_validate(raw)
    except ValidationError as exc:
        errors = exc.errors()
    errors += [
        {"loc": (key,), "type": "extra_forbidden", "msg": "", "input": raw[key]}
        for key in raw
        if key not in SECTIONS
    ]
    if errors:
        lines = []
        for err in errors:
            line = _describe(err)
            if err["type"] == "extra_forbidden":
                line += f" (allowed keys here: {_allowed_keys(err['loc'], view)})"
            lines.append("  " + line)
        raise ParamsError(f"{source} is invalid:\n" + "\n".join(lines)) from None
    return parsed


def read_yaml(path: str | Path = "params.yaml") -> object:
    """params.yaml, parsed (not validated)."""
    path = Path(path)
    if not path.exists():
        raise ParamsError(f"{path}: not found (run from the repository root)")
    try:
        return yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ParamsError(f"{path}: not valid YAML: {exc}") from None


def load_params(view: type[P], path: str | Path = "params.yaml") -> P:
    """`view` of the params file at `path`, validated."""
    return parse_params(read_yaml(path), view, str(path))
