"""A study report from hand-written cell files (the layout stages/study_cell.py writes), with
numbers chosen so that every interval and verdict can be computed by hand.

Questions q1, q2 are level 1, q3, q4 level 2, q5 level 3 (not a reported level: it must not
enter "all"). Per seed s, with d = 0.10, 0.12, 0.14 for s = 0, 1, 2:
- base: 0.4 at level 1, 0.1 at level 2; grpo: 0.5 and 0.2; new: grpo's + d (q5: new 1, else 0).
- So new - grpo = d at every level: mean 0.12, sd 0.02, sem 0.02 / sqrt(3) = 0.011547.
  Each claim has two checks, so each check's interval is Bonferroni's 97.5%: half width
  t(0.9875, 2) = 6.205347 x 0.011547 = 0.071653 -> +12.0 [+4.8, +19.2] points;
  new - base at level 1 = 0.1 + d, over q1 and q2 alone: there the evaluation's own noise
  (k = 400) is larger than the seeds' spread and replaces it. Per seed sum_q p(1-p)/399 over
  new and base, / 2^2: seed 0 (new 0.6, base 0.4) 2 x (0.24 + 0.24) / 399 / 4 = 0.00060150,
  seeds 1, 2 (new 0.62, 0.64) 0.00059599, 0.00058947: root mean square 0.024406 > 0.02, half
  width 6.205347 x 0.024406 / sqrt(3) = 0.087438 -> +22.0 [+13.3, +30.7].
  With a smallest effect of interest of 5 points both are reproduced (lo > 0), not smaller
  than it (hi > 5 points). (The tables of differences, one comparison each, stay at 95%:
  half width t(0.975, 2) = 4.302653 x 0.011547 = 0.049683 -> +12.0 [+7.0, +17.0].)
- Every question is evaluated with k = 400 samples, so over the four questions of "all" the
  evaluation's own noise (1.6 points) stays below the seeds' spread (2 points).
- dynamics.tokens.logp_incorrect of new: first -1, last -0.9, -0.8, -0.7 -> last - first
  0.1, 0.2, 0.3: mean 0.2, sd 0.1, half width 6.205347 x 0.057735 = 0.358266 ->
  [-0.1583, +0.5583]: holds 0 and the effect of interest 0.1, inconclusive. Decided with 80%
  power once (t(0.9875, n-1) + t(0.8, n-1)) x 0.1 / sqrt(n) drops below max(0.2, 0.1 - 0.2)
  = 0.2: 0.2578 at n = 4, 0.1984 at n = 5.
- dynamics.weights.rel_update: new 0.020, 0.021, 0.022, grpo 0.010 -> 0.010, 0.011, 0.012:
  mean 0.011, half width 6.205347 x 0.001 / sqrt(3) = 0.003583 -> [+0.007417, +0.01458],
  wholly above 0 where the claim expects "worse": contradicted; so is the claim.
- The precondition (base accuracy at level 1 below 0.5) holds: 0.4. The base solves 40% of
  level 1 and 10% of level 2, inside 5-95%: both levels are read.
"""

