"""A study report from hand-written cell files (the layout stages/study_cell.py writes), with
numbers chosen so that every interval and verdict can be computed by hand.

Questions q1, q2 are level 1, q3, q4 level 2, q5 level 3 (not a reported level: it must not
enter "all"). Per seed s, with d = 0.10, 0.12, 0.14 for s = 0, 1, 2:
- base: 0.4 at level 1, 0.1 at level 2; grpo: 0.5 and 0.2; new: grpo's + d (q5: new 1, else 0).
- So new - grpo = d at every level: mean 0.12, sd 0.02, sem 0.02 / sqrt(3) = 0.011547,
  half width t(0.975, 2) = 4.302653 x 0.011547 = 0.049683 -> +12.0 [+7.0, +17.0] points;
  new - base at level 1 = 0.1 + d -> +22.0 [+17.0, +27.0].
  With a smallest effect of interest of 5 points both are reproduced (lo > 0), not smaller
  than it (hi > 5 points).
- dynamics.tokens.logp_incorrect of new: first -1, last -0.9, -0.8, -0.7 -> last - first
  0.1, 0.2, 0.3: mean 0.2, sd 0.1, half width 0.248414 -> [-0.04841, +0.4484]: holds 0 and
  the effect of interest 0.1, inconclusive. Decided once the half width drops below
  max(0.2, 0.1 - 0.2) = 0.2: t(0.975, n-1) x 0.1 / sqrt(n) is 0.248 at n = 3, 0.159 at n = 4.
- dynamics.weights.rel_update: new 0.020, 0.021, 0.022, grpo 0.010 -> 0.010, 0.011, 0.012:
  mean 0.011, half width 4.302653 x 0.001 / sqrt(3) = 0.002484 -> [+0.008516, +0.01348],
  wholly above 0 where the claim expects "worse": contradicted; so is the claim.
- The precondition (base accuracy at level 1 below 0.5) holds: 0.4.
"""

import json
import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from grpo_core.studies.findings import write_findings
from grpo_core.studies.report import load_results, write_report

D = {0: 0.10, 1: 0.12, 2: 0.14}
LEVELS = {"q1": 1, "q2": 1, "q3": 2, "q4": 2, "q5": 3}


def study_yaml(seeds: list[int], dynamics: list[str]) -> dict:
    return {
        "title": "Demo study",
        "question": "Does new beat grpo?",
        "seeds": seeds,
        "baseline": "grpo",
        "budget": {"steps": 4},
        "params": {},
        "levels": [1, 2],
        "variants": {"grpo": {"algo": "grpo"}, "new": {"algo": "codapo"}},
        "dynamics": dynamics,
        "cut": ["Fewer steps than the paper."],
        "claims": [
            {
                "id": "new-beats-grpo",
                "claim": "new trains to a higher accuracy than grpo",
                "paper": "+3.8 points",
                "checks": [
                    {
                        "variant": "new",
                        "baseline": "grpo",
                        "level": "all",
                        "expect": "better",
                        "effect": 0.05,
                        "why": "the paper's +3.8, rounded",
                    },
                    {
                        "variant": "new",
                        "baseline": "base",
                        "level": 1,
                        "expect": "better",
                        "effect": 0.05,
                    },
                ],
            },
            {
                "id": "new-moves-less",
                "claim": "new grows confident in wrong answers and updates the weights less",
                "paper": "a smaller update",
                "checks": [
                    {
                        "variant": "new",
                        "metric": "dynamics.tokens.logp_incorrect",
                        "expect": "better",
                        "effect": 0.1,
                    },
                    {
                        "variant": "new",
                        "baseline": "grpo",
                        "metric": "dynamics.weights.rel_update",
                        "expect": "worse",
                        "effect": 0.005,
                    },
                ],  # fmt: skip
            },
        ],
        "preconditions": [
            {
                "what": "the base is far from solving level 1",
                "variant": "base",
                "level": 1,
                "below": 0.5,
                "claims": ["new-beats-grpo"],
            },
        ],  # fmt: skip
    }


def accuracies(variant: str, seed: int) -> dict[str, float]:
    by_level = {"base": (0.4, 0.1), "grpo": (0.5, 0.2), "new": (0.5 + D[seed], 0.2 + D[seed])}
    acc = {q: by_level[variant][level - 1] for q, level in LEVELS.items() if level < 3}
    return acc | {"q5": 1.0 if variant == "new" else 0.0}


