"""A study: variants x seeds over the pipeline, declared in `studies/<name>/study.yaml`.

A variant is a set of params.yaml overrides (dotted keys). Every cell (variant, seed) trains
from the main pipeline's data and base model (or the study's own, when its `params` set `data`
or `model` keys) with params.yaml, then the study's `params`, then the variant's overrides,
then the budget (`train.steps`, or `train.max_rollouts` for an equal number of rollouts),
then `train.seed` and `eval.seed` set to the cell's seed. With `bases: per_seed` each seed
has its own base as well (`model.seed` set to the seed: the tiny world's SFT), so the seeds
replicate the whole recipe, base included, not the RL on one base. The merged params are
validated as a whole params file, so a bad override fails before any work with a message that
names the study file, the variant and the key.
"""

from __future__ import annotations

import copy
import math
import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from grpo_core.config.params import Params, parse_params
from grpo_core.errors import InputError

BASE = "base"  # the base model, a baseline every study has
# By default a level where something can move is one the base solves 5%-95% of (Study.band).
BAND = (0.05, 0.95)
NAME = re.compile(r"^[a-z][a-z0-9_]*$")
# Keys a study may not override: the study sets the seeds.
FORBIDDEN = {
    "seed": "the study's `seeds` set train.seed and eval.seed",
    "train.seed": "the study's `seeds` set it",
    "eval.seed": "the study's `seeds` set it",
}
# Sections only the study's `params` may override: they make the study's upstream its own
# (its own data and base model), which every cell shares.
UPSTREAM = ("data", "model")
# The tiny world's bases by seed, which every `bases: per_seed` study on the main pipeline's
# data shares: studies/seed_bases/<seed>/models/base (stages.study_cell seed_base).
SEED_BASES = Path("studies/seed_bases")


class StudyError(InputError):
    """A study file is missing or invalid; the message names the file and the key."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Check(_Strict):
    """One comparison behind a claim. With `metric: accuracy` (the default): `variant` minus
    `baseline` at `level` (an int, or `all` for every reported level), paired by seed and
    question. With another metric, a dotted key of the cells' summary JSON (a {first, last}
    pair counts as last - first, e.g. `dynamics.tokens.zero_adv_frac`): per seed the
    variant's value, minus the baseline's at the same seed when `baseline` is set."""

    variant: str
    baseline: str | None = None
    metric: str = "accuracy"
    level: int | Literal["all"] = "all"
    expect: Literal["better", "worse", "different", "equal"] = Field(
        description="The claim's direction. better / worse: the difference is above / below 0 "
        "by at least `effect`; different: it is not 0 (tested two-sided); equal: it lies "
        "inside [-effect, effect] (an equivalence test). grpo_core.studies.stats.check_outcome "
        "gives the verdict rules."
    )
    effect: float = Field(
        gt=0,
        description="The smallest effect of interest: for accuracy a fraction (0.02 = 2 "
        "points), otherwise in the metric's units; for `equal` the equivalence margin. The "
        "paper's own size where it gives one, translated to the tiny world as `why` says.",
    )
    why: str = Field("", description="Where `effect` comes from (the paper's size, a margin).")

    @model_validator(mode="after")
    def _accuracy_needs_a_baseline(self) -> Check:
        if self.metric == "accuracy" and self.baseline is None:
            raise ValueError("an accuracy check needs a baseline (a variant, or 'base')")
        return self


class Precondition(_Strict):
    """What must hold for claims to mean anything here, on the mean over seeds of `variant`
    (or `base`): `metric` is `accuracy` at `level`, a dotted key of the cells' summary JSON,
    or `train:<column>`, the mean over steps of a column of the cells' train.csv (e.g.
    `train:oc/guided_groups`); minus `baseline`'s at the same seed when it is set (e.g. the
    rollouts two arms spent). A failed precondition makes its claims "not testable here"."""

    what: str = Field(description="The condition in words, e.g. 'the base rarely boxes'.")
    variant: str
    baseline: str | None = None
    metric: str = "accuracy"
    level: int | Literal["all"] = "all"
    below: float | None = None
    above: float | None = None
    claims: list[str] | None = Field(None, description="The claims it guards; null: every one.")

    @model_validator(mode="after")
    def _one_bound(self) -> Precondition:
        if (self.below is None) == (self.above is None):
            raise ValueError("set exactly one of below and above")
        return self


class Claim(_Strict):
    """A paper's claim, the number the paper gives, and the checks that test it here."""

    id: str
    claim: str
    paper: str
    source: Literal["paper", "grpo-lab"] = Field(
        "paper",
        description="Whose claim it is: one of the papers', or grpo-lab's own (an option or "
        "a curriculum of ours, which no paper states); docs/findings.md marks the latter.",
    )
    checks: list[Check] = Field(min_length=1)
    tiny_world: str | None = Field(
        None,
        pattern=r"^[A-Za-z0-9_-]+/[A-Za-z0-9_.-]+$",
        description="The tiny world's claim that asks the same question, as `<study>/<claim "
        "id>` (a real-model study's claim): docs/findings.md sets the two verdicts side by "
        "side in its transfer table.",
    )
    transfer: str | None = Field(
        None,
        description="With `tiny_world`: what the two verdicts say together, and where they "
        "disagree, why (written after reading both studies' cells).",
    )


