"""Experiments side by side, held-out accuracy first, in one table 120 characters wide.

python -m stages.compare                      # HEAD, its experiments and the workspace
python -m stages.compare codapo dapo          # only these experiments (and the baseline)
python -m stages.compare --baseline codapo    # differences against an experiment
python -m stages.compare --all                # the experiments of every commit
python -m stages.compare --rev v1 --metric greedy

Reads `dvc exp show --json` (the logic is grpo_core/compare.py; the recipe for `dvc exp show`
itself is in docs/sharing-and-experiments.md).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

from grpo_core import compare
from grpo_core.errors import InputError


def _run(cmd: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, check=False)


def _commit(rev: str) -> str | None:
    """The full sha of a git revision (HEAD, a branch, a tag, a sha), None if it is not one."""
    done = _run(["git", "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"])
    return done.stdout.strip() if done.returncode == 0 else None


def exp_show(revs: list[str], all_commits: bool) -> list[dict]:
    """`dvc exp show --json` of this venv's DVC, in a subprocess: its JSON keeps each metrics
    file apart with its own error, which the flattened table of dvc.api.exp_show merges."""
    cmd = [sys.executable, "-m", "dvc", "exp", "show", "--json"]
    cmd += ["--all-commits"] if all_commits else [f"--rev={rev}" for rev in revs]
    done = _run(cmd)
    if done.returncode != 0:
        lines = (done.stderr.strip() or done.stdout.strip() or "failed").splitlines()
        raise InputError(f"dvc exp show: {lines[-1].removeprefix('ERROR: ')}")
    return json.loads(done.stdout)


def table(args: argparse.Namespace) -> str:
    """The rendered comparison the arguments ask for."""
    revs = args.rev or ["HEAD"]
    key = args.baseline or revs[0]
    sha = _commit(key)
    if sha and not args.all and sha not in map(_commit, revs):
        revs = [*revs, key]  # a baseline commit outside --rev: show it too
    rows = compare.records(exp_show(revs, args.all))
    baseline = compare.find(rows, key) or (compare.find(rows, sha) if sha else None)
    if baseline is None:
        known = ", ".join(r.label for r in rows)
        raise InputError(f"--baseline {key}: no such experiment or commit (rows: {known})")
    if args.all:  # commits without experiments are just history
        parents = {r.parent for r in rows}
        rows = [r for r in rows if r.kind != "commit" or r.rev in parents or r is baseline]
    if args.names:
        chosen = [compare.find(rows, name) for name in args.names]
        unknown = [n for n, r in zip(args.names, chosen, strict=True) if r is None]
        if unknown:
            known = ", ".join(r.label for r in rows)
            raise InputError(f"no experiment {', '.join(unknown)} here (rows: {known}); try --all")
        rows = [baseline, *(r for r in chosen if r is not baseline)]
    metrics = compare.metric_keys(rows)
    if metrics and args.metric not in metrics:
        raise InputError(f"--metric {args.metric}: not in {compare.EVAL} (has {sorted(metrics)})")
    return compare.render(compare.build(rows, baseline, args.metric))


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, not the usage block
        self.exit(2, f"error: {message} (see --help)\n")


def cli(argv: list[str]) -> None:
    parser = _Parser(
        prog="python -m stages.compare",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("names", nargs="*", help="experiments (or commits) to show; all if none")
    parser.add_argument("--all", action="store_true", help="the experiments of every commit")
    parser.add_argument(
        "--rev", action="append", help="the experiments of this commit (repeatable; default HEAD)"
    )
    parser.add_argument(
        "--baseline",
        help="the row differences are taken against: an experiment's name, 'workspace' or a "
        "commit (default: the commit the experiments were run from, HEAD or the first --rev)",
    )
    parser.add_argument(
        "--metric",
        default="accuracy",
        help="key in metrics/eval.json per benchmark: accuracy (avg@k, per level), greedy, "
        "pass@K, maj@K",
    )
    args = parser.parse_args(argv)
    try:
        print(table(args), end="")
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    cli(sys.argv[1:])
