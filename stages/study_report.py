"""Study reports and their dvc.yaml (grpo_core/studies).

python -m stages.study_report init NAME         # write studies/NAME/dvc.yaml from its template
python -m stages.study_report report STUDY_DIR  # reports/NAME.md and reports/NAME/ (figures)
python -m stages.study_report findings          # docs/findings.md from every report
"""

from __future__ import annotations

import sys
from pathlib import Path

from grpo_core.errors import InputError
from grpo_core.studies import dvcfile, findings, report


def cli(argv: list[str]) -> None:
    try:
        if len(argv) == 2 and argv[0] == "init":
            print(dvcfile.write(argv[1]))
        elif len(argv) == 2 and argv[0] == "report":
            print(report.write_report(Path(argv[1]), Path("reports")))
        elif argv == ["findings"]:
            print(findings.write_findings(Path("reports"), Path("docs/findings.md")))
        else:
            raise SystemExit(__doc__)
    except (InputError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    cli(sys.argv[1:])
