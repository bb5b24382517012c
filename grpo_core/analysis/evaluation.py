"""Evaluation as papers report it: sampling a model on held-out problems (`sample_model`),
then avg@k accuracy, unbiased pass@k, maj@k and greedy accuracy; per benchmark, per domain and
per difficulty level."""

from __future__ import annotations

from collections import Counter, defaultdict

import numpy as np
import torch

from grpo_core.analysis.difficulty import is_correct
from grpo_core.analysis.sampling import sample_problems
from grpo_core.config.eval import EvaluateStage
from grpo_core.config.user_reward import resolve
from grpo_core.data.prompts import render_prompts
from grpo_core.models.loading import load_model, uses_chat
from grpo_core.models.precision import set_dtype


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples with c correct (Chen et al., 2021, eq. 1):

    1 - C(n - c, k) / C(n, k), computed as a stable product.
    """
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n (n={n}, c={c}, k={k})")
    if n - c < k:
        return 1.0
    return 1.0 - float(np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


def majority_correct(votes: list[str | None], correct: list[bool]) -> float:
    """maj@k of one question from its k samples' final answers (`votes`, None = no answer).

    Correct samples all equal the gold answer, so they form one cluster whatever their
    surface form ("1/2", "0.5"); wrong answers cluster by their text. The question scores 1
    when the gold cluster is strictly the largest, 1/m when it ties with m - 1 others (the
    expected score of a uniform tie-break), and 0 otherwise or when no sample answered.
    """
    if len(votes) != len(correct):
        raise ValueError(f"{len(votes)} votes for {len(correct)} samples")
    gold = sum(correct)
    wrong = Counter(v for v, ok in zip(votes, correct, strict=True) if not ok and v is not None)
    top = max([gold, *wrong.values()])
    if gold == 0 or gold < top:
        return 0.0
    return 1.0 / (1 + sum(n == top for n in wrong.values()))


def _metrics(questions: list[dict], pass_at: list[int], maj: bool) -> dict[str, float]:
    samples = [ok for q in questions for ok in q["correct"]]
    out = {"accuracy": float(np.mean(samples))}
    for k in pass_at:
        out[f"pass@{k}"] = float(
            np.mean([pass_at_k(len(q["correct"]), sum(q["correct"]), k) for q in questions])
        )
    if maj:
        k = len(questions[0]["correct"])
        out[f"maj@{k}"] = float(
            np.mean([majority_correct(q["votes"], q["correct"]) for q in questions])
        )
    greedy = [q["greedy"] for q in questions if q["greedy"] is not None]
    if greedy:
        out["greedy"] = float(np.mean(greedy))
    return out


def summarize(
    samples: list[dict], pass_at: list[int], greedy: list[dict] | None = None
) -> dict[str, dict]:
    """Metrics of one model from its sampled rows (`source`, `domain`, `level`, `id`,
    `reward`, `answer`: the final answer, None if none) and optional greedy rows (`source`,
    `id`, `reward`).

    Per benchmark (source): `accuracy` (avg@k: the fraction of samples that solve their
    question), `pass@k` for each k in `pass_at`, `maj@k` (k = samples per question; not for
    code, whose answers are programs), `greedy`, and `levelN` accuracy for graded levels
    (level 0 means ungraded). Under `by_domain`, the same over all benchmarks of a domain.
    """
    questions: dict[tuple[str, str], dict] = {}
    for r in samples:
        q = questions.setdefault(
            (r["source"], r["id"]),
            {
                "source": r["source"],
                "domain": r["domain"],
                "level": int(r["level"]),
                "correct": [],
                "votes": [],
                "greedy": None,
            },
        )
        q["correct"].append(bool(is_correct(r["reward"])))
        q["votes"].append(r.get("answer"))
    for r in greedy or []:
        questions[(r["source"], r["id"])]["greedy"] = float(is_correct(r["reward"]))

    by_source: dict[str, list[dict]] = defaultdict(list)
    by_domain: dict[str, list[dict]] = defaultdict(list)
    for q in questions.values():
        by_source[q["source"]].append(q)
        by_domain[q["domain"]].append(q)
    out: dict[str, dict] = {}
    for source in sorted(by_source):
        qs = by_source[source]
        metrics = _metrics(qs, pass_at, maj=qs[0]["domain"] != "code")
        for level in sorted({q["level"] for q in qs} - {0}):
            lv = [ok for q in qs if q["level"] == level for ok in q["correct"]]
            metrics[f"level{level}"] = float(np.mean(lv))
        out[source] = metrics
    out["by_domain"] = {
        d: _metrics(qs, pass_at, maj=d != "code") for d, qs in sorted(by_domain.items())
    }
    return out


def sample_model(
    path: str, problems: list[dict], params: EvaluateStage, name: str
) -> tuple[list[dict], list[dict]]:
    """Sampled rows (`eval.samples` per question) and greedy rows (one per question, if
    `eval.greedy`) of one model, each with its problem's id, source, domain and level."""
    cfg, code = params.eval, params.reward.code
    model, tokenizer = load_model(path)
    model = set_dtype(model, cfg.dtype)
    problems = render_prompts(problems, tokenizer, uses_chat(path))
    torch.manual_seed(params.eval_seed)
    runs = {"sampled": False, "greedy": True} if cfg.greedy else {"sampled": False}
    out: dict[str, list[dict]] = {}
    for run, greedy in runs.items():
        rows = sample_problems(
            model,
            tokenizer,
            problems,
            cfg,
            f"eval {name} {run}",
            code=code,
            greedy=greedy,
            function=resolve(params.reward.function),
        )
        out[run] = [
            {
                "model": name,
                "decoding": run,
                **{k: problems[r["index"]][k] for k in ("id", "source", "domain", "level")},
                **{k: v for k, v in r.items() if k != "index"},
            }
            for r in rows
        ]
    return out["sampled"], out.get("greedy", [])