class Budget(_Strict):
    """What every variant spends: `steps` RL steps, or `rollouts` (train.max_rollouts, with
    train.steps raised so that a step of prompts_per_step x group_size reaches it)."""

    steps: int | None = Field(None, gt=0)
    rollouts: int | None = Field(None, gt=0)

    @model_validator(mode="after")
    def _one(self) -> Budget:
        if (self.steps is None) == (self.rollouts is None):
            raise ValueError("set exactly one of budget.steps and budget.rollouts")
        return self


class Study(_Strict):
    title: str
    question: str = Field(description="What the study asks, in a sentence or two.")
    seeds: list[int] = Field(min_length=1)
    baseline: str
    budget: Budget
    params: dict[str, Any] = Field(description="Every cell's overrides ({} for none).")
    variants: dict[str, dict[str, Any]] = Field(min_length=1)
    levels: list[int] | None = Field(None, description="Levels to report; null: all evaluated.")
    dynamics: list[str] = Field(
        default_factory=list, description="Variants whose training dynamics the report draws."
    )
    cut: list[str] = Field(
        default_factory=list, description="What was left out to fit the time budget."
    )
    claims: list[Claim] = Field(default_factory=list)
    preconditions: list[Precondition] = Field(default_factory=list)
    bases: Literal["shared", "per_seed"] = Field(
        "shared",
        description="What a seed replicates. shared: every seed trains from one base (the "
        "main pipeline's, or the study's own); the intervals then hold for that base only. "
        "per_seed: each seed builds its own base with `model.seed` set to the seed (the tiny "
        "world's SFT run again), and its profile and guides from it, so the intervals cover "
        "the base's variation too (a pretrained model's base does not change with the seed).",
    )
    band: tuple[float, float] = Field(
        BAND,
        description="Where something can move: an accuracy check reads only the levels where "
        "the base solves between these fractions (grpo_core.studies.claims.read_levels); "
        "outside, every arm sits at the floor or the ceiling and the check is not testable "
        "here. State another where the base's accuracy is held down by something training "
        "lifts in every arm (the answer format), not by what the levels ask.",
    )
    grpo_arm: str | None = Field(
        None,
        description="The study's plain GRPO variant on the arith ladder, if it has one: "
        "docs/findings.md reads the capacity boundary against it in every study that names one.",
    )
    plots: list[str] = Field(
        default_factory=list,
        description="Step metrics of training (columns of a cell's train.csv, e.g. reward, "
        "rewards/format/mean, completions/mean_length) that the study's dvc.yaml declares as "
        "DVC plots, one plot per metric with a line per cell: `dvc plots show "
        "studies/<name>/dvc.yaml`. None by default: `dvc plots show` in the repository root "
        "would draw every cell of every study.",
    )

    @field_validator("band")
    @classmethod
    def _band(cls, band: tuple[float, float]) -> tuple[float, float]:
        if not 0.0 <= band[0] < band[1] <= 1.0:
            raise ValueError(f"band must be [lo, hi] with 0 <= lo < hi <= 1, got {list(band)}")
        return band

    @field_validator("seeds")
    @classmethod
    def _unique(cls, seeds: list[int]) -> list[int]:
        if len(set(seeds)) != len(seeds) or min(seeds) < 0:
            raise ValueError(f"seeds must be distinct and >= 0, got {seeds}")
        return seeds

    @field_validator("variants")
    @classmethod
    def _names(cls, variants: dict) -> dict:
        for name in variants:
            if not NAME.match(name) or name == BASE:
                raise ValueError(
                    f"variant name {name!r}: lower-case letters, digits and _ only (it names "
                    f"DVC stages), and not {BASE!r}"
                )
        return variants

    @model_validator(mode="after")
    def _references(self) -> Study:
        known = set(self.variants)
        wrong = [("baseline", self.baseline)] if self.baseline not in known else []
        wrong += [("dynamics", v) for v in self.dynamics if v not in known]
        wrong += [("grpo_arm", self.grpo_arm)] * (
            self.grpo_arm is not None and self.grpo_arm not in known
        )
        for claim in self.claims:
            for check in claim.checks:
                wrong += [(f"claims.{claim.id}.variant", check.variant)] * (
                    check.variant not in known
                )
                wrong += [(f"claims.{claim.id}.baseline", check.baseline)] * (
                    check.baseline is not None and check.baseline not in known | {BASE}
                )
        if self.bases == "per_seed" and any(_under(k, "model.seed") for k in self.params):
            raise ValueError("params: 'model.seed' cannot be overridden: bases: per_seed sets it")
        ids = {claim.id for claim in self.claims}
        for i, pre in enumerate(self.preconditions):
            for key, name in (("variant", pre.variant), ("baseline", pre.baseline)):
                if name is not None and name not in known | {BASE}:
                    wrong.append((f"preconditions.{i}.{key}", name))
            for cid in pre.claims or []:
                if cid not in ids:
                    raise ValueError(f"preconditions.{i}.claims: no claim {cid!r}")
        if wrong:
            raise ValueError(
                "; ".join(f"{key}: {name!r} is not a variant" for key, name in wrong)
                + f" (variants: {', '.join(self.variants)})"
            )
        for where, overrides in [("params", self.params)] + [
            (f"variants.{v}", o) for v, o in self.variants.items()
        ]:
            for key in overrides:
                for bad, why in FORBIDDEN.items():
                    if _under(key, bad):
                        raise ValueError(f"{where}: {key!r} cannot be overridden: {why}")
                if where != "params" and any(_under(key, s) for s in UPSTREAM):
                    raise ValueError(
                        f"{where}: {key!r}: a variant cannot change the data or the base model, "
                        "which every cell shares; set it in the study's `params`"
                    )
        return self

    @property
    def own_upstream(self) -> bool:
        """Whether the study builds its own data and base model (its `params` set `data` or
        `model` keys) instead of sharing the main pipeline's."""
        return any(_under(key, s) for key in self.params for s in UPSTREAM)

    @property
    def shares_seed_bases(self) -> bool:
        """Whether its bases are the shared ones by seed (`SEED_BASES`): a base per seed on the
        main pipeline's data and model params, the same for every study that asks for it."""
        return self.bases == "per_seed" and not self.own_upstream

    def base_dir(self, root: Path, study_dir: Path, seed: int | None) -> Path:
        """The base model `seed`'s cells train from: the main pipeline's, the study's own
        (its upstream's), or the shared one of that seed."""
        if self.shares_seed_bases:
            if seed is None:
                raise StudyError(f"{study_dir}: bases: per_seed: a base per seed; name one")
            return root / SEED_BASES / str(seed) / "models/base"
        if self.own_upstream:
            return self.upstream_dir(study_dir, seed) / "models/base"
        return root / "models/base"

    def upstream_dir(self, study_dir: Path, seed: int | None) -> Path:
        """Where the upstream of `seed`'s cells lies: studies/<name>/upstream/, or
        studies/<name>/upstream/<seed>/ with a base per seed."""
        up = Path(study_dir) / "upstream"
        if self.bases != "per_seed":
            return up
        if seed is None:
            raise StudyError(f"{study_dir}: bases: per_seed builds an upstream per seed; name one")
        return up / str(seed)

    @property
    def real_model(self) -> bool:
        """Whether the study's own base is a real model (its params name a `model.name` other
        than tiny): hundreds of MB, kept in the DVC cache, not in git."""
        name = self.params.get("model.name", (self.params.get("model") or {}).get("name"))
        return name not in (None, "tiny")

    def cells(self) -> list[tuple[str, int]]:
        return [(v, s) for v in self.variants for s in self.seeds]


