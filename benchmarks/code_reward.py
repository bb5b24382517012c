"""Throughput of the code reward: programs checked per second.

    python -m benchmarks.code_reward [--workers N] [--programs N] [--humaneval] [--out FILE]

Checks a mix of small correct and incorrect programs (no hostile ones; a quarter are correct,
the rest fail some or all of their 3-4 tests, one in eight with an exception) with
`code_rewards` at the default limits, after one warm-up run; with `--humaneval`, HumanEval's
164 canonical solutions and 164 empty completions instead (the package's problems, its real
tests). Prints a readable line; the last line printed is JSON, which `--out` also writes (the
results file: run it alone on the machine).
"""

from __future__ import annotations

import argparse
import json
import os
import time

from grpo_core.io import write_json
from grpo_core.rewards.code import CodeRewardConfig, code_rewards
from grpo_core.rewards.sandbox import network_isolation_available

FIB = "def fib(n):\n    a, b = {start}\n    for _ in range(n):\n        a, b = b, a + b\n" + (
    "    return a\n"
)
# (answer, [correct program, wrong programs...])
PROBLEMS = [
    (
        {"entry_point": "square", "tests": [f"assert square({x}) == {x * x}" for x in (0, 3, -4)]},
        [
            "def square(x):\n    return x * x\n",
            "def square(x):\n    return x + x\n",
            "def square(x):\n    return abs(x) ** 2 if x else 1\n",
            "def square(x):\n    return [x][1]\n",
        ],
    ),
    (
        {
            "entry_point": "rev",
            "tests": [
                "assert rev('abc') == 'cba'",
                "assert rev('') == ''",
                "assert rev('a') == 'a'",
            ],
        },
        [
            "def rev(s):\n    return s[::-1]\n",
            "def rev(s):\n    return s\n",
            "def rev(s):\n    return ''.join(sorted(s, reverse=True))\n",
            "```python\ndef rev(s):\n    return s[1:]\n```",
        ],
    ),
    (
        {
            "entry_point": "fib",
            "tests": [f"assert fib({n}) == {v}" for n, v in ((0, 0), (1, 1), (10, 55), (20, 6765))],
        },
        [
            FIB.format(start="0, 1"),
            "def fib(n):\n    return n\n",
            "def fib(n):\n    return fib(n - 1) + fib(n - 2) if n > 1 else 1\n",
            FIB.format(start="1, 1"),
        ],
    ),
    (
        {
            "entry_point": "is_prime",
            "tests": ["assert is_prime(7)", "assert not is_prime(9)", "assert is_prime(2) is True"],
        },
        [
            "def is_prime(n):\n    return n > 1 and all(n % d for d in range(2, n))\n",
            "def is_prime(n):\n    return n % 2 == 1\n",
            "def is_prime(n):\n    return True\n",
            "def is_prime(n):\n    raise NotImplementedError\n",
        ],
    ),
]


def workload(n: int) -> tuple[list[str], list[str]]:
    pairs = [(json.dumps(answer), code) for answer, codes in PROBLEMS for code in codes]
    chosen = [pairs[i % len(pairs)] for i in range(n)]
    return [code for _, code in chosen], [answer for answer, _ in chosen]


def humaneval_workload() -> tuple[list[str], list[str]]:
    from grpo_core.data.adapters.registry import load_benchmark

    rows = load_benchmark("humaneval")
    return [r["solution"] for r in rows] + [""] * len(rows), [r["answer"] for r in rows] * 2


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--workers", type=int, default=CodeRewardConfig().workers)
    ap.add_argument("--programs", type=int, default=200)
    ap.add_argument("--humaneval", action="store_true", help="HumanEval's problems instead")
    ap.add_argument("--out", help="write the JSON result here")
    args = ap.parse_args()
    cfg = CodeRewardConfig(workers=args.workers)
    completions, answers = humaneval_workload() if args.humaneval else workload(args.programs)
    code_rewards(completions[:1], answers[:1], cfg)  # warm-up: namespace probe, page cache
    t0 = time.perf_counter()
    rewards = code_rewards(completions, answers, cfg)
    seconds = time.perf_counter() - t0
    result = {
        "programs": len(completions),
        "workers": cfg.workers,
        "seconds": round(seconds, 3),
        "programs_per_s": round(len(completions) / seconds, 1),
        "mean_reward": round(sum(rewards) / len(rewards), 4),
        "root": os.geteuid() == 0,
        "namespaces": network_isolation_available(),
        "cpus": os.cpu_count(),
        "workload": "humaneval" if args.humaneval else "mix",
    }
    print(
        f"{result['programs']} programs in {seconds:.2f} s with {cfg.workers} workers: "
        f"{result['programs_per_s']} programs/s ({1000 * seconds / len(completions):.1f} ms each), "
        f"mean reward {result['mean_reward']}"
    )
    print(json.dumps(result))
    if args.out:
        write_json(result, args.out)


if __name__ == "__main__":
    main()