import json
import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from grpo_core.errors import InputError
from grpo_core.studies.findings import write_findings
from grpo_core.studies.report import load_results, write_report
from grpo_core.studies.spec import Study

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
            "samples": [400] * 5,
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
BONF = "3 seeds, 97.5% interval (Bonferroni, 2 checks)"
NEW_GRPO = f"new − grpo overall: +12.0 [+4.8, +19.2] pts ({BETTER} 5.0 pts), {BONF} → reproduced"
NEW_BASE = (
    f"new − base at level 1: +22.0 [+13.3, +30.7] pts ({BETTER} 5.0 pts), {BONF}, sd = the "
    "evaluation's noise 2.44 pts, above the seeds' 2.00 → reproduced"
)
LOGP = (
    "new dynamics.tokens.logp_incorrect (last − first): +0.2 [-0.1583, +0.5583] "
    f"({BETTER} 0.1), {BONF} → inconclusive (about 5 seeds would decide it at 80% power)"
)
REL_UPDATE = (
    "new − grpo dynamics.weights.rel_update: +0.011 [+0.007417, +0.01458] (expected worse, "
    f"smallest effect of interest 0.005), {BONF} → contradicted (wholly on the other side of 0)"
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
        f"{NEW_GRPO}; {NEW_BASE} | new –, grpo – | **reproduced** |"
    ) in lines
    assert (
        f"| {LOGP}; {REL_UPDATE} | new –, grpo – "
        "| **contradicted (wholly on the other side of 0)** |" in text
    )
    assert (
        "- the base is far from solving level 1: base accuracy at level 1 = 0.4 (needs < 0.5; "
        "mean of 3 seeds) → holds"
    ) in lines
    # detectable with 80% power at the check's 97.5%: (6.205347 + 1.060660) x 0.02 / sqrt(3)
    # = 8.39 points; the spread between seeds is the sd of d, 2 points. Eval noise of a seed's
    # difference, k = 400: sum over q1-q4 of p(1-p)/399 for new and grpo, / 4^2; at seed 0
    # (new 0.6, 0.3; grpo 0.5, 0.2) 2 x (0.24 + 0.25 + 0.21 + 0.16) / 399 / 16 = 0.00026942,
    # at seeds 1 and 2 0.00027043 and 0.00027093: root mean square 0.016439, 1.6 points.
    assert (
        "| new − grpo overall | 5.0 pts | 8.4 pts | 2.0 pts | 1.6 pts | 3 | "
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
        (0.12, 0.12 - 0.071653, 0.12 + 0.071653), abs=1e-6
    )
    assert (check["n"], check["outcome"], check["text"]) == (3, "reproduced", NEW_GRPO)
    assert check["detectable"] == pytest.approx(0.0839, abs=1e-4)
    assert check["eval_noise"] == pytest.approx(0.016439, abs=1e-5)
    assert check["confidence"] == pytest.approx(0.975) and check["noise_floored"] is False
    assert first["signal"] == {
        "new": None,
        "grpo": None,
    }  # no frac_reward_zero_std in these train.csv
    assert summary["movable_levels"] == [1, 2]
    assert summary["base_accuracy"] == {"1": pytest.approx(0.4), "2": pytest.approx(0.1)}
    assert check["seed_spread"] == pytest.approx(0.02)
    assert [c["outcome"] for c in second["checks"]] == ["inconclusive", "contradicted"]
    assert second["checks"][0]["seeds_to_decide"] == 5
    assert second["checks"][0]["level"] is None


def test_a_missing_cell_is_listed_and_left_out(tmp_path):
    study_dir = make_study(tmp_path)
    (study_dir / "cells" / "new-2.json").unlink()
    shutil.rmtree(study_dir / "cells" / "new-2")
    text = write_report(study_dir, tmp_path / "reports").read_text()
    assert "5 / 6 cells done" in text
    assert "Missing: `new-2`." in text
    # d = 0.10, 0.12: mean 0.11, sd 0.014142. The table of differences: half width
    # t(0.975, 1) = 12.7062 x 0.01 -> [-1.7, +23.7]. The check: the evaluation's noise over
    # seeds 0 and 1, sqrt((0.00026942 + 0.00027043) / 2) = 0.016430, is above the seeds' sd
    # and replaces it, at Bonferroni's 97.5%: 25.451700 x 0.016430 / sqrt(2) = 0.29569.
    assert "| new − grpo | +11.0 [-1.7, +23.7] | +11.0 [-1.7, +23.7] |" in text
    assert (
        f"new − grpo overall: +11.0 [-18.6, +40.6] pts ({BETTER} 5.0 pts), 2 seeds, 97.5% "
        "interval (Bonferroni, 2 checks), sd = the evaluation's noise 1.64 pts, above the seeds' "
        "1.41 → inconclusive"
    ) in text
    assert "| new | 2 | 4 | 64 | – | 1:10 | 1:30 |" in text


