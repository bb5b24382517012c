"""`python -m stages.compare`: experiments side by side, held-out accuracy first.

Hand-built records check the table's content (differences computed by hand below), and one real
DVC repository (a three-line stage writing a metrics/eval.json of the real structure, `dvc exp
run` twice) checks the command end to end.

Numbers used by hand: the baseline's policy accuracy is 0.574 (level 1: 0.9, level 2: 0.248),
codapo's 0.551 (0.95, 0.152), dapo's 0.587; the base model's 0.479 (0.85, 0.108). So codapo -
baseline = -2.3 points (levels +5.0, -9.6), dapo - baseline = +1.3, base - baseline = -9.5.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from grpo_core import compare
from grpo_core.compare import Record

ROOT = Path(__file__).resolve().parents[1]
PARAMS = {
    "seed": 0,
    "algo": "grpo",
    "data.domains": ["arith"],
    "data.levels": [1, 2],
    "data.eval_per_level": 300,
    "train.lr": 7e-05,
    "eval.samples": 4,
}


def evaluation(acc: float, l1: float, l2: float, base: tuple = (0.479, 0.85, 0.108)) -> dict:
    """metrics/eval.json in the structure stages/evaluate.py writes."""

    def model(a: float, x: float, y: float) -> dict:
        return {
            "arith": {"accuracy": a, "greedy": a, "pass@4": a, "level1": x, "level2": y},
            "by_domain": {"math": {"accuracy": a}},
        }

    return {"base": model(*base), "policy": model(acc, l1, l2)}


def record(label: str, kind: str = "experiment", created: str = "", **over) -> Record:
    params = {**PARAMS, **over.pop("params", {})}
    rev = "workspace" if kind == "workspace" else label.encode().hex().ljust(40, "0")[:40]
    return Record(label, rev, kind, params, created=created, **over)


BASELINE = record("main", "commit", "2025-01-01", eval=evaluation(0.574, 0.9, 0.248))
CODAPO = record(
    "codapo", created="2025-01-02", params={"algo": "codapo"}, eval=evaluation(0.551, 0.95, 0.152)
)
DAPO = record(
    "dapo",
    created="2025-01-03",
    params={"algo": "dapo", "train.lr": 1e-4},
    eval=evaluation(0.587, 0.9, 0.274),
)


def lines(table: compare.Table) -> list[str]:
    return compare.render(table).splitlines()


def row(text: list[str], label: str) -> list[str]:
    """The cells of the table line that starts with `label`."""
    found = [line for line in text if line.startswith(label + " ")]
    assert len(found) == 1, (label, text)
    return found[0][len(label) :].split()


def test_differences_are_points_against_the_baseline():
    text = lines(compare.build([CODAPO, BASELINE, DAPO], BASELINE))
    assert text[3].split() == ["experiment", "arith", "Δ", "L1", "Δ", "L2", "Δ", "algo", "train.lr"]
    assert row(text, "* main") == ["57.4", "90.0", "24.8", "grpo", "7e-05"]
    assert row(text, "codapo") == [
        "55.1",
        "-2.3",
        "95.0",
        "+5.0",
        "15.2",
        "-9.6",
        "codapo",
        "7e-05",
    ]
    assert row(text, "dapo") == ["58.7", "+1.3", "90.0", "0.0", "27.4", "+2.6", "dapo", "0.0001"]
    # the base model once, its Δ against the baseline's policy: minus the RL gain
    assert row(text, "base model") == ["47.9", "-9.5", "85.0", "-5.0", "10.8", "-14.0"]


def test_delta_rounds_to_one_decimal_without_negative_zero():
    assert compare.delta(0.551, 0.574) == "-2.3"
    assert compare.delta(0.5740001, 0.574) == "0.0"
    assert compare.delta(0.5739999, 0.574) == "0.0"
    assert compare.delta(None, 0.574) == compare.delta(0.5, None) == ""


def test_only_the_params_that_differ_are_shown():
    same = record("same-params", created="2025-01-04", eval=evaluation(0.6, 0.9, 0.3))
    assert compare.changed_params([BASELINE, same]) == []
    assert compare.changed_params([BASELINE, CODAPO, DAPO]) == ["algo", "train.lr"]
    # absent in one row counts as a difference
    extra = record("lora", params={"train.lora.enabled": True}, eval=BASELINE.eval)
    assert compare.changed_params([BASELINE, extra]) == ["train.lora.enabled"]
    text = lines(compare.build([BASELINE, extra], BASELINE))
    assert row(text, "lora")[-1] == "true" and row(text, "* main")[-1] == "—"


def test_rows_run_baseline_then_oldest_first_and_the_workspace_last():
    work = record(
        "workspace", "workspace", params={"algo": "dapo", "train.lr": 1e-4}, eval=DAPO.eval
    )
    older = record("older", "commit", "2024-12-01", eval=BASELINE.eval)
    shown = [r.label for r in compare.order([work, DAPO, older, BASELINE, CODAPO], BASELINE)]
    assert shown == ["main", "older", "codapo", "dapo", "workspace"]
    text = lines(compare.build([work, DAPO, BASELINE, CODAPO], BASELINE))
    labels = [line.split("  ")[0] for line in text[4:9]]
    assert labels == ["base model", "* main", "codapo", "dapo", "workspace (= dapo)"]


def test_one_experiment_name_on_two_commits_gets_two_labels():
    again = record("codapo", created="2025-02-01", eval=evaluation(0.56, 0.95, 0.17))
    again = Record(**{**again.__dict__, "rev": "f" * 40})
    text = lines(compare.build([BASELINE, CODAPO, again], BASELINE))
    assert row(text, f"codapo ({CODAPO.rev[:7]})")[:2] == ["55.1", "-2.3"]
    assert row(text, "codapo (fffffff)")[:2] == ["56.0", "-1.4"]


def with_provenance(rec: Record, base: str, eval_set: str = "e1") -> Record:
    """`rec` whose metrics/eval.json records the hashes of its base model and eval set."""
    prov = {"base": base, "policy": rec.label, "eval_set": eval_set}
    return Record(**{**rec.__dict__, "eval": {**rec.eval, "provenance": prov}})


def test_a_run_on_another_base_shows_no_difference_and_says_why_and_what_to_run():
    """The tiny base is rebuilt per machine: the committed run's base is another machine's,
    and CoDaPO's difference against it would mix the two bases."""
    main = with_provenance(BASELINE, "b-developer")
    here = with_provenance(CODAPO, "b-here")
    same = with_provenance(DAPO, "b-developer")
    text = lines(compare.build([main, here, same], main))
    assert row(text, "codapo [1]") == ["55.1", "95.0", "15.2", "codapo", "7e-05"]  # no Δ
    assert row(text, "dapo")[:2] == ["58.7", "+1.3"]  # the same base: compared
    joined = " ".join(text)
    assert "[1] codapo: no Δ, trained or evaluated on another base model (models/base) " in joined
    assert "(b-here, the baseline's b-developer)" in joined
    assert "dvc exp run --temp -n grpo" in joined and "--baseline grpo" in joined
    assert "a model, data or eval" not in joined
    # against a baseline on its own base, codapo is compared
    grpo_here = with_provenance(Record(**{**BASELINE.__dict__, "label": "grpo"}), "b-here")
    text = lines(compare.build([grpo_here, here], grpo_here))
    assert row(text, "codapo")[:2] == ["55.1", "-2.3"]