def write_questions(folder, variant: str, seed: int) -> None:
    folder.mkdir(parents=True)
    acc = accuracies(variant, seed)
    table = pa.table(
        {
            "id": list(LEVELS),
            "source": ["arith"] * 5,
            "domain": ["arith"] * 5,
            "level": pa.array(list(LEVELS.values()), pa.int64()),
            "accuracy": [acc[q] for q in LEVELS],
            "greedy": pa.array([None] * 5, pa.float64()),
            "samples": [4] * 5,
        }
    )
    pq.write_table(table, folder / "questions.parquet")


def make_study(root, name: str = "demo", seeds=(0, 1, 2), dynamics=("grpo", "new")):
    """studies/<name>/ with every base evaluation and cell of `seeds`."""
    study_dir = root / "studies" / name
    study_dir.mkdir(parents=True)
    (study_dir / "study.yaml").write_text(yaml.safe_dump(study_yaml(list(seeds), list(dynamics))))
    for seed in seeds:
        write_questions(study_dir / "base" / str(seed), "base", seed)
        (study_dir / "base" / f"{seed}.json").write_text(json.dumps({"wall_s": 5.0}))
        for variant in ("grpo", "new"):
            cell = study_dir / "cells" / f"{variant}-{seed}"
            write_questions(cell, variant, seed)
            (cell / "train.csv").write_text(
                "step,reward,num_rollouts,entropy\n1,0.2,16,0.9\n2,0.3,16,\n3,0.4,16,0.8\n"
                "4,0.5,16,0.7\n"
            )
            dyn = cell / "dynamics"
            dyn.mkdir()
            (dyn / "confidence.csv").write_text(
                '"step","logp_correct","logp_incorrect"\n1,-0.5,-1.0\n4,-0.3,-0.8\n'
            )
            (dyn / "advantage.csv").write_text(
                '"step","adv_abs_p10","adv_abs_p50","adv_abs_p90","zero_adv_frac"\n'
                "1,0.1,0.5,0.9,0.1\n4,0.0,0.4,0.8,0.3\n"
            )
            (dyn / "convergence.csv").write_text(
                '"step","level1","level2","bin_easy"\n1,0.5,,0.7\n4,0.6,0.2,0.8\n'
            )
            new = variant == "new"
            summary = {
                "accuracy": 0.0,
                "steps": 4,
                "rollouts": 64,
                "wall_s": {"train": 70.0 if new else 50.0, "dynamics": 5.0, "evaluate": 5.0,
                           "total": 90.0 if new else 60.0},
                "dynamics": {
                    "weights": {"step": 4, "rel_update": 0.020 + 0.001 * seed if new else 0.010,
                                "changed_frac": 0.5},
                    "tokens": {
                        "logp_correct": {"first": -0.5, "last": -0.3},
                        "logp_incorrect": {"first": -1.0, "last": -0.9 + 0.1 * seed},
                        "zero_adv_frac": {"first": 0.1, "last": 0.3},
                        "accuracy": {"first": 0.3, "last": 0.5},
                    },
                },
            }  # fmt: skip
            (study_dir / "cells" / f"{variant}-{seed}.json").write_text(json.dumps(summary))
    return study_dir


BETTER = "expected better, smallest effect of interest"
NEW_GRPO = f"new − grpo overall: +12.0 [+7.0, +17.0] pts ({BETTER} 5.0 pts), 3 seeds → reproduced"
NEW_BASE = (
    f"new − base at level 1: +22.0 [+17.0, +27.0] pts ({BETTER} 5.0 pts), 3 seeds → reproduced"
)
LOGP = (
    "new dynamics.tokens.logp_incorrect (last − first): +0.2 [-0.04841, +0.4484] "
    f"({BETTER} 0.1), 3 seeds → inconclusive (about 4 seeds would decide it)"
)
REL_UPDATE = (
    "new − grpo dynamics.weights.rel_update: +0.011 [+0.008516, +0.01348] (expected worse, "
    "smallest effect of interest 0.005), 3 seeds → contradicted (wholly on the other side of 0)"
)