def test_one_seed_is_inconclusive(tmp_path):
    study_dir = make_study(tmp_path, "solo", seeds=(0,), dynamics=())
    md = write_report(study_dir, tmp_path / "reports")
    text = md.read_text()
    assert (
        f"new − grpo overall: +10.0 (n=1) pts ({BETTER} 5.0 pts), 1 seed, 97.5% interval "
        "(Bonferroni, 2 checks) → inconclusive (1 seed: no interval)"
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
    solo = make_study(tmp_path, "solo", seeds=(0,), dynamics=())
    spec = yaml.safe_load((solo / "study.yaml").read_text())
    spec["claims"][0]["source"] = "grpo-lab"  # an option of ours, not a paper's claim
    (solo / "study.yaml").write_text(yaml.safe_dump(spec))
    write_report(solo, reports)
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
        "| [demo](../reports/demo.md) | new trains to a higher accuracy than grpo | a paper's | "
        f"+3.8 points | {NEW_GRPO}; {NEW_BASE} | **reproduced** | "
        "`dvc repro studies/demo/dvc.yaml` |"
    ) in lines
    rows = [line for line in lines if line.startswith("| [")]
    assert [r.split("]")[0] for r in rows] == ["| [demo", "| [demo", "| [solo", "| [solo"]
    assert [r.split(" | ")[2] for r in rows] == [
        "a paper's", "a paper's", "grpo-lab's own", "a paper's",
    ]  # fmt: skip
    # every term the page uses is defined on it
    terms = lines[lines.index("Terms:") : lines.index("Terms:") + 12]
    for term in ("cell", "base", "upstream", "smallest effect of interest", "learnable band"):
        assert any(line.startswith(f"- **{term}**") or f"**{term}**:" in line for line in terms)


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


def test_agreement_between_a_tiny_world_verdict_and_a_real_models():
    from grpo_core.studies.findings import agreement

    assert agreement("reproduced", "reproduced", True) == "yes"
    assert agreement("no effect", "no effect", True) == "yes"
    assert agreement("reproduced", "contradicted", True) == "no"
    assert agreement("no effect", "reproduced", True) == "no"
    assert agreement("reproduced", "inconclusive", True) == "cannot tell"
    assert agreement("not testable here", "reproduced", True) == "cannot tell"
    # two verdicts that cannot tell agree on nothing
    assert agreement("inconclusive", "inconclusive", True) == "cannot tell"
    assert agreement("reproduced", "inconclusive", False) == "cells to run"