def _metric_order(name: str) -> tuple[int, int]:
    """levels first (1..5), then avg@k accuracy, pass@k (by k), maj@k, greedy."""
    if name.startswith("level"):
        return (0, int(name[len("level") :]))
    if name.startswith("pass@"):
        return (2, int(name[len("pass@") :]))
    return {"accuracy": (1, 0), "greedy": (4, 0)}.get(name, (3, 0))


def _label(name: str, graded: bool) -> str:
    if name == "accuracy":
        return "all levels" if graded else "accuracy"
    return name.replace("level", "level ")


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}"


def _same_but_levels(a: list[dict], b: list[dict]) -> bool:
    def strip(m: dict) -> dict:
        return {k: v for k, v in m.items() if not k.startswith("level")}

    return [strip(m) for m in a] == [strip(m) for m in b]


def format_table(metrics: dict[str, dict]) -> str:
    """metrics/eval.json as a small table to read in a terminal: per benchmark (and per domain
    where that is not the same rows again), each model's accuracy (avg@k) per level and over
    all levels, pass@k, maj@k and greedy accuracy, in percent with one decimal, and the
    change of the last model over the first (policy over base), in points."""
    models = list(metrics)
    first, last = models[0], models[-1]
    sources = [s for s in metrics[first] if s != "by_domain"]
    blocks = [(s, [metrics[m][s] for m in models]) for s in sources]
    for domain in metrics[first].get("by_domain", {}):
        per_model = [metrics[m]["by_domain"][domain] for m in models]
        # A domain of one benchmark would repeat its rows (but the levels).
        if not any(_same_but_levels(per_model, [metrics[m][s] for m in models]) for s in sources):
            blocks.append((f"domain {domain}", per_model))
    header = ["accuracy (%)", *models, f"{last} - {first}"]
    table: list[list[str]] = [header]
    for title, per_model in blocks:
        table.append([title])
        names = sorted(per_model[0], key=_metric_order)
        graded = any(n.startswith("level") for n in names)
        for name in names:
            values = [m.get(name) for m in per_model]
            change = None if None in (values[0], values[-1]) else values[-1] - values[0]
            table.append(
                [
                    f"  {_label(name, graded)}",
                    *(_percent(v) for v in values),
                    "-" if change is None else f"{100 * change:+.1f}",
                ]
            )
    widths = [max(len(row[i]) for row in table if len(row) > i) for i in range(len(header))]
    lines = []
    for row in table:
        if len(row) == 1:  # a block's title
            lines.append(row[0])
            continue
        cells = [c.rjust(w) for c, w in zip(row[1:], widths[1:], strict=True)]
        lines.append("  ".join([row[0].ljust(widths[0]), *cells]))
    return "\n".join(lines)
