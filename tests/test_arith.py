import json

import pytest

from grpo_core.data.tiny import arith


def test_solution_is_digit_by_digit_with_carries():
    assert arith.solution(47, 38) == "7+8=15\n4+3+1=8\n\\boxed{85}"
    assert arith.solution(57, 68) == "7+8=15\n5+6+1=12\n\\boxed{125}"
    assert arith.solution(3, 4) == "3+4=7\n\\boxed{7}"
    assert arith.prompt(47, 38) == "Q: 47+38=?\nA: "


@pytest.mark.parametrize("level", [1, 2, 3, 4, 5])
def test_levels_have_l_digit_operands_and_correct_answers(level):
    out = arith.generate_level(level, n_train=50, n_eval=20, seed=3)
    for row in out["train"] + out["eval"]:
        meta = json.loads(row["meta"])
        a, b = meta["a"], meta["b"]
        assert row["level"] == level
        if level > 1:
            assert len(str(a)) == len(str(b)) == level
        assert row["answer"] == str(a + b)
        assert row["solution"].endswith(f"\\boxed{{{a + b}}}")
        assert row["solution"].count("\n") == max(len(str(a)), len(str(b)))


def test_deterministic_by_seed_and_splits_disjoint():
    one = arith.generate_level(3, 200, 100, seed=7)
    two = arith.generate_level(3, 200, 100, seed=7)
    other = arith.generate_level(3, 200, 100, seed=8)
    assert one == two
    assert one != other
    train = {r["prompt"] for r in one["train"]}
    evals = {r["prompt"] for r in one["eval"]}
    assert len(evals) == 100 and not train & evals


def test_small_space_splits_disjoint_when_room_and_ids_unique():
    out = arith.generate_level(2, n_train=7000, n_eval=300, seed=0)  # 8100 problems in all
    assert not {r["prompt"] for r in out["train"]} & {r["prompt"] for r in out["eval"]}
    ids = [r["id"] for r in out["train"] + out["eval"]]
    assert len(ids) == len(set(ids))