def test_findings_set_a_real_models_verdicts_beside_the_tiny_worlds(tmp_path):
    """`real` asks demo's first claim again (3 seeds, the same cells: the same verdict), and
    `solo` asks demo's second claim on one seed (inconclusive against contradicted)."""
    reports = tmp_path / "reports"
    write_report(make_study(tmp_path), reports)
    for name, seeds, claim, tiny in (
        ("real", (0, 1, 2), 0, "demo/new-beats-grpo"),
        ("solo", (0,), 1, "demo/new-moves-less"),
        ("pending", (0,), 0, "demo/new-beats-grpo"),
    ):
        study_dir = make_study(tmp_path, name, seeds=seeds, dynamics=())
        spec = yaml.safe_load((study_dir / "study.yaml").read_text())
        spec["claims"][claim]["tiny_world"] = tiny
        spec["claims"][claim]["transfer"] = f"why, read from {name}'s cells"
        (study_dir / "study.yaml").write_text(yaml.safe_dump(spec))
        if name == "pending":  # a study whose cells have not run
            for folder in ("cells", "base"):
                shutil.rmtree(study_dir / folder)
        write_report(study_dir, reports)
    lines = write_findings(reports, tmp_path / "docs" / "findings.md").read_text().splitlines()
    # a claim with no cell run has no verdict: it waits, outside the counts
    assert lines[4].startswith(
        "8 claims: 2 reproduced, 0 no effect, 2 contradicted, 2 inconclusive, 0 not testable "
        "here, 2 whose cells have not run, over studies demo, pending, real, solo;"
    )
    pending = [line for line in lines if line.startswith("| [pending]")]
    assert [row.split(" | ")[5] for row in pending] == ["cells to run"] * 2
    start = lines.index("## What transfers: the tiny world beside a real model")
    assert lines[start + 4] == "1 cannot tell, 1 cells to run, 1 yes."
    assert lines[start + 6] == "| question | tiny world | real model | agree | why |"
    # the studies in name order: pending, real, solo
    assert lines[start + 8 : start + 11] == [
        (
            "| new trains to a higher accuracy than grpo | [demo](../reports/demo.md) "
            "`new-beats-grpo`: +12.0 [+4.8, +19.2] pts, 3 seeds → reproduced | "
            "[pending](../reports/pending.md) `new-beats-grpo`: no cell run yet | "
            "**cells to run** | why, read from pending's cells |"
        ),
        (
            "| new trains to a higher accuracy than grpo | [demo](../reports/demo.md) "
            "`new-beats-grpo`: +12.0 [+4.8, +19.2] pts, 3 seeds → reproduced | "
            "[real](../reports/real.md) `new-beats-grpo`: +12.0 [+4.8, +19.2] pts, 3 seeds → "
            "reproduced | **yes** | why, read from real's cells |"
        ),
        (
            "| new grows confident in wrong answers and updates the weights less | "
            "[demo](../reports/demo.md) `new-moves-less`: +0.2 [-0.158, +0.558], 3 seeds → "
            "contradicted | [solo](../reports/solo.md) `new-moves-less`: +0.1, 1 seed → "
            "inconclusive | **cannot tell** | why, read from solo's cells |"
        ),
    ]
    # a reference to a claim no report has fails, naming the study file and the claim
    spec = yaml.safe_load((tmp_path / "studies/solo/study.yaml").read_text())
    spec["claims"][1]["tiny_world"] = "demo/no-such-claim"
    (tmp_path / "studies/solo/study.yaml").write_text(yaml.safe_dump(spec))
    write_report(tmp_path / "studies/solo", reports)
    with pytest.raises(InputError, match=r"studies/solo/study.yaml: claim new-moves-less: "
                       r"tiny_world 'demo/no-such-claim' names no claim"):  # fmt: skip
        write_findings(reports, tmp_path / "docs" / "findings.md")
    spec["claims"][1]["tiny_world"] = "no slash"
    with pytest.raises(ValueError, match="tiny_world"):
        Study.model_validate(spec)


def test_findings_show_the_verdicts_before_beside_the_new(tmp_path):
    reports = tmp_path / "reports"
    write_report(make_study(tmp_path), reports)
    (reports / "verdicts-before.json").write_text(
        json.dumps(
            {
                "_rules": "under the old rules",
                "demo/new-beats-grpo": {"verdict": "inconclusive", "why": "more seeds ran."},
                "demo/retired-claim": "reproduced",
            }
        )
    )
    lines = write_findings(reports, tmp_path / "docs" / "findings.md").read_text().splitlines()
    assert (
        "**The verdict before** is each claim's verdict under the rules before the latest change "
        "to them (under the old rules), as this page stated it then."
    ) in lines
    assert (
        "Claims with a verdict before that are no longer claims (retired or replaced; the study "
        "file says why): `demo/retired-claim` (reproduced)."
    ) in lines
    assert (
        "| study | claim | whose | paper's number | ours | verdict | verdict before | rerun |"
    ) in lines
    rows = [line for line in lines if line.startswith("| [")]
    assert rows[0].endswith("| **reproduced** | inconclusive | `dvc repro studies/demo/dvc.yaml` |")
    changes = lines[lines.index("Verdicts that changed, and why:") + 2 :]
    assert changes[0] == "- `demo/new-beats-grpo`: inconclusive → **reproduced**. more seeds ran."
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
    from grpo_core.studies.results import config_difference, replication

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
    # a key added since a cell ran: its absence is the value that does what that cell did
    record("grpo", 1, compact=False)
    assert config_difference(load_results(study_dir), "new", "grpo") is None
    record("grpo", 1, compact=True)
    assert config_difference(load_results(study_dir), "new", "grpo") == (
        "not compared: new-1 and grpo-1 ran with train.compact = False and True, which neither "
        "variant sets (re-run the older cell)"
    )
    # cells that record their machines: the same CPU compares, two CPUs do not
    record("grpo", 1)
    for variant, cpu in (("new", "AMD EPYC"), ("grpo", "AMD EPYC")):
        run = json.loads((study_dir / "cells" / f"{variant}-1" / "run.json").read_text())
        run["machine"] = {"cpu": cpu, "bf16_native": False}
        (study_dir / "cells" / f"{variant}-1" / "run.json").write_text(json.dumps(run))
    assert config_difference(load_results(study_dir), "new", "grpo") is None
    run["machine"]["cpu"] = "Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz"
    (study_dir / "cells" / "grpo-1" / "run.json").write_text(json.dumps(run))
    assert config_difference(load_results(study_dir), "new", "grpo") == (
        "not compared: new-1 and grpo-1 ran on different CPUs (AMD EPYC and Intel(R) Xeon(R) "
        "Platinum 8481C CPU @ 2.70GHz), whose kernels may compute other bits "
        "(benchmarks/results/numerics.md; re-run one on the other's machine)"
    )
    assert replication(load_results(study_dir)).endswith(
        "run on AMD EPYC (1 cell), Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz (1 cell)."
    )


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