def test_another_eval_set_is_named_and_the_same_inputs_blame_an_eval_param():
    main = with_provenance(BASELINE, "b")
    other_set = with_provenance(CODAPO, "b", eval_set="e2")
    text = " ".join(lines(compare.build([main, other_set], main)))
    assert "another eval set (e2, the baseline's e1)" in text
    # the same base and eval set, a different base accuracy: the eval params changed
    resampled = with_provenance(
        record(
            "eval-t",
            params={"eval.samples": 8},
            eval=evaluation(0.57, 0.9, 0.24, base=(0.5, 0.9, 0.1)),
        ),
        "b",
    )
    text = " ".join(lines(compare.build([main, resampled], main)))
    assert "same base model and eval set by their hashes: an eval param changed" in text
    # runs from before the record: the old message, which names the machine as a cause
    old = record("old", eval=evaluation(0.57, 0.9, 0.24, base=(0.5, 0.9, 0.1)))
    text = " ".join(lines(compare.build([BASELINE, old], BASELINE)))
    assert "another machine" in text


def test_a_row_without_eval_shows_a_dash_and_a_footnote():
    queued = record("queued-run", created="2025-01-05", eval=None, note="queued experiment")
    text = lines(compare.build([BASELINE, CODAPO, queued], BASELINE))
    assert row(text, "queued-run [1]")[:3] == ["—", "—", "—"]
    assert "[1] queued-run: —, no metrics/eval.json (queued experiment)" in text
    # with no eval for the baseline there is no difference to show, and no crash
    bare = record("main", "commit", eval=None)
    text = lines(compare.build([bare, CODAPO], bare))
    assert row(text, "codapo")[:3] == ["55.1", "95.0", "15.2"]