def test_load_results_reads_every_cell(tmp_path):
    results = load_results(make_study(tmp_path))
    assert results.name == "demo" and results.missing == []
    assert sorted(results.accuracy) == ["base", "grpo", "new"]
    assert results.accuracy["new"][1]["q1"] == pytest.approx(0.62)
    assert results.levels["base"][0] == LEVELS
    assert results.summaries["grpo"][2]["steps"] == 4
    assert results.reported_levels() == [1, 2]
    assert results.questions("all") == {"q1", "q2", "q3", "q4"}
    assert results.questions(2) == {"q3", "q4"}


def test_report_tables_verdicts_figures_and_summary(tmp_path):
    study_dir = make_study(tmp_path)
    md = write_report(study_dir, tmp_path / "reports")
    assert md == tmp_path / "reports" / "demo.md"
    folder = tmp_path / "reports" / "demo"
    for png in ("accuracy", "difference", "curves", "dynamics"):
        assert (folder / f"{png}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"](demo/{png}.png)" in md.read_text()
    text = md.read_text()
    lines = text.splitlines()
    assert lines[0] == "# Demo study"
    assert "`dvc repro studies/demo/dvc.yaml`" in text
    assert "`python -m stages.study_report report studies/demo`" in text
    assert "6 / 6 cells done" in text and "Missing" not in text
    assert "the base model evaluated at 3 / 3 seeds." in text
    # Verdicts first, then accuracy, differences, cost, dynamics, figures, what was cut.
    heads = [line for line in lines if line.startswith("## ")]
    assert [h.split(" (")[0] for h in heads] == [
        "## Cells", "## Method", "## Preconditions", "## Verdicts",
        "## Precision: what the seeds can detect", "## Accuracy", "## Paired differences",
        "## Per seed", "## Cost", "## Dynamics", "## Figures", "## What was cut",
    ]  # fmt: skip
    # per seed: every question's difference to the base is the same here, so se 0
    assert "| base | 0 | 40.0 | 10.0 | 25.0 |" in lines
    assert (
        "| new | 0 | 60.0 (+20.0, se 0.0) | 30.0 (+20.0, se 0.0) | 45.0 (+20.0, se 0.0) |" in lines
    )
    assert (
        "| grpo (baseline) | 2 | 50.0 (+10.0, se 0.0) | 20.0 (+10.0, se 0.0) "
        "| 35.0 (+10.0, se 0.0) |" in lines
    )
    assert (
        "| `new-beats-grpo` | new trains to a higher accuracy than grpo | +3.8 points | "
        f"{NEW_GRPO}; {NEW_BASE} | **reproduced** |"
    ) in lines
    assert f"| {LOGP}; {REL_UPDATE} | **contradicted (wholly on the other side of 0)** |" in text
    assert (
        "- the base is far from solving level 1: base accuracy at level 1 = 0.4 (needs < 0.5; "
        "mean of 3 seeds) → holds"
    ) in lines
    # detectable with 80% power: (4.302653 + 1.060660) x 0.02 / sqrt(3) = 6.19 points; the
    # spread between seeds is the sd of d, 2 points. Eval noise of a seed's difference, k = 4:
    # sum over q1-q4 of p(1-p)/3 for new and grpo, / 4^2; at seed 0 (new 0.6, 0.3; grpo 0.5,
    # 0.2) 2 x (0.08 + 0.07 + 0.083333 + 0.053333) / 16 = 0.035833, at seeds 1 and 2 0.035967
    # and 0.036033: root mean square sqrt(0.035944) = 0.18959, 19.0 points.
    assert (
        "| new − grpo overall | 5.0 pts | 6.2 pts | 2.0 pts | 19.0 pts | 3 | "
        "the paper's +3.8, rounded |"
    ) in lines
    # Accuracy: q5 (level 3) is not in "all"; a constant one has a point interval.
    assert "| base | 40.0 [40.0, 40.0] | 10.0 [10.0, 10.0] | 25.0 [25.0, 25.0] |" in lines
    assert "| new | 62.0 [57.0, 67.0] | 32.0 [27.0, 37.0] | 47.0 [42.0, 52.0] |" in lines
    assert (
        "| grpo (baseline) | 50.0 [50.0, 50.0] | 20.0 [20.0, 20.0] | 35.0 [35.0, 35.0] |" in lines
    )
    assert (
        "| new − grpo | +12.0 [+7.0, +17.0] | +12.0 [+7.0, +17.0] | +12.0 [+7.0, +17.0] |" in lines
    )
    assert (
        "| new − base | +22.0 [+17.0, +27.0] | +22.0 [+17.0, +27.0] | +22.0 [+17.0, +27.0] |"
        in lines
    )
    assert (
        "| grpo − base | +10.0 [+10.0, +10.0] | +10.0 [+10.0, +10.0] | +10.0 [+10.0, +10.0] |"
        in lines
    )
    # Cost: means over seeds; compute is 3 x 60 s + 3 x 90 s.
    assert "| grpo (baseline) | 3 | 4 | 64 | – | 0:50 | 1:00 |" in lines
    assert "| new | 3 | 4 | 64 | – | 1:10 | 1:30 |" in lines
    assert "Compute: 7:30" in text
    assert "| new | 0.021 | 0.5 | -0.5 → -0.3 | -1 → -0.8 | 0.1 → 0.3 |" in lines
    assert "- Fewer steps than the paper." in lines

    summary = json.loads((folder / "summary.json").read_text())
    assert {k: summary[k] for k in ("name", "cells_done", "cells_expected", "seeds")} == {
        "name": "demo", "cells_done": 6, "cells_expected": 6, "seeds": [0, 1, 2],
    }  # fmt: skip
    assert summary["wall_s_total"] == 450.0
    first, second = summary["claims"]
    assert (first["verdict"], second["verdict"]) == ("reproduced", "contradicted")
    assert second["note"] == "wholly on the other side of 0"
    assert summary["preconditions"][0]["holds"] is True
    check = first["checks"][0]
    assert (check["mean"], check["lo"], check["hi"]) == pytest.approx(
        (0.12, 0.12 - 0.049683, 0.12 + 0.049683), abs=1e-6
    )
    assert (check["n"], check["outcome"], check["text"]) == (3, "reproduced", NEW_GRPO)
    assert check["detectable"] == pytest.approx(0.0619, abs=1e-4)
    assert check["eval_noise"] == pytest.approx(0.18959, abs=1e-5)
    assert check["seed_spread"] == pytest.approx(0.02)
    assert [c["outcome"] for c in second["checks"]] == ["inconclusive", "contradicted"]
    assert second["checks"][0]["seeds_to_decide"] == 4
    assert second["checks"][0]["level"] is None