def _set_base(study_dir, level_acc: dict[int, float]) -> None:
    """Rewrite every seed's base evaluation with accuracy `level_acc[level]` on each question."""
    for folder in sorted((study_dir / "base").iterdir()):
        if folder.is_dir():
            path = folder / "questions.parquet"
            rows = pq.read_table(path).to_pydict()
            rows["accuracy"] = [
                level_acc.get(lv, a) for lv, a in zip(rows["level"], rows["accuracy"], strict=True)
            ]
            pq.write_table(pa.table(rows), path)


def test_claims_read_only_the_levels_where_something_can_move(tmp_path):
    # The base solves 2% of level 2 (the floor): "all" reads level 1 alone, and a check at
    # level 2 is not testable, and so is its claim.
    study_dir = make_study(tmp_path)
    spec = yaml.safe_load((study_dir / "study.yaml").read_text())
    spec["claims"][0]["checks"][1]["level"] = 2
    spec["preconditions"] = []  # (its bound on level 1 would fail first at 97%, below)
    (study_dir / "study.yaml").write_text(yaml.safe_dump(spec))
    _set_base(study_dir, {2: 0.02})
    results = load_results(study_dir)
    assert results.base_accuracy() == {1: pytest.approx(0.4), 2: pytest.approx(0.02)}
    assert results.movable_levels() == [1]
    write_report(study_dir, tmp_path / "reports")
    summary = json.loads((tmp_path / "reports" / "demo" / "summary.json").read_text())
    first = summary["claims"][0]
    overall, at_two = first["checks"]
    assert overall["text"].startswith("new − grpo at level 1 (where the base solves 5%-95%): +12.0")
    assert overall["outcome"] == "reproduced"
    assert at_two["outcome"] == "not testable here"
    assert at_two["note"] == "the base solves 2.0% at level 2: at the floor, outside 5%-95%"
    # the pinned check does not decide the claim: the other does, alone, at 95% (no Bonferroni)
    assert "Bonferroni" not in overall["text"] and overall["confidence"] == 0.95
    assert (first["verdict"], first["note"]) == ("reproduced", f"not read: {at_two['note']}")
    # At 97% on level 1 too, nothing can move anywhere: "all" is not testable either.
    _set_base(study_dir, {1: 0.97})
    write_report(study_dir, tmp_path / "reports")
    summary = json.loads((tmp_path / "reports" / "demo" / "summary.json").read_text())
    assert summary["movable_levels"] == []
    first = summary["claims"][0]
    overall = first["checks"][0]
    assert overall["note"] == (
        "every level at the floor or the ceiling (the base solves 97.0% at level 1, 2.0% at "
        "level 2; outside 5%-95%)"
    )
    # every check pinned: the claim is not testable
    assert (first["verdict"], first["note"]) == ("not testable here", overall["note"])