def _under(key: str, section: str) -> bool:
    return key == section or key.startswith(section + ".")


def cell_key(variant: str, seed: int) -> str:
    """The cell's name, as DVC's matrix names it: `cell@<variant>-<seed>`."""
    return f"{variant}-{seed}"


def load_study(path: str | Path) -> Study:
    path = Path(path)
    if path.is_dir():
        path = path / "study.yaml"
    if not path.exists():
        raise StudyError(f"{path}: no such study file")
    try:
        raw = yaml.safe_load(path.read_text())
        return Study.model_validate(raw)
    except yaml.YAMLError as exc:
        raise StudyError(f"{path}: not valid YAML: {exc}") from None
    except ValidationError as exc:
        lines = [
            f"  {'.'.join(str(p) for p in e['loc']) or '(top level)'}: {e['msg']}"
            for e in exc.errors()
        ]
        raise StudyError(f"{path} is invalid:\n" + "\n".join(lines)) from None


def set_dotted(params: dict, key: str, value: Any) -> None:
    """params[a][b][c] = value for key 'a.b.c'; a mapping value merges into a mapping."""
    *parents, last = key.split(".")
    node = params
    for i, part in enumerate(parents):
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise InputError(f"{key}: {'.'.join(parents[: i + 1])} is not a section")
        node = child
    if isinstance(value, dict) and isinstance(node.get(last), dict):
        for k, v in value.items():
            set_dotted(node, f"{last}.{k}", v)
    else:
        node[last] = copy.deepcopy(value)