def test_a_different_base_model_is_named_in_a_note():
    other = record(
        "bigger-model", params={"model.name": "x"}, eval=evaluation(0.6, 0.9, 0.3, (0.5, 0.9, 0.1))
    )
    text = " ".join(lines(compare.build([BASELINE, CODAPO, other], BASELINE)))
    assert "The base model's accuracy differs in bigger-model" in text and "is main's" in text
    assert "differs" not in " ".join(lines(compare.build([BASELINE, CODAPO], BASELINE)))


def test_several_benchmarks_get_one_column_each():
    both = {
        model: {**values, "math500": {"accuracy": acc}}
        for (model, values), acc in zip(
            evaluation(0.574, 0.9, 0.248).items(), (0.3, 0.32), strict=True
        )
    }
    base = record("main", "commit", eval=both)
    text = lines(compare.build([base, CODAPO], base))
    assert text[3].split()[:5] == ["experiment", "arith", "Δ", "math500", "Δ"]
    assert row(text, "* main")[:2] == ["57.4", "32.0"]
    assert row(text, "codapo")[:3] == ["55.1", "-2.3", "—"]
    assert "math500: size not in params" in " ".join(text)


def test_the_noise_footer_comes_from_the_eval_size():
    # 300 per level x 2 levels x 4 samples = 2400 draws: 1.96 sqrt(2 x 0.25 / 2400) = 2.83 points;
    # a level: 1200 draws, 4.00; samples that always agree: 600 questions, 5.66 (300: 8.00)
    assert compare.noise_points(2400) == pytest.approx(2.8290, abs=1e-3)
    text = " ".join(lines(compare.build([BASELINE, CODAPO], BASELINE)))
    assert "Each row is one training seed" in text
    assert "under ±2.8 points (±4.0 per level) are noise" in text
    assert "600 questions (300 per level) × 4 samples of arith" in text
    assert "±5.7 (±8.0) if a question's 4 samples always agree" in text


def test_every_line_fits_120_columns_however_wide_the_content():
    sources = ["arith", "mcq", "code", "math500", "aime24", "gpqa_diamond", "humaneval", "amc23"]
    wide = {m: {s: {"accuracy": 0.123} for s in sources} for m in ("base", "policy")}
    params = {f"train.codapo.some_long_option_{i}": i for i in range(8)}
    long = "a-very-long-experiment-name-that-goes-on-and-on"
    rows = [
        record("main", "commit", eval=wide, train={"steps": 40, "rollouts": 20480}),
        record(long, params=params, eval=wide, train={"steps": 40, "rollouts": 1_234_567}),
    ]
    out = compare.render(compare.build(rows, rows[0]))
    assert max(map(len, out.splitlines())) <= 120
    assert "…" not in out and "\x1b" not in out
    for text in ("gpqa_diamond", "amc23", "1.2M", "20.5k", "train.codapo.some_long_option_7=7"):
        assert text in out.replace("\n    ", " ")  # the params wrap onto indented lines
    label_lines = [line[:24].strip() for line in out.splitlines() if line.startswith("a-very")]
    folded = [line.strip() for line in out.splitlines() if line.startswith("ame-")]
    assert label_lines[0] + folded[0] == long  # folded, not cut