def test_a_claim_on_an_arm_that_barely_trains_is_not_testable(tmp_path):
    # new's groups have reward spread at 3% of its steps' groups on average (frac_reward_zero_std
    # 0.96 and 0.98: mean 0.97), grpo's at 60%: new barely trains.
    study_dir = make_study(tmp_path)
    spec = yaml.safe_load((study_dir / "study.yaml").read_text())
    spec["claims"].append(
        {
            "id": "new-is-worse",
            "claim": "new, which barely trains, does worse than grpo",
            "paper": "-",
            "checks": [
                {"variant": "new", "baseline": "grpo", "expect": "worse", "effect": 0.05},
            ],
        }
    )
    (study_dir / "study.yaml").write_text(yaml.safe_dump(spec))
    for seed in (0, 1, 2):
        for variant, zero_std in (("new", (0.96, 0.98)), ("grpo", (0.4, 0.4))):
            (study_dir / "cells" / f"{variant}-{seed}" / "train.csv").write_text(
                "step,reward,frac_reward_zero_std\n"
                + "".join(f"{i},0.5,{z}\n" for i, z in enumerate(zero_std))
            )
    md = write_report(study_dir, tmp_path / "reports")
    summary = json.loads((tmp_path / "reports" / "demo" / "summary.json").read_text())
    first = summary["claims"][0]
    assert first["signal"] == {"new": pytest.approx(0.03), "grpo": pytest.approx(0.6)}
    assert (first["verdict"], first["note"]) == (
        "not testable here",
        "new barely trains: 3.0% of its groups have reward spread (needs 5%)",
    )
    assert first["checks"][0]["outcome"] == "reproduced"  # the check itself is still shown
    # new is also the variant of a check that expects better in the second claim: refused too
    assert summary["claims"][1]["verdict"] == "not testable here"
    # a claim that new does worse may rest on its not training: judged, and wrong here
    third = summary["claims"][2]
    assert third["signal"] == {"new": pytest.approx(0.03), "grpo": pytest.approx(0.6)}
    assert third["verdict"] == "contradicted"
    assert "| new 3%, grpo 60% | **not testable here (new barely trains" in md.read_text()


def test_the_capacity_boundary_counts_only_arms_that_train_the_level(tmp_path, monkeypatch):
    """An arm that never trains level 2 is not counted there; where the base sits at the floor
    (2% at level 2) the boundary is not testable, and so is the verdict over the arms."""
    from grpo_core.studies import findings

    monkeypatch.setattr(findings, "BOUNDARY", ((1, "better", 0.05), (2, "equal", 0.02)))
    reports = tmp_path / "reports"
    for name, levels in (("narrow", [1]), ("floor", [1, 2])):
        study_dir = make_study(tmp_path, name)
        spec = yaml.safe_load((study_dir / "study.yaml").read_text())
        spec["grpo_arm"] = "new"
        spec["params"] = {"train.levels": levels}
        (study_dir / "study.yaml").write_text(yaml.safe_dump(spec))
        if name == "floor":
            _set_base(study_dir, {2: 0.02})
        write_report(study_dir, reports)
    assert json.loads((reports / "narrow" / "summary.json").read_text())["grpo_arm"][
        "train_levels"
    ] == [1]
    lines = write_findings(reports, tmp_path / "docs" / "findings.md").read_text().splitlines()
    rows = {line.split("]")[0][3:]: line for line in lines if "`train.levels" in line}
    assert rows["narrow"].endswith("| – | not counted: does not train level 2 |")
    # new - base at level 2 with the base at 0.02: 0.18 + d, +30.0 [+25.0, +35.0]
    assert rows["floor"].endswith(
        "| +30.0 [+25.0, +35.0] | not testable here (the base solves 2.0%: at the floor) |"
    )
    assert (
        "Over every study's GRPO arm: **not testable here (the base solves 2.0%: at the floor)**."
        in lines
    )


