"""A user's own reward function (`reward.function`), loaded from a file under `user_rewards/`
without editing the package: TRL's `reward_funcs`, verl's `custom_reward_function` (path and
name).

    reward:
      function: user_rewards/brevity.py:score

The function takes `(domain, completion, answer)` (the problem's domain, the completion's text,
the gold answer as the data holds it) and returns a float in [0, 1], 1 meaning solved: it
replaces the built-in verifiers wherever a completion is scored (profile, guide, train,
evaluate; not the tiny base's SFT probe, which calibrates the warm start on the built-in ones).
The reward shaping of `reward.weights` applies to it as to a verifier. It may call the built-in
ones (`grpo_core.rewards.verify.verify_batch`) and change what they give.

Every stage that scores lists the `user_rewards/` folder as a DVC dependency, so editing the
file reruns them; a file elsewhere would not be tracked and is refused. A bad path, a missing
function or a signature that does not take the three arguments fails the `validate` stage,
before any stage runs, with the key named.
"""

from __future__ import annotations

import importlib.util
import inspect
import math
import numbers
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Annotated

from pydantic import AfterValidator, Field

from grpo_core.errors import InputError

USER_REWARDS = "user_rewards"
SIGNATURE = "def NAME(domain: str, completion: str, answer: str) -> float"

RewardFunction = Callable[[str, str, str], float]


def load_reward_function(spec: str, root: Path | str = ".") -> RewardFunction:
    """The function `spec` ("user_rewards/FILE.py:NAME") names, its file read from `root`.
    ValueError, saying what is wrong and what is expected, unless it is there and callable
    with (domain, completion, answer)."""
    return _load(spec, str(Path(root).resolve()))


@cache
def _load(spec: str, root: str) -> RewardFunction:
    path, sep, name = spec.rpartition(":")
    if not sep or not path or not name.isidentifier():
        raise ValueError(f"{spec!r} is not FILE:FUNCTION (e.g. {USER_REWARDS}/brevity.py:score)")
    rel = Path(path)
    if rel.is_absolute() or rel.parts[0] != USER_REWARDS or ".." in rel.parts:
        raise ValueError(
            f"{path!r} is not under {USER_REWARDS}/: DVC tracks that folder as a dependency of "
            "every stage that scores, so a reward file elsewhere would not rerun them when edited"
        )
    if rel.suffix != ".py":
        raise ValueError(f"{path!r} is not a Python file (.py)")
    file = Path(root) / rel
    if not file.is_file():
        raise ValueError(f"{path!r}: no such file")
    module_spec = importlib.util.spec_from_file_location(f"user_rewards.{rel.stem}", file)
    module = importlib.util.module_from_spec(module_spec)
    try:
        module_spec.loader.exec_module(module)
    except Exception as exc:
        raise ValueError(f"{path!r} fails to import: {type(exc).__name__}: {exc}") from exc
    fn = getattr(module, name, None)
    if not callable(fn):
        found = sorted(
            n for n, v in vars(module).items() if inspect.isfunction(v) and not n.startswith("_")
        )
        raise ValueError(f"{path!r} has no function {name!r}; its functions: {found}")
    try:
        inspect.signature(fn).bind("math", "completion", "answer")
    except TypeError as exc:
        raise ValueError(
            f"{name}{inspect.signature(fn)} in {path!r} cannot be called as {SIGNATURE} ({exc})"
        ) from None
    return fn


def _check(spec: str | None) -> str | None:
    if spec is not None:
        load_reward_function(spec)
    return spec


# The `reward.function` key, in every view of the `reward` section that scores completions.
RewardFunctionSpec = Annotated[
    str | None,
    AfterValidator(_check),
    Field(
        description="Your own reward instead of the built-in verifiers: "
        "`user_rewards/FILE.py:NAME`, a function (domain, completion, answer) -> float in "
        "[0, 1] (1 = solved), used wherever completions are scored (profile, guide, train, "
        "evaluate). Null: the verifiers of grpo_core/rewards (grpo_core/config/user_reward.py, "
        "docs/architecture.md#your-own-reward-without-editing-the-package).",
    ),
]


def resolve(spec: str | None) -> RewardFunction | None:
    """The function `reward.function` names, or None for the built-in verifiers."""
    return None if spec is None else load_reward_function(spec)


def call_reward_function(
    fn: RewardFunction, domains: list[str], completions: list[str], answers: list[str]
) -> list[float]:
    """`fn` on every completion; a value that is not a number in [0, 1] (a bool counts) is an
    InputError naming the function and the row."""
    out = []
    for i, (d, c, a) in enumerate(zip(domains, completions, answers, strict=True)):
        value = fn(d, c, a)
        if not isinstance(value, numbers.Real) or math.isnan(value):
            raise InputError(
                f"reward.function {fn.__name__} returned {value!r} for row {i} "
                f"(domain {d!r}): expected a float in [0, 1]"
            )
        if not 0.0 <= value <= 1.0:
            raise InputError(
                f"reward.function {fn.__name__} returned {value} for row {i} (domain {d!r}): "
                "outside [0, 1] (1 = solved; shape the training reward with reward.weights)"
            )
        out.append(float(value))
    return out
