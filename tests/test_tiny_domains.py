import hashlib
import json
from collections import Counter

import numpy as np
import pytest

from grpo_core.data.schema import problems_table
from grpo_core.data.tiny import arith, code, mcq
from grpo_core.models.tiny import build_char_tokenizer

GENERATORS = {"mcq": mcq.generate_level, "code": code.generate_level}
LEVELS = [1, 2, 3, 4, 5]


def run_tests(program: str, answer: str) -> list[bool]:
    """Each hidden test's outcome on `program` (trusted code: plain exec)."""
    gold = json.loads(answer)
    namespace: dict = {}
    exec(gold["setup"] + "\n" + program, namespace)
    outcomes = []
    for test in gold["tests"]:
        try:
            exec(test, namespace)
            outcomes.append(True)
        except AssertionError:
            outcomes.append(False)
    return outcomes


# --- hand-checked rows ---------------------------------------------------------------------


def test_mcq_row_written_out():
    # 54+39: 4+9=13 carries into 5+3+1=9, so 9 tens; option A has 7 tens, so the sum is two
    # steps of 10 above it: C) 93. The other options are 93 with 1-2 tens lost or 1 invented.
    row = mcq.generate_level(2, n_train=5, n_eval=5, seed=0)["eval"][3]
    assert row == {
        "id": "mcq-eval-L2-00003",
        "domain": "mcq",
        "source": "mcq",
        "level": 2,
        "prompt": "A) 73 B) 83 C) 93 D) 103\nQ: mass in g: 54+39=?\nA: ",
        "answer": "C",
        "solution": "4+9=13\n5+3+1=9\n9-7=2\nAnswer: C",
        "meta": '{"a": 54, "b": 39, "unit": "g", "options": [73, 83, 93, 103], "sum": 93}',
    }


def test_code_row_written_out():
    # x>7: (x+9)*4, so f(8)=68, f(9)=72, f(12)=84; else x-9, so f(1)=-8, f(7)=-2, f(2)=-7.
    # The tests straddle the threshold (7, 8) and hold two inputs per branch.
    row = code.generate_level(4, n_train=5, n_eval=3, seed=0)["eval"][1]
    assert row == {
        "id": "code-eval-L4-00001",
        "domain": "code",
        "source": "code",
        "level": 4,
        "prompt": "Q: f(x): if x>7 add 9, mul 4; else sub 9. f(2)=-7\nA: ",
        "answer": json.dumps(
            {
                "entry_point": "f",
                "tests": [
                    "assert f(1) == -8",
                    "assert f(7) == -2",
                    "assert f(8) == 68",
                    "assert f(9) == 72",
                    "assert f(12) == 84",
                ],
                "setup": "",
            }
        ),
        "solution": "def f(x):\n    if x>7:\n        return (x+9)*4\n    return x-9",
        "meta": json.dumps(
            {
                "kind": "cond",
                "cond": [">", 7],
                "ops": [["add", 9], ["mul", 4]],
                "else_ops": [["sub", 9]],
                "example": 2,
                "test_inputs": [1, 7, 8, 9, 12],
            }
        ),
    }


def test_mcq_options_and_solution():
    assert mcq.options(85, level=2, position=2) == [65, 75, 85, 95]
    assert mcq.solution(47, 38, 2, [65, 75, 85, 95]) == "7+8=15\n4+3+1=8\n8-6=2\nAnswer: C"
    # a carry out of the top place: 12 tens
    assert mcq.options(125, level=2, position=3) == [95, 105, 115, 125]
    assert mcq.solution(57, 68, 2, [95, 105, 115, 125]) == "7+8=15\n5+6+1=12\n12-9=3\nAnswer: D"
    assert mcq.solution(3, 4, 1, [5, 6, 7, 8]) == "3+4=7\n7-5=2\nAnswer: C"
    assert mcq.prompt(47, 38, ("mass", "g"), [65, 75, 85, 95]) == (
        "A) 65 B) 75 C) 85 D) 95\nQ: mass in g: 47+38=?\nA: "
    )