def get_dotted(params: dict, key: str) -> Any:
    node: Any = params
    for part in key.split("."):
        node = node[part]
    return node


def upstream_params(raw: dict, study: Study, seed: int | None = None) -> dict:
    """params.yaml with the study's `params`: what its upstream stages read (profile and
    guide; prepare and base too when the study has its own upstream), and with `bases:
    per_seed` the base's seed, `model.seed`, set to `seed`."""
    out = copy.deepcopy(raw)
    for key, value in study.params.items():
        set_dotted(out, key, value)
    if study.bases == "per_seed" and seed is not None:
        set_dotted(out, "model.seed", seed)
    return out


def cell_params(raw: dict, study: Study, variant: str, seed: int, source: str = "study") -> dict:
    """The params.yaml of one cell (see the module docstring), validated as a whole."""
    if variant not in study.variants:
        raise StudyError(
            f"{source}: no variant {variant!r} (variants: {', '.join(study.variants)})"
        )
    overrides = study.variants[variant]
    out = upstream_params(raw, study, seed)
    for key, value in overrides.items():
        set_dotted(out, key, value)
    # The budget, where the variant does not set it itself.
    budget = study.budget
    if budget.steps is not None and "train.steps" not in overrides:
        set_dotted(out, "train.steps", budget.steps)
    if budget.rollouts is not None:
        if "train.max_rollouts" not in overrides:
            set_dotted(out, "train.max_rollouts", budget.rollouts)
        if "train.steps" not in overrides:
            # prompts_per_step x group_size as validated (a key the file leaves out: its default)
            train = check_params(out, f"{source}, variant {variant}").train
            per_step = train.prompts_per_step * train.group_size
            set_dotted(out, "train.steps", math.ceil(budget.rollouts / per_step))
    set_dotted(out, "train.seed", seed)
    set_dotted(out, "eval.seed", seed)
    check_params(out, f"{source}, variant {variant}")
    return out


def check_params(raw: dict, source: str) -> Params:
    try:
        return parse_params(raw, source)
    except InputError as exc:
        raise StudyError(str(exc)) from None