def test_a_missing_cell_is_listed_and_left_out(tmp_path):
    study_dir = make_study(tmp_path)
    (study_dir / "cells" / "new-2.json").unlink()
    shutil.rmtree(study_dir / "cells" / "new-2")
    text = write_report(study_dir, tmp_path / "reports").read_text()
    assert "5 / 6 cells done" in text
    assert "Missing: `new-2`." in text
    # d = 0.10, 0.12: mean 0.11, sem 0.01, half width t(0.975, 1) = 12.7062 x 0.01
    assert f"new − grpo overall: +11.0 [-1.7, +23.7] pts ({BETTER} 5.0 pts), 2 seeds" in text
    assert "| new | 2 | 4 | 64 | – | 1:10 | 1:30 |" in text


def test_one_seed_is_inconclusive(tmp_path):
    study_dir = make_study(tmp_path, "solo", seeds=(0,), dynamics=())
    md = write_report(study_dir, tmp_path / "reports")
    text = md.read_text()
    assert (
        f"new − grpo overall: +10.0 (n=1) pts ({BETTER} 5.0 pts), 1 seed → inconclusive "
        "(1 seed: no interval)"
    ) in text
    verdicts = [line.split(" | ")[-1] for line in text.splitlines() if line.startswith("| `")]
    assert verdicts == ["**inconclusive (1 seed: no interval)** |"] * 2
    assert not (tmp_path / "reports" / "solo" / "dynamics.png").exists()
    summary = json.loads((tmp_path / "reports" / "solo" / "summary.json").read_text())
    assert [c["verdict"] for c in summary["claims"]] == ["inconclusive", "inconclusive"]
    check = summary["claims"][0]["checks"][0]
    assert (check["mean"], check["lo"], check["hi"], check["n"]) == (
        pytest.approx(0.1), None, None, 1,
    )  # fmt: skip