def test_code_expression_brackets_only_where_needed():
    assert code.expression([("add", 3), ("mul", 2)]) == "(x+3)*2"
    assert code.expression([("mul", 2), ("add", 3)]) == "x*2+3"
    assert code.expression([("sub", 1), ("mul", 2), ("mul", 3)]) == "(x-1)*2*3"
    assert code.expression([("sub", 1), ("sub", 2)]) == "x-1-2"
    ops = [("add", 1), ("mul", 2), ("sub", 3), ("mul", 4)]
    assert code.expression(ops) == "((x+1)*2-3)*4"
    for x in range(-5, 6):
        assert eval(code.expression(ops), {"x": x}) == code.apply(ops, x)


def test_code_loop_solution():
    spec = {"kind": "loop", "times": 3, "ops": [("add", 2), ("mul", 3)], "then_ops": [("sub", 1)]}
    assert code.solution(spec) == (
        "def f(x):\n    for _ in range(3):\n        x=(x+2)*3\n    return x-1"
    )
    assert code.prompt(spec, 1) == "Q: f(x): 3 times add 2, mul 3; then sub 1. f(1)=104\nA: "


# --- generator properties ------------------------------------------------------------------


@pytest.fixture(scope="module")
def data() -> dict[str, dict[int, dict[str, list[dict]]]]:
    return {
        name: {level: gen(level, 400, 100, seed=5) for level in LEVELS}
        for name, gen in GENERATORS.items()
    }


@pytest.mark.parametrize("name", GENERATORS)
def test_rows_fit_the_schema_with_unique_ids(data, name):
    rows = [r for level in LEVELS for split in ("train", "eval") for r in data[name][level][split]]
    assert problems_table(rows).num_rows == len(rows)
    assert len({r["id"] for r in rows}) == len(rows)
    assert data[name][3]["train"][42]["id"] == f"{name}-train-L3-00042"
    assert all(r["domain"] == r["source"] == name for r in rows)
    start = "A) " if name == "mcq" else "Q: "  # mcq lists its options first
    assert all(r["prompt"].startswith(start) and r["prompt"].endswith("\nA: ") for r in rows)


@pytest.mark.parametrize("name", GENERATORS)
def test_ladder_more_steps_and_longer_solutions_with_level(data, name):
    mean_len = [np.mean([len(r["solution"]) for r in data[name][lv]["train"]]) for lv in LEVELS]
    assert all(a < b for a, b in zip(mean_len, mean_len[1:], strict=False))
    for level in LEVELS:
        for row in data[name][level]["train"]:
            assert len(row["solution"]) < 72  # profile/train max_new_tokens
            meta = json.loads(row["meta"])
            if name == "mcq":  # one line per digit, the placing step, the letter
                assert row["solution"].count("\n") == level + 1
            else:  # operations to translate: 1, 2, 3, then 3 + a condition, 3 + a loop
                n_ops = sum(len(meta.get(k, [])) for k in ("ops", "else_ops", "then_ops"))
                assert n_ops == min(level, 3)
                assert meta["kind"] == {4: "cond", 5: "loop"}.get(level, "chain")


@pytest.mark.parametrize("name", GENERATORS)
def test_deterministic_in_level_and_seed(name):
    gen = GENERATORS[name]
    one = gen(3, 200, 50, seed=7)
    assert one == gen(3, 200, 50, seed=7)
    assert one != gen(3, 200, 50, seed=8)
    # eval rows do not depend on the train size
    assert one["eval"] == gen(3, 20, 50, seed=7)["eval"]


def problem_key(name: str, row: dict) -> str:
    """What makes two rows the same problem: the operands, or the spec (decoration aside)."""
    meta = json.loads(row["meta"])
    if name == "mcq":
        return f"{meta['a']}+{meta['b']}"
    return json.dumps({k: v for k, v in meta.items() if k not in ("example", "test_inputs")})


@pytest.mark.parametrize("name", GENERATORS)
@pytest.mark.parametrize("level", [2, 3, 4, 5])
def test_splits_disjoint_where_the_space_allows(data, name, level):
    out = data[name][level]
    train = {problem_key(name, r) for r in out["train"]}
    evals = {problem_key(name, r) for r in out["eval"]}
    assert len(evals) == 100 and not train & evals


