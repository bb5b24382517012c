"""Every source's reference solution earns full reward from its verifier, and the gold answer
itself verifies: the adapters, the tiny-world generators and the rewards agree on one format.

Code solutions run in the real sandbox. A problem whose own solution scored 0 would be one
no policy could ever be rewarded for."""

import pytest
from test_adapters import EXTRA, FILES, FIXTURES

from grpo_core.data.adapters.registry import ADAPTERS, load_benchmark
from grpo_core.data.tiny import arith, code, mcq
from grpo_core.rewards.code import CodeRewardConfig
from grpo_core.rewards.verify import check_gold, verify_batch

CODE = CodeRewardConfig(workers=2, timeout_s=10.0)


def _as_completion(problem: dict) -> str:
    # The math and MCQ solutions end in the answer form their prompts ask for; a program
    # is given as an instruct model would write it, in a fenced block.
    if problem["domain"] == "code":
        return f"```python\n{problem['solution']}\n```"
    return problem["solution"]


def _assert_solutions_verify(problems: list[dict]) -> None:
    for p in problems:
        check_gold(p)
    rewards = verify_batch(
        [p["domain"] for p in problems],
        [_as_completion(p) for p in problems],
        [p["answer"] for p in problems],
        CODE,
    )
    failed = [p["id"] for p, r in zip(problems, rewards, strict=True) if r != 1.0]
    assert not failed, f"reference solutions not rewarded: {failed}"


ANSWER_ONLY = {"aime25", "amc23", "minerva_math", "arc_challenge", "mmlu_stem"}


@pytest.mark.parametrize("name, file", [*FILES.items(), *EXTRA])
def test_benchmark_reference_solutions_earn_full_reward(name, file):
    problems = load_benchmark(name, FIXTURES / file)
    with_solution = [p for p in problems if p["solution"]]
    assert bool(with_solution) == (name not in ANSWER_ONLY)
    if ADAPTERS[name].domain == "math":
        # A solution's last \boxed{} is the gold answer (GSM8K's "#### N" was rewritten so).
        with_solution = [p for p in with_solution if "\\boxed" in p["solution"]]
    _assert_solutions_verify(with_solution)
    # The gold answer itself, written as the prompt asks, is rewarded too.
    form = {"math": "The answer is \\boxed{{{}}}.", "mcq": "Answer: {}"}.get(ADAPTERS[name].domain)
    if form:
        _assert_solutions_verify([{**p, "solution": form.format(p["answer"])} for p in problems])


@pytest.mark.parametrize("generator", [arith, mcq, code])
def test_tiny_world_reference_solutions_earn_full_reward(generator):
    for level in (1, 3, 5):
        rows = generator.generate_level(level, 4, 2, seed=0)
        _assert_solutions_verify(rows["train"] + rows["eval"])
