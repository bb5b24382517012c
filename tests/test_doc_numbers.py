"""The numbers README.md and docs/ quote from runs match the committed result files
(`scripts/doc_numbers.py`), a re-run that changes a result fails the check until the pages are
rewritten, and `--write` rewrites the numbers only."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import doc_numbers  # noqa: E402
from doc_numbers import Passage, Results, check, pct, points, span, write  # noqa: E402


def test_every_quoted_number_matches_its_result_file():
    bad = check(ROOT)
    assert not bad, "\n".join(map(str, bad)) + "\nrun: python scripts/doc_numbers.py --write"


def test_the_formats_on_small_cases():
    assert pct(0.23416) == "23.4"
    assert pct(0.0008333) == "0.1"
    assert pct(0.891, 0) == "89"
    assert points(0.266) == "+26.6"
    assert points(-0.0017) == "-0.2"
    assert points(0.0004) == "0.0"  # no signed zero
    assert span([0.195, 0.275, 0.2]) == "19.5-27.5"
    assert span([0.023, 0.0231]) == "2.3"  # equal once rounded: one number
    assert span([0.11, 0.21], lambda x: points(x, 0), " to ") == "+11 to +21"


def _copy(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    results = [
        "metrics",
        "benchmarks/results",
        "reports",
        "studies/smollm2/base",
        "studies/smollm2/cells",
    ]
    for rel in ["README.md", "docs", *results]:
        src = ROOT / rel
        if src.is_dir():
            shutil.copytree(src, root / rel, ignore=shutil.ignore_patterns("*.png"))
        else:
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(src, root / rel)
    return root


def test_a_changed_result_fails_the_check_and_write_rewrites_the_number_only(tmp_path):
    root = _copy(tmp_path)
    ev = json.loads((root / "metrics/eval.json").read_text())
    old = pct(ev["policy"]["arith"]["level4"])
    ev["policy"]["arith"]["level4"] = 0.61234  # a re-run: level 4 now 61.2
    (root / "metrics/eval.json").write_text(json.dumps(ev))
    before = (root / "README.md").read_text()

    bad = check(root)
    fields = {(m.page, m.field) for m in bad}
    assert ("README.md", "policy4") in fields  # the table's cell
    assert ("README.md", "diff4") in fields  # and the difference, in the table and the prose
    table = next(m for m in bad if m.field == "policy4")
    assert table.found == old and table.expected == "61.2"
    assert before.splitlines()[table.line - 1].startswith("| 4 |")
    assert "metrics/eval.json" in str(table)

    assert write(root) == ["README.md"]
    after = (root / "README.md").read_text()
    assert check(root) == []
    assert f"| 4 | {pct(ev['base']['arith']['level4'])} | 61.2 |" in after
    assert after.count("\n") == before.count("\n")  # the page keeps its line breaks
    changed = [
        (a, b) for a, b in zip(before.splitlines(), after.splitlines(), strict=True) if a != b
    ]
    assert 1 <= len(changed) <= 3 and all(old in a or "+" in a for a, _ in changed)


def test_edited_prose_is_reported_not_skipped(tmp_path):
    root = _copy(tmp_path)
    page = root / "docs/dynamics.md"
    page.write_text(page.read_text().replace("the weights moved", "the weights changed"))
    bad = check(root)
    assert len(bad) == 1 and bad[0].found is None
    assert "docs/dynamics.md: passage not found (no match for 'In the default run" in str(bad[0])
    with pytest.raises(SystemExit, match="docs/dynamics.md: no match"):
        write(root)


def test_a_passage_on_a_hand_made_page(tmp_path):
    (tmp_path / "r.json").write_text(json.dumps({"a": 0.706, "b": 0.7433}))
    (tmp_path / "page.md").write_text(
        "Intro.\n\npass@4 goes from 70.6 to\n74.0. Again: 70.6 (first).\n| x | 12 |\n"
    )

    def values(r: Results) -> dict[str, str]:
        d = r.json("r.json")
        return {"a": pct(d["a"]), "b": pct(d["b"])}

    passages = [
        # a field repeated: the second occurrence must read the same; the line break in the
        # page matches the template's space; "74.0." ends the number at the last digit
        Passage("page.md", "pass@4 goes from {a} to {b}. Again: {a} (first).", values, "r.json"),
    ]
    bad = check(tmp_path, passages)
    assert [(m.field, m.found, m.expected, m.line) for m in bad] == [("b", "74.0", "74.3", 4)]
    write(tmp_path, passages)
    assert (tmp_path / "page.md").read_text() == (
        "Intro.\n\npass@4 goes from 70.6 to\n74.3. Again: 70.6 (first).\n| x | 12 |\n"
    )
    with pytest.raises(ValueError, match="must end with text"):
        Passage("page.md", "goes from {a}", values, "r.json").pattern()


def test_the_script_runs_from_the_root_and_says_what_it_checked():
    done = subprocess.run(
        [sys.executable, "scripts/doc_numbers.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    n = len(doc_numbers.PASSAGES)
    assert f"{n} passages" in done.stdout and "every number matches its result file" in done.stdout


def test_the_presets_table_is_the_committed_output_of_the_committed_run():
    """docs/sharing-and-experiments.md shows `python -m stages.compare`'s output as committed in
    benchmarks/results/compare-presets.txt, whose baseline row is the committed run's
    metrics/eval.json: rerunning the default run fails this until the presets are rerun."""
    page = (ROOT / "docs/sharing-and-experiments.md").read_text()
    start = page.index("which a test checks this block\nagainst:\n\n```\n") + len(
        "which a test checks this block\nagainst:\n\n```\n"
    )
    block = page[start : page.index("```\n", start)]
    committed = (ROOT / "benchmarks/results/compare-presets.txt").read_text()
    assert block == committed
    ev = json.loads((ROOT / "metrics/eval.json").read_text())["policy"]["arith"]
    baseline = next(line for line in committed.splitlines() if line.startswith("* "))
    cells = baseline.split()
    assert cells[2] == pct(ev["accuracy"])
    assert cells[3:8] == [pct(ev[f"level{k}"]) for k in range(1, 6)]