def test_mcq_letters_balanced_and_options_consistent():
    letters = Counter()
    for level in LEVELS:
        for row in mcq.generate_level(level, 1000, 0, seed=1)["train"]:
            meta = json.loads(row["meta"])
            opts, step = meta["options"], 10 ** (level - 1)
            assert meta["sum"] == meta["a"] + meta["b"]
            assert min(opts) >= 0 and np.all(np.diff(opts) == step)
            assert opts["ABCD".index(row["answer"])] == meta["sum"]
            lines = row["solution"].split("\n")
            # the last digit line's result is the sum's top part, the next line places it
            assert int(lines[-3].split("=")[1]) == meta["sum"] // step
            top, top_a = meta["sum"] // step, opts[0] // step
            assert lines[-2:] == [f"{top}-{top_a}={top - top_a}", f"Answer: {row['answer']}"]
            letters[row["answer"]] += 1
    assert set(letters) == set("ABCD")
    assert all(abs(n / 5000 - 0.25) < 0.025 for n in letters.values())


def mutants(spec: dict) -> list[dict]:
    """Specs with one thing changed: an operation's constant or kind, or the comparison."""
    out = []
    for key in ("ops", "else_ops", "then_ops"):
        for i, (word, k) in enumerate(spec.get(key, [])):
            for changed in ((word, k + 1), ({"add": "sub", "sub": "add", "mul": "add"}[word], k)):
                ops = [tuple(op) for op in spec[key]]
                ops[i] = changed
                out.append({**spec, key: ops})
    if spec["kind"] == "cond":
        cmp, t = spec["cond"]
        out += [{**spec, "cond": [cmp + "=", t]}, {**spec, "cond": [cmp, t + 1]}]
    if spec["kind"] == "loop":
        out.append({**spec, "times": spec["times"] + 1})
    return out


def behaviour(program: str) -> list[int]:
    namespace: dict = {}
    exec(program, namespace)
    return [namespace["f"](x) for x in range(-20, 40)]


@pytest.mark.parametrize("level", LEVELS)
def test_code_reference_passes_its_tests_and_one_change_fails_one(data, level):
    for row in data["code"][level]["train"][:150] + data["code"][level]["eval"]:
        gold = json.loads(row["answer"])
        assert gold["entry_point"] == "f" and gold["setup"] == ""
        assert 4 <= len(gold["tests"]) <= 6
        assert all(run_tests(row["solution"], row["answer"]))
        meta = json.loads(row["meta"])
        assert meta["example"] not in meta["test_inputs"]  # tests are hidden
        x, y = meta["example"], code.evaluate(meta, meta["example"])
        assert row["prompt"].endswith(f". f({x})={y}\nA: ")
        reference = behaviour(row["solution"])
        for spec in mutants(meta):
            program = code.solution(spec)
            if behaviour(program) != reference:  # a different function, so a wrong one
                assert not all(run_tests(program, row["answer"])), (row["id"], program)


@pytest.mark.parametrize("name", GENERATORS)
def test_tokenizer_of_the_train_split_covers_eval(data, name):
    train = [r for level in LEVELS for r in data[name][level]["train"]]
    evals = [r for level in LEVELS for r in data[name][level]["eval"]]
    tokenizer = build_char_tokenizer([r["prompt"] for r in train] + [r["solution"] for r in train])
    for row in evals:
        for text in (row["prompt"], row["solution"]):
            ids = tokenizer(text, add_special_tokens=False)["input_ids"]
            assert tokenizer.unk_token_id not in ids and len(ids) == len(text)


def test_arith_unchanged_by_the_shared_split_helper():
    # sha256 of arith's rows as they were before `common.split_indices` was factored out
    rows = json.dumps(arith.generate_level(3, 50, 20, 0), sort_keys=True)
    assert (
        hashlib.sha256(rows.encode()).hexdigest()
        == "3145cd45a94daaf9d15b425645f17635eab04f8f00941444676d842a46fd53bb"
    )
