"""`code`: write `f(x)` from a compact spec; gold = hidden tests in the code-answer format.

The spec lists integer operations in words (`add 3`, `sub 5`, `mul 2`), applied left to right;
the model writes one Python expression for them, which needs brackets wherever a `mul`
directly follows an `add` or `sub`. Level 1-3: a chain of 1-3 operations; level 4: a condition
choosing between a 2-operation and a 1-operation chain; level 5: a 2-operation chain repeated
2-3 times in a loop, then one more operation. One worked example is in the prompt:

    Q: f(x): add 3, mul 2. f(4)=14
    A: def f(x):
        return (x+3)*2

with answer `{"entry_point": "f", "tests": ["assert f(0) == 6", ...], "setup": ""}`: five
asserts on inputs other than the example's, so a partly right program gets partial reward.
Inputs are 0..12; for a condition the tests take both sides of the threshold and two inputs
on each branch, so changing any single operation, constant or comparison fails a test.

The solution is bare code, not in a ```python fence: the fence is 14 characters of pure
boilerplate per completion against a 72-token budget, and a character model gains nothing
from it (the code reward must accept an unfenced completion).
"""

from __future__ import annotations

import json

import numpy as np

from grpo_core.data.tiny.common import generate_rows

DOMAIN = "code"
SOURCE = "code"
ENTRY_POINT = "f"
INPUTS = range(13)  # example and test inputs
N_TESTS = 5
# (word, Python operator, constants); kept small so level-5 values stay a few digits long.
OP_KINDS = (("add", "+", range(1, 10)), ("sub", "-", range(1, 10)), ("mul", "*", range(2, 10)))
OPS: tuple[tuple[str, int], ...] = tuple((w, k) for w, _, ks in OP_KINDS for k in ks)
SYMBOL = {w: s for w, s, _ in OP_KINDS}
COMPARISONS = (">", "<")
# Thresholds with at least three inputs on either side, so two tests and the example fit.
THRESHOLDS = range(3, 10)
LOOP_TIMES = (2, 3)

_SALT = 0x636F6465  # rng salt: the index stream differs from the other generators'

Ops = list[tuple[str, int]]


def expression(ops: Ops) -> str:
    """`ops` applied to `x` left to right as one expression: `[add 3, mul 2]` -> `(x+3)*2`."""
    expr, additive = "x", False
    for word, k in ops:
        if SYMBOL[word] == "*" and additive:
            expr = f"({expr})"
        expr = f"{expr}{SYMBOL[word]}{k}"
        additive = SYMBOL[word] != "*"
    return expr


def apply(ops: Ops, x: int) -> int:
    # The semantics, written independently of `expression`, so the tests can check one by
    # the other.
    for word, k in ops:
        x = x + k if word == "add" else x - k if word == "sub" else x * k
    return x


def words(ops: Ops) -> str:
    return ", ".join(f"{w} {k}" for w, k in ops)


def evaluate(spec: dict, x: int) -> int:
    """f(x) for a spec as stored in `meta`."""
    if spec["kind"] == "chain":
        return apply(spec["ops"], x)
    if spec["kind"] == "cond":
        cmp, t = spec["cond"]
        taken = x > t if cmp == ">" else x < t
        return apply(spec["ops"] if taken else spec["else_ops"], x)
    for _ in range(spec["times"]):
        x = apply(spec["ops"], x)
    return apply(spec["then_ops"], x)


def spec_text(spec: dict) -> str:
    if spec["kind"] == "chain":
        return words(spec["ops"])
    if spec["kind"] == "cond":
        cmp, t = spec["cond"]
        return f"if x{cmp}{t} {words(spec['ops'])}; else {words(spec['else_ops'])}"
    return f"{spec['times']} times {words(spec['ops'])}; then {words(spec['then_ops'])}"