def test_records_read_dvc_exp_show_json():
    def state(rev, name, algo, metrics):
        return {
            "rev": rev,
            "name": name,
            "data": {
                "timestamp": "2025-01-01T00:00:00" if rev != "workspace" else None,
                "params": {
                    "params.yaml": {"data": {"algo": algo, "train": {"lr": 7e-05}}},
                    # a study's file, edited in the workspace: not a param of the experiments
                    "studies/format/study.yaml": {"data": {"seeds": [rev[:1]]}},
                },
                "metrics": metrics,
            },
            "error": None,
            "experiments": None,
        }

    ok = {"metrics/eval.json": {"data": evaluation(0.5, 0.6, 0.4)}}
    gone = {"metrics/eval.json": {"error": {"type": "FileNotFoundError", "msg": "[Errno 2]"}}}
    head = state("a" * 40, "main", "grpo", ok)
    head["experiments"] = [
        {"revs": [state("b" * 40, "codapo", "codapo", ok)], "executor": None, "name": "codapo"},
        {"revs": [state("c" * 40, None, "dapo", {})], "executor": {"state": "queued"}},
        # a running experiment's files are still the baseline's: not its results
        {"revs": [state("d" * 40, "live", "dapo", ok)], "executor": {"state": "running"}},
    ]
    rows = compare.records([state("workspace", None, "dapo", gone), head])
    assert [(r.label, r.kind) for r in rows] == [
        ("workspace", "workspace"),
        ("main", "commit"),
        ("codapo", "experiment"),
        ("ccccccc", "experiment"),
        ("live", "experiment"),
    ]
    assert rows[2].params == {"algo": "codapo", "train.lr": 7e-05} and rows[2].parent == "a" * 40
    assert rows[0].eval is None and rows[0].note == "not found"
    assert rows[3].eval is None and rows[3].note == "queued experiment"
    assert rows[4].eval is None and rows[4].note == "running experiment"
    assert compare.find(rows, "codapo") is rows[2] and compare.find(rows, "bbbb") is rows[2]
    assert compare.find(rows, "nope") is None and compare.find(rows, "bbb") is None


# The real thing: a DVC repo whose one stage writes metrics/eval.json from params.yaml.
STAGE = """\
import json, os, yaml
p = yaml.safe_load(open("params.yaml"))
gain = {"grpo": 0.0, "codapo": 0.023}[p["algo"]] + {7e-05: 0.0, 1e-04: -0.012}[p["train"]["lr"]]
def model(levels):
    acc = sum(levels) / len(levels)
    out = {"accuracy": acc, "greedy": acc, **{f"level{i + 1}": x for i, x in enumerate(levels)}}
    return {"arith": out, "by_domain": {"math": {"accuracy": acc}}}
os.makedirs("metrics", exist_ok=True)
evaluation = {"base": model([0.8, 0.2]), "policy": model([0.9 + gain, 0.4 + gain])}
json.dump(evaluation, open("metrics/eval.json", "w"))
json.dump({"steps": 40, "rollouts": 20480, "warnings": []}, open("metrics/train.json", "w"))
"""
DVC_YAML = {
    "stages": {
        "evaluate": {
            "cmd": "python stage.py",
            "deps": ["stage.py"],
            "params": ["seed", "algo", "train", "data", "eval"],
            "metrics": [{"metrics/eval.json": {"cache": False}}, {"metrics/train.json": {}}],
        }
    }
}


