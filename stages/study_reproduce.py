"""Re-run chosen cells of a study from the committed code, in a scratch workspace, and compare
their outputs with the committed ones: before a lock is recorded with `dvc commit`, show that
the code still produces what the cells hold (docs/studies.md#recording-a-lock).

    python -m stages.study_reproduce studies/codapo grpo-0              # one cell
    python -m stages.study_reproduce studies/codapo grpo-0 codapo-1 --tolerance 1e-6
    python -m stages.study_reproduce studies/codapo grpo-0 --commit     # then record the locks

The scratch workspace is a git worktree of HEAD (uncommitted edits are not what is tested),
with the cell's inputs that are not in git (the base model, the prepared data) linked from
this workspace; they must be the ones the cell was made from (its dvc.lock entry), else the
command says which differ and stops. Each cell is re-run with `stages.study_cell`, and every
file it writes is compared with HEAD's: bit for bit, or by the largest numeric difference,
which must be within `--tolerance` (default 0: the same bits). `--commit` runs `dvc commit
-f` on the study's dvc.yaml only if every chosen cell passed. Exit status: 0 when all passed,
1 when one did not, 2 for bad input.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from grpo_core.errors import InputError
from grpo_core.studies.reproduce import reproduce

ROOT = Path.cwd()


def cli(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m stages.study_reproduce",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("study", type=Path, help="the study's folder, e.g. studies/codapo")
    parser.add_argument("cells", nargs="+", help="cells as VARIANT-SEED, e.g. grpo-0")
    parser.add_argument(
        "--tolerance", type=float, default=0.0, help="largest numeric difference allowed"
    )
    parser.add_argument(
        "--commit", action="store_true", help="record the study's locks if every cell passed"
    )
    parser.add_argument("--keep", type=Path, help="re-run in this folder and keep it")
    args = parser.parse_args(argv)
    try:
        if not (args.study / "dvc.yaml").exists():
            raise InputError(f"{args.study}/dvc.yaml: not found (a study's folder?)")
        results = [reproduce(ROOT, args.study, c, args.tolerance, args.keep) for c in args.cells]
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    if not all(results):
        print("not reproduced: no lock recorded", file=sys.stderr)
        sys.exit(1)
    if args.commit:
        subprocess.run(
            [sys.executable, "-m", "dvc", "commit", "-f", f"{args.study}/dvc.yaml"],
            cwd=ROOT,
            check=True,
        )
        print(f"{args.study}/dvc.lock: locks recorded after {len(results)} cell(s) reproduced")


if __name__ == "__main__":
    cli(sys.argv[1:])
