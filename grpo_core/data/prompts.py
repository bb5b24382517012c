"""Prompt templates: one plain-text template per domain, and chat rendering for instruct models.

The templates write the text a base model continues; `render_prompt` wraps that same text as
one user message for an instruct model. The instructions fix what the rewards read:

- math: the problem, then "Please reason step by step, and put your final answer within
  \\boxed{}." (the math reward reads the last `\\boxed{}`);
- mcq: the question, the options as lines "A) text", then an instruction to end with the line
  "Answer: X";
- code: the task, an example test when the benchmark gives one, then "Write a Python function
  `f` ... in a ```python code block"; HumanEval-style tasks instead give the function's
  signature and docstring for the model to continue (`continuation_prompt`).

`guided_prompt` renders Off-Context GRPO's guided prompt x~ (the paper's wording, reference code
AgPriyank/OC-GRPO) from any of these three: "Problem: " and the prompt's body, a block
"Partial reference solution: <prefix>" (or "Reference solution: <solution>" for the whole one),
then the instruction to complete the solution (or to verify it), followed by the domain's own
answer-format instruction, kept word for word and last as in the reference. It is plain text,
so `render_prompt` wraps it as one user message like any other prompt. The tiny world's
prompts ("Q: 47+38=?\\nA: ") get a hint line instead: "Q: 47+38=?\\nH: 7+8=15\\nA: ".
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from grpo_core.errors import InputError

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

MATH_INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."
MCQ_INSTRUCTION = "Answer with the letter of the correct option on the last line as 'Answer: X'."
CODE_INSTRUCTION = (
    "Write a Python function `{entry_point}` that solves the task, in a ```python code block."
)
OPTION_LETTERS = "ABCDEFGHIJ"
_NEWLINES = re.compile(r"\s*\n\s*")


def math_prompt(problem: str) -> str:
    return f"{problem.strip()}\n\n{MATH_INSTRUCTION}"


def mcq_prompt(question: str, options: Sequence[str]) -> str:
    """The question, one line per option ("A) text"), then the answer-format instruction."""
    if not 2 <= len(options) <= len(OPTION_LETTERS):
        raise InputError(
            f"a multiple-choice question needs 2 to {len(OPTION_LETTERS)} options, "
            f"got {len(options)}"
        )
    # An option is one line: the "A) ..." layout would break on an embedded newline.
    flat = [_NEWLINES.sub(" ", option.strip()) for option in options]
    lines = [
        f"{letter}) {text}".rstrip() for letter, text in zip(OPTION_LETTERS, flat, strict=False)
    ]
    return f"{question.strip()}\n\n" + "\n".join(lines) + f"\n\n{MCQ_INSTRUCTION}"


def code_prompt(task: str, entry_point: str, example_tests: Sequence[str] = ()) -> str:
    """The task, the example tests (if any), then the function and code-block instruction."""
    parts = [task.strip()]
    if example_tests:
        plural = "these tests" if len(example_tests) > 1 else "this test"
        header = f"Your code should pass {plural}:"
        parts.append(header + "\n\n" + "\n".join(t.strip() for t in example_tests))
    parts.append(CODE_INSTRUCTION.format(entry_point=entry_point))
    return "\n\n".join(parts)


def continuation_prompt(prefix: str) -> str:
    """HumanEval style: the signature and docstring themselves, for the model to continue."""
    return prefix


# Off-Context GRPO's guided prompt x~: the reference's labels and instructions, less their
# "output the final answer within \\boxed{}" clause, which the domain's instruction replaces.
GUIDE_PARTIAL_LABEL = "Partial reference solution:"
GUIDE_PARTIAL_INSTRUCTION = (
    "Here is a partial reference solution to the problem above. "
    "Complete the rest of the solution step by step."
)
GUIDE_FULL_LABEL = "Reference solution:"
GUIDE_FULL_INSTRUCTION = (
    "Here is the full reference solution. Verify it and show your work step by step."
)
GUIDE_PROBLEM_LABEL = "Problem:"

# The tiny world's prompts end with the answer cue "\nA: " after a "Q: " line
# (grpo_core/data/tiny/); their guided prompt puts the hint on its own "H: " line before the cue.
TINY_ANSWER_CUE = "A: "
TINY_QUESTION_LABEL = "Q: "
TINY_HINT_LABEL = "H: "


def _tiny_question(prompt_text: str) -> str | None:
    """A tiny-world prompt less its answer cue (ending with the "Q: " line's newline), or
    None when `prompt_text` is not one: its last line must be the cue "A: " and the line before
    it a question "Q: <something>"."""
    head, cue = prompt_text[: -len(TINY_ANSWER_CUE)], prompt_text[-len(TINY_ANSWER_CUE) :]
    if cue != TINY_ANSWER_CUE or not head.endswith("\n"):
        return None
    question = head[:-1].rpartition("\n")[2]
    if (
        not question.startswith(TINY_QUESTION_LABEL)
        or not question[len(TINY_QUESTION_LABEL) :].strip()
    ):
        return None
    return head


def is_tiny_prompt(prompt_text: str) -> bool:
    """Whether `prompt_text` is in the tiny world's "Q: ...\\nA: " template."""
    return _tiny_question(prompt_text) is not None


def guide_wording(prompts: Iterable[str]) -> list[str]:
    """The text `guided_prompt` adds to `prompts` besides their hints: the tiny hint label, and
    the paper's labels and instructions if any prompt is not a tiny one. A character tokenizer
    built from a corpus needs it to spell the guided prompts of that corpus."""
    wording = [TINY_HINT_LABEL]
    if not all(is_tiny_prompt(p) for p in prompts):
        wording += [
            GUIDE_PROBLEM_LABEL,
            GUIDE_PARTIAL_LABEL,
            GUIDE_PARTIAL_INSTRUCTION,
            GUIDE_FULL_LABEL,
            GUIDE_FULL_INSTRUCTION,
        ]
    return wording


def _is_answer_instruction(paragraph: str) -> bool:
    """Whether `paragraph` is one of the templates' answer-format instructions."""
    if paragraph in (MATH_INSTRUCTION, MCQ_INSTRUCTION):
        return True
    head, _, tail = CODE_INSTRUCTION.partition("{entry_point}")
    name = paragraph.removeprefix(head).removesuffix(tail)
    return (
        paragraph.startswith(head)
        and paragraph.endswith(tail)
        and len(paragraph) > len(head) + len(tail)
        and not any(c.isspace() or c == "`" for c in name)
    )


def guided_prompt(prompt_text: str, partial: str, complete: bool) -> str:
    """Off-Context GRPO's guided prompt x~ for a `math_prompt`, `mcq_prompt`, `code_prompt` or
    a tiny-world prompt.

    For the first three, the prompt's last paragraph, its answer-format instruction, moves to
    the end:

        Problem: <the prompt without its instruction>

        Partial reference solution: <partial>

        Here is a partial reference solution ... step by step. <answer-format instruction>

    `complete=True` (guidance fraction 1, `partial` is the whole solution) labels the block
    "Reference solution:" and asks the model to verify it instead.

    A tiny-world prompt ("Q: <question>\\nA: ", the mcq options on lines before the question)
    gets the hint on a line of its own before the answer cue "A: ":

        Q: 47+38=?
        H: 7+8=15
        A:

    ("Q: 47+38=?\\nH: 7+8=15\\nA: "), with the same label `TINY_HINT_LABEL` for a partial and
    a complete solution: a character-level model reads no instructions, so the paper's wording
    (and its "verify it" at fraction 1) would only be characters it never trained on; "H: "
    marks the hint, and the answer cue stays last so the model writes its response where it
    always does.

    `partial` is the hint as `offcontext.char_prefix` cuts it; it must not be empty.
    """
    if not partial.strip():
        raise InputError("a guided prompt needs a non-empty partial solution")
    tiny = _tiny_question(prompt_text)
    if tiny is not None:
        return f"{tiny}{TINY_HINT_LABEL}{partial}\n{TINY_ANSWER_CUE}"
    body, sep, instruction = prompt_text.rpartition("\n\n")
    if not sep or not body.strip() or not _is_answer_instruction(instruction):
        raise InputError(
            "a guided prompt needs a math, mcq or code prompt ending with its answer-format "
            "instruction, or a tiny-world prompt (a 'Q: ' line, then 'A: '); got one ending "
            f"{prompt_text[-60:]!r}"
        )
    label, guide = (
        (GUIDE_FULL_LABEL, GUIDE_FULL_INSTRUCTION)
        if complete
        else (GUIDE_PARTIAL_LABEL, GUIDE_PARTIAL_INSTRUCTION)
    )
    return f"{GUIDE_PROBLEM_LABEL} {body}\n\n{label} {partial}\n\n{guide} {instruction}"


# The reference drops Asymptote diagram source before cutting ([asy] ... [/asy] in MATH
# solutions), and only a space, newline or tab counts as a word boundary.
_ASYMPTOTE = re.compile(r"\[asy\].*?\[/asy\]", re.DOTALL)
_WORD_BOUNDARY = " \n\t"


def char_prefix(solution: str, fraction: float) -> str:
    """The paper's hint: the first `fraction` of the solution's characters, cut back to a word
    boundary, with the trailing whitespace stripped.

    The solution is first stripped (and any `[asy]...[/asy]` diagram removed); the target length
    is floor(fraction * len), at least 1. The cut moves back from the target to the nearest
    space, newline or tab, so a word ending exactly at the target is kept; when no boundary
    precedes the target (the first word is longer) the cut stays at the target, mid-word.
    Fraction 1 is the whole stripped solution.
    """
    if not 0 < fraction <= 1:
        raise ValueError(f"guidance fraction must be in (0, 1], got {fraction}")
    text = _ASYMPTOTE.sub("", solution).strip()
    target = max(1, int(fraction * len(text)))
    if fraction == 1 or target >= len(text):
        return text
    cut = target
    while cut > 0 and text[cut] not in _WORD_BOUNDARY:
        cut -= 1
    if cut == 0:
        cut = target
    return text[:cut].rstrip()


def hinted_prompt(prompt_text: str, solution: str, fraction: float) -> str:
    """The guided prompt x~ as plain text (before any chat template): `prompt_text` with the
    hint `char_prefix(solution, fraction)` (`guided_prompt`; fraction 1 gives the whole
    solution, to verify; a tiny-world prompt labels either "H: ")."""
    return guided_prompt(prompt_text, char_prefix(solution, fraction), complete=fraction >= 1)


_OPTION = re.compile(r"([A-J])\) (.*?)(?= [A-J]\) |$)")


def chat_text(prompt_text: str, domain: str | None) -> str:
    """A tiny-world prompt as an instruct model is asked it: the question without the "Q: " and
    "A: " cues, in its domain's template, answer-format instruction last (`math_prompt`,
    `mcq_prompt` with the options one per line, `code_prompt`); any other prompt, or no domain,
    unchanged. A character model answers after the cue as it was trained to; a chat model has to
    be told how, or it seldom boxes its answer (SmolLM2-135M-Instruct, docs/scale.md).

        "Q: 47+38=?\nA: "  ->  "47+38=?\n\nPlease reason step by step, and put your final
                                answer within \\boxed{}."
    """
    head = _tiny_question(prompt_text)
    if head is None or domain is None:
        return prompt_text
    *before, last = head.rstrip("\n").split("\n")
    question = last[len(TINY_QUESTION_LABEL) :].strip()
    if domain == "math":
        return math_prompt(question)
    if domain == "mcq":
        options = _OPTION.findall(" ".join(before).strip())
        if len(options) < 2 or "".join(k for k, _ in options) != OPTION_LETTERS[: len(options)]:
            raise InputError(f"a tiny mcq prompt needs its options line 'A) .. B) ..': {head!r}")
        return mcq_prompt(question, [text for _, text in options])
    if domain == "code":
        return code_prompt(question, question.split("(", 1)[0].strip())
    return prompt_text


def render_hinted(
    tokenizer: PreTrainedTokenizerBase,
    prompt_text: str,
    solution: str,
    fraction: float,
    chat: bool,
    domain: str | None = None,
) -> str:
    """The guided prompt x~ as the model is given it: `hinted_prompt`, through the chat template
    for an instruct model (`render_prompt`; a tiny-world prompt first as `chat_text` words it,
    so that the hint comes with the paper's wording and the domain's instruction)."""
    if chat:
        prompt_text = chat_text(prompt_text, domain)
    return render_prompt(tokenizer, hinted_prompt(prompt_text, solution, fraction), chat)


def render_prompt(
    tokenizer: PreTrainedTokenizerBase, text: str, chat: bool, domain: str | None = None
) -> str:
    """What the model is given: `text` itself for a base model, or for an instruct model
    (`chat=True`) `text` as one user message in the tokenizer's chat template, ending with the
    assistant turn's opening; with its `domain`, a tiny-world prompt is first worded with its
    answer-format instruction (`chat_text`)."""
    if not chat:
        return text
    text = chat_text(text, domain)
    if not getattr(tokenizer, "chat_template", None):
        name = getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__
        raise InputError(
            f"model {name!r}: its tokenizer has no chat template, so chat=True cannot be "
            "rendered; use chat=False for a base model"
        )
    return tokenizer.apply_chat_template(
        [{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True
    )


def render_prompts(
    problems: list[dict], tokenizer: PreTrainedTokenizerBase, chat: bool
) -> list[dict]:
    """Problem rows whose `prompt` is what the model is given (`render_prompt`)."""
    if not chat:
        return problems
    rendered = [
        {**p, "prompt": render_prompt(tokenizer, p["prompt"], chat, p.get("domain"))}
        for p in problems
    ]
    log_rendered([p["prompt"] for p in rendered])
    return rendered


def log_rendered(prompts: Sequence[str]) -> None:
    """Show the first prompt as the model is given it (chat template applied), once per
    stage: the quickest check that an instruct model is prompted as it was trained."""
    if prompts:
        shown = json.dumps(prompts[0], ensure_ascii=False)  # one line, quoted and escaped
        log.info("chat template: the first prompt as the model is given it: %s", shown)