def sh(repo: Path, *cmd: str, check: bool = True) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": str(ROOT),
        "DVC_NO_ANALYTICS": "1",
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
    }
    done = subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True)
    if check and done.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} failed:\n{done.stdout}\n{done.stderr}")
    return done


@pytest.mark.pipeline
def test_compare_reads_real_dvc_experiments(tmp_path):
    params = {
        "seed": 0,
        "algo": "grpo",
        "data": {"domains": ["arith"], "levels": [1, 2], "eval_per_level": 300},
        "train": {"lr": 7e-05, "steps": 40},
        "eval": {"samples": 4},
    }
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    (tmp_path / "stage.py").write_text(STAGE)
    (tmp_path / "dvc.yaml").write_text(yaml.safe_dump(DVC_YAML, sort_keys=False))
    sh(tmp_path, "git", "init", "-q", "-b", "main")
    sh(tmp_path, "dvc", "init", "-q")
    sh(tmp_path, "dvc", "repro", "-q")
    sh(tmp_path, "git", "add", "-A")
    sh(tmp_path, "git", "commit", "-qm", "baseline")
    sh(tmp_path, "dvc", "exp", "run", "-q", "-n", "codapo", "-S", "algo=codapo")
    sh(
        tmp_path,
        "dvc",
        "exp",
        "run",
        "-q",
        "-n",
        "lr-down",
        "-S",
        "algo=grpo",
        "-S",
        "train.lr=1e-4",
    )
    compare_cmd = (sys.executable, "-m", "stages.compare")

    out = sh(tmp_path, *compare_cmd).stdout
    text = out.splitlines()
    assert max(map(len, text)) <= 120 and "\x1b" not in out and "…" not in out
    assert text[3].split() == [
        "experiment", "arith", "Δ", "L1", "Δ", "L2", "Δ", "steps", "rollouts", "algo", "train.lr"
    ]  # fmt: skip
    # policy: main (0.9, 0.4) -> 65.0; codapo +2.3 at every level; lr-down -1.2
    assert row(text, "base model") == ["50.0", "-15.0", "80.0", "-10.0", "20.0", "-20.0"]
    assert row(text, "* main") == ["65.0", "90.0", "40.0", "40", "20.5k", "grpo", "7e-05"]
    assert row(text, "codapo")[:6] == ["67.3", "+2.3", "92.3", "+2.3", "42.3", "+2.3"]
    assert row(text, "codapo")[-2:] == ["codapo", "7e-05"]
    assert row(text, "lr-down")[:2] == ["63.8", "-1.2"] and row(text, "lr-down")[-1] == "0.0001"
    assert row(text, "workspace (= lr-down)")[:2] == ["63.8", "-1.2"]  # `exp run` left it there
    assert "±2.8 points (±4.0 per level) are noise" in " ".join(text)

    against = sh(tmp_path, *compare_cmd, "--baseline", "codapo", "lr-down").stdout.splitlines()
    assert row(against, "lr-down")[:2] == ["63.8", "-3.5"]
    assert not any(line.startswith("workspace") for line in against)

    (tmp_path / "metrics/eval.json").unlink()  # the workspace loses its evaluation
    text = sh(tmp_path, *compare_cmd).stdout.splitlines()
    assert row(text, "workspace [1]")[:3] == ["—", "—", "—"]
    assert "[1] workspace: —, no metrics/eval.json (not found)" in text

    bad = sh(tmp_path, *compare_cmd, "--baseline", "nope", check=False)
    assert bad.returncode == 2 and bad.stdout == ""
    assert bad.stderr.startswith("error: --baseline nope: no such experiment or commit (rows: ")
    assert bad.stderr.count("\n") == 1 and "lr-down" in bad.stderr


def test_help_works_outside_a_repository(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "stages.compare", "--help"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0 and "--baseline" in done.stdout
    outside = subprocess.run(
        [sys.executable, "-m", "stages.compare"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
    )
    assert outside.returncode == 2 and outside.stderr.count("\n") == 1
    assert outside.stderr.startswith("error: ")