def test_findings_gather_every_report(tmp_path):
    reports = tmp_path / "reports"
    write_report(make_study(tmp_path), reports)
    write_report(make_study(tmp_path, "solo", seeds=(0,), dynamics=()), reports)
    target = write_findings(reports, tmp_path / "docs" / "findings.md")
    assert target == tmp_path / "docs" / "findings.md"
    lines = target.read_text().splitlines()
    assert lines[0] == "# Findings"
    assert any("python -m stages.study_report findings" in line for line in lines[:4])
    assert (
        "4 claims: 1 reproduced, 0 no effect, 1 contradicted, 2 inconclusive, 0 not testable "
        "here, over studies demo, solo; each check over 1-3 training seeds. A verdict says what "
        "the 95% interval rules in or out against the claim's smallest effect of interest "
        "(docs/studies.md#the-statistics)."
    ) in lines
    assert (
        "| [demo](../reports/demo.md) | new trains to a higher accuracy than grpo | +3.8 points | "
        f"{NEW_GRPO}; {NEW_BASE} | **reproduced** | `dvc repro studies/demo/dvc.yaml` |"
    ) in lines
    rows = [line for line in lines if line.startswith("| [")]
    assert [r.split("]")[0] for r in rows] == ["| [demo", "| [demo", "| [solo", "| [solo"]


def test_a_failed_precondition_makes_its_claims_not_testable(tmp_path):
    study_dir = make_study(tmp_path)
    spec = yaml.safe_load((study_dir / "study.yaml").read_text())
    spec["preconditions"][0]["below"] = 0.3  # the base's 0.4 at level 1 now fails it
    (study_dir / "study.yaml").write_text(yaml.safe_dump(spec))
    write_report(study_dir, tmp_path / "reports")
    summary = json.loads((tmp_path / "reports" / "demo" / "summary.json").read_text())
    first, second = summary["claims"]
    assert first["verdict"] == "not testable here"
    assert first["note"] == (
        "the base is far from solving level 1: base accuracy at level 1 = 0.4 (needs < 0.3; "
        "mean of 3 seeds) → fails"
    )
    assert first["checks"][0]["outcome"] == "reproduced"  # the numbers are still shown
    assert second["verdict"] == "contradicted"  # a claim it does not guard keeps its verdict


def test_findings_show_the_verdicts_before_beside_the_new(tmp_path):
    reports = tmp_path / "reports"
    write_report(make_study(tmp_path), reports)
    (reports / "verdicts-before.json").write_text(
        json.dumps({"demo/new-beats-grpo": "inconclusive"})
    )
    lines = write_findings(reports, tmp_path / "docs" / "findings.md").read_text().splitlines()
    assert "| study | claim | paper's number | ours | verdict | verdict before | rerun |" in lines
    rows = [line for line in lines if line.startswith("| [")]
    assert rows[0].endswith("| **reproduced** | inconclusive | `dvc repro studies/demo/dvc.yaml` |")
    assert rows[1].endswith("| – | `dvc repro studies/demo/dvc.yaml` |")


def test_findings_read_the_capacity_boundary_in_every_grpo_arm(tmp_path, monkeypatch):
    """new - base is 0.1 + d at levels 1 and 2: +22.0 [+17.0, +27.0] points (see the module
    docstring). Against "level 1 better by 5 points" that is reproduced; against "level 2
    equal within 2 points" contradicted (wholly outside the margin). grpo - base is 0.1 at
    every seed: a zero-width interval, refused. The verdict over the arms is the weakest."""
    from grpo_core.studies import findings

    monkeypatch.setattr(findings, "BOUNDARY", ((1, "better", 0.05), (2, "equal", 0.02)))
    reports = tmp_path / "reports"
    for name, arm in (("demo", "new"), ("other", "grpo"), ("none", None)):
        study_dir = make_study(tmp_path, name)
        spec = yaml.safe_load((study_dir / "study.yaml").read_text())
        spec["grpo_arm"] = arm
        spec["params"] = {"train.levels": [1, 2], "eval.samples": 8}
        (study_dir / "study.yaml").write_text(yaml.safe_dump(spec))
        write_report(study_dir, reports)
    summary = json.loads((reports / "demo" / "summary.json").read_text())
    arm = summary["grpo_arm"]
    assert (arm["variant"], arm["trains"]) == ("new", "`train.levels=[1, 2]`")
    assert arm["vs_base"]["1"]["mean"] == pytest.approx(0.22)
    assert arm["vs_base"]["2"]["lo"] == pytest.approx(0.22 - 0.049683, abs=1e-5)
    assert json.loads((reports / "none" / "summary.json").read_text())["grpo_arm"] is None
    lines = write_findings(reports, tmp_path / "docs" / "findings.md").read_text().splitlines()
    assert "## The capacity boundary in every study's GRPO arm" in lines
    rows = [line for line in lines if line.startswith("| [") and "`train.levels" in line]
    assert rows == [
        "| [demo](../reports/demo.md) | `new` | `train.levels=[1, 2]` | +22.0 [+17.0, +27.0] | "
        "reproduced | +22.0 [+17.0, +27.0] | contradicted (the interval lies outside the "
        "margin) |",
        "| [other](../reports/other.md) | `grpo` | `train.levels=[1, 2]` | +10.0 [+10.0, +10.0] "
        "| inconclusive (identical at every seed: a zero-width interval is refused) | "
        "+10.0 [+10.0, +10.0] | inconclusive (identical at every seed: a zero-width interval is "
        "refused) |",
    ]
    verdict = "**contradicted (the interval lies outside the margin)**"
    assert f"Over every study's GRPO arm: {verdict}." in lines


