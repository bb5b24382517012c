"""`reward.function`: a user's own reward from a file under user_rewards/, without editing the
package. It loads, replaces the verifiers wherever completions are scored (training and
sampling for profile/guide/evaluate), and every way of naming it wrongly fails at validation
with the key named and what was expected; a value outside [0, 1] fails at its row."""

import math
import shutil
from pathlib import Path

import pytest
import torch

from grpo_core.analysis.sampling import sample_problems
from grpo_core.config.params import parse_params
from grpo_core.config.reward import RewardParams
from grpo_core.config.sampling import SamplingParams
from grpo_core.config.user_reward import call_reward_function, load_reward_function
from grpo_core.errors import InputError
from grpo_core.rewards.verify import verify_batch
from grpo_core.training.batch import Question
from grpo_core.training.sampling import GroupSampler
from stages.validate import validate
from tests.test_trainer import _cfg

ROOT = Path(__file__).resolve().parents[1]
LOW = '''
def score(domain, completion, answer):
    """1 when the completion's first character sorts below "5", whatever the question."""
    return float(completion[:1] < "5")


def helper(x):
    return x
'''


@pytest.fixture
def repo(tmp_path, monkeypatch):
    """A working directory with user_rewards/low.py, as the stages run in the repo root."""
    (tmp_path / "user_rewards").mkdir()
    (tmp_path / "user_rewards/low.py").write_text(LOW)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _error(repo, spec: str, text: str | None = None) -> str:
    if text is not None:
        (repo / "user_rewards/bad.py").write_text(text)
    with pytest.raises(ValueError) as info:
        load_reward_function(spec, repo)
    return str(info.value)


def test_a_function_under_user_rewards_loads_and_scores(repo):
    fn = load_reward_function("user_rewards/low.py:score")
    assert fn("math", "1 apple", "3") == 1.0 and fn("math", "6", "6") == 0.0
    assert verify_batch(["math", "mcq", "code"], ["1", "8", "+x"], ["1", "A", "[]"], None, fn) == [
        1.0,
        0.0,
        1.0,
    ]


def test_every_wrong_name_says_what_is_wrong_and_what_is_expected(repo):
    assert "is not FILE:FUNCTION" in _error(repo, "user_rewards/low.py")
    assert "not under user_rewards/" in _error(repo, "rewards/low.py:score")
    assert "not under user_rewards/" in _error(repo, "user_rewards/../low.py:score")
    assert "not a Python file" in _error(repo, "user_rewards/low.txt:score")
    assert "no such file" in _error(repo, "user_rewards/missing.py:score")
    msg = _error(repo, "user_rewards/low.py:scor")
    assert "has no function 'scor'" in msg and "['helper', 'score']" in msg
    msg = _error(
        repo, "user_rewards/bad.py:score", "def score(completion, answer):\n    return 1.0\n"
    )
    assert "score(completion, answer)" in msg and "(domain: str, completion: str" in msg
    msg = _error(repo, "user_rewards/bad.py:score", "import no_such_module\n")
    assert "fails to import: ModuleNotFoundError" in msg


def test_a_value_outside_0_1_or_not_a_number_names_the_function_and_the_row(repo):
    def fn(domain, completion, answer):
        return {"a": 1.0, "b": True, "c": 1.5, "d": "1", "e": math.nan}[completion]

    assert call_reward_function(fn, ["math"] * 2, ["a", "b"], ["1", "1"]) == [1.0, 1.0]
    with pytest.raises(InputError, match=r"fn returned 1.5 for row 1 .*outside \[0, 1\]"):
        call_reward_function(fn, ["math"] * 2, ["a", "c"], ["1", "1"])
    for bad in ("d", "e"):
        with pytest.raises(InputError, match="for row 0 .*expected a float in"):
            call_reward_function(fn, ["math"], [bad], ["1"])