def solution(spec: dict) -> str:
    head = f"def {ENTRY_POINT}(x):\n"
    if spec["kind"] == "chain":
        return f"{head}    return {expression(spec['ops'])}"
    if spec["kind"] == "cond":
        cmp, t = spec["cond"]
        return (
            f"{head}    if x{cmp}{t}:\n        return {expression(spec['ops'])}\n"
            f"    return {expression(spec['else_ops'])}"
        )
    return (
        f"{head}    for _ in range({spec['times']}):\n        x={expression(spec['ops'])}\n"
        f"    return {expression(spec['then_ops'])}"
    )


def prompt(spec: dict, x: int) -> str:
    return f"Q: {ENTRY_POINT}(x): {spec_text(spec)}. {ENTRY_POINT}({x})={evaluate(spec, x)}\nA: "


def answer(spec: dict, inputs: list[int]) -> str:
    tests = [f"assert {ENTRY_POINT}({x}) == {evaluate(spec, x)}" for x in inputs]
    return json.dumps({"entry_point": ENTRY_POINT, "tests": tests, "setup": ""})


def space_size(level: int) -> int:
    n = len(OPS)
    return {
        1: n,
        2: n**2,
        3: n**3,
        4: len(COMPARISONS) * len(THRESHOLDS) * n**3,
        5: len(LOOP_TIMES) * n**3,
    }[level]


def spec_at(level: int, index: int) -> dict:
    """The `index`-th spec of a level (mixed radix over its choices)."""
    index = int(index)

    def take(options):
        nonlocal index
        index, i = divmod(index, len(options))
        return options[i]

    def chain(n: int) -> Ops:
        return [take(OPS) for _ in range(n)]

    if level <= 3:
        return {"kind": "chain", "ops": chain(level)}
    if level == 4:
        cond = [take(COMPARISONS), take(THRESHOLDS)]
        return {"kind": "cond", "cond": cond, "ops": chain(2), "else_ops": chain(1)}
    if level == 5:
        return {"kind": "loop", "times": take(LOOP_TIMES), "ops": chain(2), "then_ops": chain(1)}
    raise ValueError(f"code: level must be 1..5, got {level}")


def pick_inputs(spec: dict, rng: np.random.Generator) -> tuple[int, list[int]]:
    """(example input, sorted test inputs), all distinct."""
    pool = list(INPUTS)
    if spec["kind"] != "cond":
        xs = rng.choice(pool, size=N_TESTS + 1, replace=False).tolist()
        return xs[0], sorted(xs[1:])
    cmp, t = spec["cond"]
    # The two inputs either side of the threshold catch an off-by-one comparison; two inputs
    # per branch catch any change in that branch's (affine) chain, which can agree with the
    # right one at one input at most.
    boundary = [t, t + 1] if cmp == ">" else [t - 1, t]
    tests = list(boundary)
    for side in (
        [x for x in pool if x < boundary[0]],
        [x for x in pool if x > boundary[1]],
    ):
        tests.append(int(rng.choice(side)))
    rest = [x for x in pool if x not in tests]
    more = rng.choice(rest, size=N_TESTS - len(tests) + 1, replace=False).tolist()
    return more[0], sorted(tests + more[1:])


def _problem(level: int, index: int, rng: np.random.Generator) -> dict:
    spec = spec_at(level, index)
    example, inputs = pick_inputs(spec, rng)
    return {
        "prompt": prompt(spec, example),
        "answer": answer(spec, inputs),
        "solution": solution(spec),
        "meta": {**spec, "example": example, "test_inputs": inputs},
    }


def generate_level(level: int, n_train: int, n_eval: int, seed: int) -> dict[str, list[dict]]:
    """Train and eval rows for one level, deterministic in (level, seed).

    Disjointness is over specs (the example input is decoration), split as in
    `common.split_indices`: level 1 has only 26 specs and level 2 676, so at the default sizes
    level 1's splits overlap and level 2's train repeats specs; levels 3-5 are disjoint.
    """
    return generate_rows(
        domain=DOMAIN,
        source=SOURCE,
        salt=_SALT,
        space=space_size(level),
        make_problem=lambda index, rng: _problem(level, index, rng),
        level=level,
        n_train=n_train,
        n_eval=n_eval,
        seed=seed,
    )