def test_a_grpo_arm_must_be_a_variant(tmp_path):
    from grpo_core.studies.spec import Study

    spec = study_yaml([0], [])
    spec["grpo_arm"] = "gpro"
    with pytest.raises(ValueError, match="grpo_arm: 'gpro' is not a variant"):
        Study.model_validate(spec)


def test_per_seed_rows_give_the_paired_se_over_questions(tmp_path):
    """new at seed 0 with q1 0.7 and q2 0.5 against the base's 0.4 and 0.4: differences 0.3 and
    0.1 at level 1, mean 0.2, se = sd(0.3, 0.1) / sqrt(2) = 0.141421 / 1.414214 = 0.1."""
    from grpo_core.studies.report import _per_seed_rows

    results = load_results(make_study(tmp_path))
    results.accuracy["new"][0].update(q1=0.7, q2=0.5)
    rows = _per_seed_rows(results, [1, 2, "all"])
    # all (levels 1-2): differences 0.3, 0.1, 0.2, 0.2: sd 0.081650, se 0.040825
    assert [
        "new",
        "0",
        "60.0 (+20.0, se 10.0)",
        "30.0 (+20.0, se 0.0)",
        "45.0 (+20.0, se 4.1)",
    ] in rows
    assert ["base", "0", "40.0", "10.0", "25.0"] in rows


def test_two_arms_whose_params_differ_beyond_their_variants_are_not_compared(tmp_path):
    """Issue 39: SmolLM2's grpo-0 ran without held-out evaluation, with_format-0 with it. A
    check compares two arms only where their cells' recorded params differ by what the
    variants set; otherwise it is not testable here and names the param and both values."""
    from grpo_core.studies.results import config_difference

    study_dir = make_study(tmp_path)

    def record(variant: str, seed: int, **train) -> None:
        params = {"algo": "grpo" if variant == "grpo" else "codapo", "seed": 0,
                  "train": {"lr": 7e-5, "heldout": {"every": 5}, **train}}  # fmt: skip
        run = {"params": params, "resolved": {"algo": params["algo"]}}
        (study_dir / "cells" / f"{variant}-{seed}" / "run.json").write_text(json.dumps(run))

    for seed in (0, 1, 2):
        record("grpo", seed)
        record("new", seed)
    results = load_results(study_dir)
    assert config_difference(results, "new", "grpo") is None  # algo: the variants set it
    record("grpo", 1, heldout={"every": 0})
    why = config_difference(load_results(study_dir), "new", "grpo")
    assert why == (
        "not compared: new-1 and grpo-1 ran with train.heldout.every = 5 and 0, which neither "
        "variant sets (re-run the older cell)"
    )
    write_report(study_dir, tmp_path / "reports")
    summary = json.loads((tmp_path / "reports" / "demo" / "summary.json").read_text())
    check = summary["claims"][0]["checks"][0]
    assert summary["claims"][0]["verdict"] == "not testable here"
    assert check["outcome"] == "not testable here" and "train.heldout.every" in check["note"]
    # a cell from before params were recorded: its resolved train params, the same preset
    (study_dir / "cells" / "new-0" / "run.json").write_text(
        json.dumps({"resolved": {"algo": "codapo", "train": {"lr": 1e-4}}})
    )
    (study_dir / "cells" / "grpo-0" / "run.json").write_text(
        json.dumps({"resolved": {"algo": "grpo", "train": {"lr": 7e-5}}})
    )
    record("grpo", 1)
    assert config_difference(load_results(study_dir), "new", "grpo") is None  # two presets