def test_a_bad_reward_function_stops_validate_with_the_key_named(repo):
    """The validate stage, the pipeline's first: nothing else runs, and its output is not
    written."""
    raw = (ROOT / "params.yaml").read_text()
    assert "  function: null" in raw
    (repo / "params.yaml").write_text(
        raw.replace("  function: null", "  function: user_rewards/low.py:scroe")
    )
    with pytest.raises(InputError, match=r"reward\.function.*has no function 'scroe'"):
        validate(str(repo / "params.yaml"), str(repo / "ok"))
    assert not (repo / "ok").exists()
    (repo / "params.yaml").write_text(
        raw.replace("  function: null", "  function: user_rewards/low.py:score")
    )
    validate(str(repo / "params.yaml"), str(repo / "ok"))
    assert parse_params({"reward": {"function": "user_rewards/low.py:score"}})


def test_training_rewards_come_from_the_function(repo, tiny_model, tokenizer):
    """The training reward of each completion is the function's (weights: correct 1)."""
    questions = [Question(f"q{i}", "math", 1, f"Q: {i}+1=?\nA: ", str(i + 1)) for i in range(4)]
    reward = RewardParams(function="user_rewards/low.py:score")
    sampler = GroupSampler(tiny_model, tokenizer, _cfg(max_new_tokens=2), reward)
    torch.manual_seed(0)
    sampled = sampler.sample(questions, n=8)
    want = [float(t[:1] < "5") for t in sampled.ro.texts]
    assert sampled.components["correct"].tolist() == want
    assert 0 < sum(want) < len(want)  # both kinds of completion occur: the test can tell


def test_sampled_rows_for_profile_guide_and_evaluate_are_scored_by_it(repo, tiny_model, tokenizer):
    problems = [{"domain": "math", "prompt": f"Q: {i}+2=?\nA: ", "answer": "9"} for i in range(4)]
    fn = load_reward_function("user_rewards/low.py:score")
    torch.manual_seed(0)
    rows = sample_problems(
        tiny_model, tokenizer, problems, SamplingParams(samples=4, max_new_tokens=2), "t",
        function=fn,
    )  # fmt: skip
    want = [float(r["completion"][:1] < "5") for r in rows]
    assert [r["reward"] for r in rows] == want and 0 < sum(want) < len(want)


def test_the_example_pays_less_for_a_solved_answer_the_longer_it_runs(repo):
    shutil.copy(ROOT / "user_rewards/brevity.py", repo / "user_rewards/brevity.py")
    score = load_reward_function("user_rewards/brevity.py:score")
    solved = "\\boxed{85}"
    assert score("math", solved, "85") == 1.0
    assert score("math", "x" * 790 + solved, "85") == pytest.approx(0.75)  # 800 chars: 400 over
    assert score("math", "x" * 5000 + solved, "85") == pytest.approx(0.5)
    assert score("math", "\\boxed{84}", "85") == 0.0


def test_a_function_that_calls_the_verifiers_keeps_reward_code():
    # reward.code.binary and the sandbox limits apply where the user's function calls the
    # built-in verifiers without a config of its own.
    from grpo_core.rewards.code import CodeRewardConfig

    answer = '{"entry_point": "f", "tests": ["assert f(2) == 4", "assert f(3) == 9"]}'
    program = "def f(x):\n    return 4\n"  # passes one of two, no trivial program does

    def mine(domain, completion, gold):
        return verify_batch([domain], [completion], [gold])[0]

    def score(code):
        return verify_batch(["code"], [program], [answer], code, function=mine)

    assert score(CodeRewardConfig(workers=1)) == [0.5]
    assert score(CodeRewardConfig(workers=1, binary=True)) == [0.0]
    slow = "import time\ntime.sleep(1.5)\n" + program
    assert verify_batch(["code"], [slow], [answer], function=mine) == [0.5]  # 5 s by default
    short = CodeRewardConfig(workers=1, timeout_s=0.5)
    assert verify_batch(["code"], [slow], [answer], short, function=mine) == [0.0]