def test_a_study_states_its_own_band(tmp_path):
    # The base solves 2% of level 2, below the default band; a study whose base is held down by
    # something every arm learns states band [0, 0.95], and level 2 is read again.
    study_dir = make_study(tmp_path)
    spec = yaml.safe_load((study_dir / "study.yaml").read_text())
    spec["claims"][0]["checks"][1]["level"] = 2
    spec["band"] = [0.0, 0.95]
    (study_dir / "study.yaml").write_text(yaml.safe_dump(spec))
    _set_base(study_dir, {2: 0.02})
    assert load_results(study_dir).movable_levels() == [1, 2]
    md = write_report(study_dir, tmp_path / "reports")
    summary = json.loads((tmp_path / "reports" / "demo" / "summary.json").read_text())
    assert summary["band"] == [0.0, 0.95]
    assert [c["outcome"] for c in summary["claims"][0]["checks"]] == ["reproduced"] * 2
    assert "it reads the levels where the base solves 0%-95% (study.yaml `band`)" in md.read_text()
    for bad in ([0.5, 0.5], [-0.1, 0.9], [0.1, 1.2]):
        spec["band"] = bad
        with pytest.raises(ValueError, match="band must be"):
            Study.model_validate(spec)


def _completions(folder, rows: list[tuple], form: bool) -> None:
    """completions.parquet in `folder`: (id, level, decoding, text, reward) rows; with `form`
    the answer form as the cell stage writes it, without it as cells written before it."""
    table = [
        {"id": q, "source": "arith", "level": lv, "decoding": d, "sample": 0, "completion": t,
         "reward": r, "length": 5, "truncated": False}
        for q, lv, d, t, r in rows
    ]  # fmt: skip
    if form:
        for row in table:
            row["form"] = "other" if row["completion"].startswith("pays") else "boxed"
    pq.write_table(pa.Table.from_pylist(table), folder / "completions.parquet")


def test_the_report_tallies_rewarded_completions_by_answer_form(tmp_path):
    from grpo_core.studies import audit

    study_dir = make_study(tmp_path, seeds=(0,))
    base = study_dir / "base/0"
    # the base's cell predates the form column: read from the text, the domain from its
    # questions (math here)
    questions = pq.read_table(base / "questions.parquet")
    questions = questions.set_column(2, "domain", pa.array(["math"] * questions.num_rows))
    pq.write_table(questions, base / "questions.parquet")
    _completions(
        base,
        [
            ("q1", 1, "sampled", "3+4=7\n\\boxed{7}", 1.0),
            ("q1", 1, "sampled", "The answer is 7.", 1.0),
            ("q1", 1, "sampled", "I think 8", 0.0),
            ("q2", 1, "sampled", "5+2=7\n\\boxed{7}", 1.0),
            ("q1", 1, "greedy", "The answer is 7.", 1.0),  # left out: avg@k is the sampled
        ],
        form=False,
    )
    # a reward that pays what no verifier reads shows as `other`
    _completions(
        study_dir / "cells/new-0",
        [("q1", 1, "sampled", "pays 7", 1.0), ("q1", 1, "sampled", "\\boxed{7}", 0.0)],
        form=True,
    )
    results = load_results(study_dir)
    head, rows = audit.form_table(results)
    assert head == ["arm", "level", "completions", "rewarded", "rewarded: boxed",
                    "rewarded: stated", "rewarded: other"]  # fmt: skip
    assert rows == [
        ["base", "1", "4", "75.0%", "67%", "33%", "0%"],
        ["new", "1", "2", "50.0%", "0%", "0%", "100%"],
    ]  # grpo's cells keep no completions: no rows
    shapes = audit.common_shapes(results, top=2)
    assert shapes[0] == ["base", "`#+#=#⏎\\boxed{#}`", "2 (67%)", "`3+4=7⏎\\boxed{7}`"]
    assert shapes[1] == ["base", "`The answer is #.`", "1 (33%)", "`The answer is 7.`"]
    assert shapes[2] == ["new", "`pays #`", "1 (100%)", "`pays 7`"]
    report = write_report(study_dir, tmp_path / "reports").read_text()
    assert "## What the policies wrote" in report and "| new | 1 | 2 | 50.0% |" in report