def test_a_report_is_the_same_bytes_whatever_the_hash_seed(tmp_path):
    """Sums over a set of question ids follow Python's string hashing, which PYTHONHASHSEED
    randomises per process: a regenerated summary.json moved in its 17th digit. Sorted sums
    give the same bytes in every process."""
    import os
    import subprocess
    import sys

    import numpy as np

    study_dir = make_study(tmp_path)
    rng = np.random.default_rng(0)
    ids = [f"q{i}" for i in range(300)]  # enough non-dyadic terms for the order to round
    for cell in [*study_dir.glob("cells/*-*/"), *study_dir.glob("base/*/")]:
        table = pa.table(
            {
                "id": ids,
                "source": ["arith"] * 300,
                "domain": ["arith"] * 300,
                "level": pa.array([1 + i % 2 for i in range(300)], pa.int64()),
                "accuracy": (rng.integers(0, 9, 300) / 7).tolist(),
                "greedy": pa.array([None] * 300, pa.float64()),
                "samples": [7] * 300,
            }
        )
        pq.write_table(table, cell / "questions.parquet")
    code = (
        "import sys; from pathlib import Path; from grpo_core.studies.report import write_report;"
        "write_report(Path(sys.argv[1]), Path(sys.argv[2]))"
    )
    outs = []
    for seed in ("1", "2", "3"):
        out = tmp_path / f"reports-{seed}"
        env = {**os.environ, "PYTHONHASHSEED": seed}
        subprocess.run([sys.executable, "-c", code, str(study_dir), str(out)], env=env, check=True)
        outs.append((out / "demo" / "summary.json").read_bytes())
    assert outs[0] == outs[1] == outs[2]


def test_the_report_says_what_a_seed_replicates_from_the_bases_the_cells_record(tmp_path):
    """A shared base: the intervals hold for that base. `bases: per_seed`: they cover the
    base only when every seed's cells record a base of their own (run.json provenance)."""
    from grpo_core.studies.results import config_difference, replication

    study_dir = make_study(tmp_path)

    def record(variant: str, seed: int, base: str | None) -> None:
        run = {"provenance": {"base": base, "eval_set": "e"}} if base else {}
        (study_dir / "cells" / f"{variant}-{seed}" / "run.json").write_text(json.dumps(run))

    for seed in (0, 1, 2):
        for variant in ("grpo", "new"):
            record(variant, seed, "b0")
    text = replication(load_results(study_dir))
    assert "on one base, so the intervals hold for that base" in text
    assert "1 distinct base(s) recorded over 3 seed(s)" in text and "re-run" not in text
    spec = yaml.safe_load((study_dir / "study.yaml").read_text())
    (study_dir / "study.yaml").write_text(yaml.safe_dump({**spec, "bases": "per_seed"}))
    text = replication(load_results(study_dir))  # per seed declared, one base recorded
    assert "each seed trains from its own base" in text
    assert "do not yet cover the base's variation" in text
    for seed in (0, 1, 2):
        for variant in ("grpo", "new"):
            record(variant, seed, f"b{seed}")
    text = replication(load_results(study_dir))
    assert "3 distinct base(s) recorded over 3 seed(s)" in text and "re-run" not in text
    record("new", 2, "b9")  # a seed whose two arms ran on different bases: not compared
    assert "seeds whose cells ran on different bases: [2]" in replication(load_results(study_dir))
    assert config_difference(load_results(study_dir), "new", "grpo") == (
        "not compared: new-2 and grpo-2 may have run on different base models (b9 and b2; "
        "re-run the older cell)"
    )
    record("new", 2, None)  # a cell from before the record, beside one that records its base
    text = replication(load_results(study_dir))
    assert "1 cell(s) from before the base was recorded" in text and "re-run them" in text
    assert config_difference(load_results(study_dir), "new", "grpo") == (
        "not compared: new-2 and grpo-2 may have run on different base models (none recorded "
        "and b2; re-run the older cell)"
    )
    record("grpo", 2, None)  # two cells of the same era: compared on their params alone
    assert config_difference(load_results(study_dir), "new", "grpo") is None
