"""Studies (grpo_core/studies, stages/study_cell.py): the study files, their dvc.yaml, and a
small study run through DVC in a temporary git repo: every cell cached, a new seed runs only
its cells, a killed study resumes, a teammate's clone recomputes nothing."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml
from pydantic import ValidationError

from grpo_core.config.core import read_yaml
from grpo_core.studies import dvcfile
from grpo_core.studies.spec import Study, StudyError, cell_params, load_study

ROOT = Path(__file__).resolve().parents[1]
STUDIES = sorted(p.parent.name for p in ROOT.glob("studies/*/study.yaml"))


def test_the_three_studies_exist_and_every_cell_has_valid_params():
    assert {"difficulty", "codapo", "offcontext"} <= set(STUDIES)
    raw = read_yaml(ROOT / "params.yaml")
    for name in STUDIES:
        study = load_study(ROOT / "studies" / name)
        assert len(study.seeds) >= 3, name
        for variant, seed in study.cells():
            params = cell_params(raw, study, variant, seed, name)
            assert params["train"]["seed"] == seed and params["eval"]["seed"] == seed


@pytest.mark.parametrize("name", STUDIES)
def test_every_study_dvc_yaml_is_its_template(name):
    """dvc.yaml is generated: editing a module a study stage runs changes its deps, and
    `python -m stages.study_report init NAME` rewrites it."""
    study = load_study(ROOT / "studies" / name)
    written = (ROOT / "studies" / name / "dvc.yaml").read_text()
    assert written == dvcfile.render(name, study, ROOT), (
        f"studies/{name}/dvc.yaml is stale: python -m stages.study_report init {name}"
    )


def test_the_seed_bases_dvc_yaml_covers_every_per_seed_studys_seeds():
    """studies/seed_bases/dvc.yaml is generated too, over the seeds of every study with
    `bases: per_seed` on the main pipeline's data (the tiny-world studies: 0-6)."""
    seeds = dvcfile.seed_bases_seeds(ROOT)
    assert seeds == list(range(7))
    written = (ROOT / "studies/seed_bases/dvc.yaml").read_text()
    assert written == dvcfile.render_seed_bases(seeds), "stale: python -m stages.study_report init"


def test_the_code_manifest_is_md5sum_of_the_files_a_command_runs(tmp_path):
    """grpo_core.errors imports nothing of ours: it runs itself and its package's __init__.
    `md5sum -c` checks the manifest's format and every hash, independently of our code."""
    from grpo_core.codedeps import closure, write_manifest

    out = tmp_path / "code.md5"
    write_manifest(out, ["grpo_core.errors"])
    assert [line.split("  ")[1] for line in out.read_text().splitlines()] == [
        "grpo_core/__init__.py",
        "grpo_core/errors.py",
    ]
    write_manifest(out, ["stages.study_cell", "stages.train", "stages.dynamics"])
    files = [line.split("  ")[1] for line in out.read_text().splitlines()]
    assert files == sorted(closure("stages.train") | closure("stages.study_cell")
                           | closure("stages.dynamics"))  # fmt: skip
    checked = subprocess.run(["md5sum", "-c", "--quiet", str(out)], cwd=ROOT, text=True,
                             capture_output=True)  # fmt: skip
    assert checked.returncode == 0, checked.stdout + checked.stderr
    with pytest.raises(SystemExit, match="no module 'grpo_core.nothing'"):
        write_manifest(out, ["grpo_core.nothing"])


def _study(tmp_path: Path, text: str) -> Path:
    (tmp_path / "s").mkdir(parents=True)
    (tmp_path / "s/study.yaml").write_text(text)
    return tmp_path / "s"


GOOD = """
title: t
question: q
seeds: [0, 1]
baseline: a
budget: {rollouts: 1000}
params: {train.prompts_per_step: 10}
variants:
  a: {algo: grpo}
  b: {algo: dapo, train.group_size: 4}
  c: {algo: grpo, train.steps: 3}
"""


def test_cell_params_apply_study_variant_budget_and_seed_in_order(tmp_path):
    study = load_study(_study(tmp_path, GOOD))
    raw = read_yaml(ROOT / "params.yaml")
    a = cell_params(raw, study, "a", 1)
    assert a["algo"] == "grpo" and a["train"]["prompts_per_step"] == 10
    # 1000 rollouts at 10 x 8 a step: 13 steps reach it; the run stops at max_rollouts
    assert a["train"]["steps"] == 13 and a["train"]["max_rollouts"] == 1000
    assert (a["train"]["seed"], a["eval"]["seed"]) == (1, 1)
    assert cell_params(raw, study, "b", 0)["train"]["steps"] == 25  # 10 x 4 a step
    assert cell_params(raw, study, "c", 0)["train"]["steps"] == 3  # the variant's own
    assert raw["train"]["prompts_per_step"] == 64  # params.yaml untouched


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (("a: {algo: grpo}", "a: {algo: grpo, seed: 3}"), "'seed' cannot be overridden"),
        (("a: {algo: grpo}", "a: {algo: grpo, data.levels: [1]}"), "set it in the study's"),
        (("baseline: a", "baseline: zz"), "baseline: 'zz' is not a variant"),
        (("  c: {algo", "  C-1: {algo"), "variant name 'C-1'"),
        (("budget: {rollouts: 1000}", "budget: {}"), "exactly one of budget.steps"),
        (("seeds: [0, 1]", "seeds: [0, 0]"), "seeds must be distinct"),
    ],
)
def test_a_bad_study_file_is_named_with_its_key(tmp_path, edit, message):
    with pytest.raises(StudyError, match="study.yaml") as err:
        load_study(_study(tmp_path, GOOD.replace(*edit)))
    assert message in str(err.value)


def test_a_study_that_sets_data_or_model_builds_its_own_upstream(tmp_path):
    """Its upstream stage prepares the data and trains the base from data/raw; its cells and
    base evaluations read those instead of the main pipeline's."""
    shared = load_study(_study(tmp_path / "shared", GOOD))
    own = load_study(
        _study(tmp_path / "own", GOOD.replace("params: {", "params: {data.domains: [mcq], "))
    )
    assert not shared.own_upstream and own.own_upstream
    stages = yaml.safe_load(dvcfile.render("own", own))["stages"]
    assert (
        "stages/prepare.py" in stages["upstream"]["deps"]
        and "data/raw" in stages["upstream"]["deps"]
    )
    assert {"data", "model"} <= set(stages["upstream"]["params"][0]["params.yaml"])
    for stage in ("base", "cell"):
        assert "models/base" not in stages[stage]["deps"]
        assert {"studies/own/upstream/models", "studies/own/upstream/data"} <= set(
            stages[stage]["deps"]
        )
    # its base is in the DVC cache (portable numerics rebuild it bit for bit), the rest in git
    assert "studies/own/upstream/models" in stages["upstream"]["outs"]
    main = yaml.safe_load(dvcfile.render("shared", shared))["stages"]
    assert (
        "models/base" in main["cell"]["deps"]
        and "stages/prepare.py" not in main["upstream"]["deps"]
    )
    # a base per seed on the main pipeline's data: the shared bases by seed, one stage each
    # (studies/seed_bases/dvc.yaml), then an upstream stage per seed profiles it
    seeded = load_study(_study(tmp_path / "seeded", "bases: per_seed\n" + GOOD))
    stages = yaml.safe_load(dvcfile.render("seeded", seeded))["stages"]
    up, base = "studies/seeded/upstream/${item.seed}", "studies/seed_bases/${item.seed}"
    assert stages["upstream"]["matrix"] == {"seed": "${seeds}"}
    assert stages["upstream"]["cmd"].endswith("upstream studies/seeded ${item.seed}")
    assert base in stages["upstream"]["deps"] and "stages/base.py" not in stages["upstream"]["deps"]
    assert stages["upstream"]["outs"] == [{up: {"cache": False}}]
    assert {base, "data/prepared/eval.parquet"} <= set(stages["base"]["deps"])
    assert {base, up, "data/prepared/train.parquet"} <= set(stages["cell"]["deps"])
    assert "models/base" not in stages["base"]["deps"] + stages["cell"]["deps"]
    bases = yaml.safe_load(dvcfile.render_seed_bases([0, 3]))["stages"]["base"]
    assert bases["matrix"] == {"seed": [0, 3]} and bases["outs"] == [base]
    assert "stages/base.py" in bases["deps"] and "model" in bases["params"][0]["params.yaml"]


def test_a_study_of_a_real_model_caches_its_base_and_declares_its_plots(tmp_path):
    """A study whose params name a real model keeps that base (hundreds of MB) in the DVC
    cache and the rest of its upstream in git; the step metrics it lists in `plots` become
    DVC plots over the train.csv of every cell that has run, paths relative to the study's
    dvc.yaml (a cell not yet run would be a missing file in every `dvc plots show`)."""
    real = load_study(
        _study(
            tmp_path,
            GOOD.replace("params: {", "params: {model.name: pypi:x/y.gguf, ").replace(
                "title:", "plots: [reward, rewards/format/mean]\ntitle:"
            ),
        )
    )
    assert real.real_model
    spec = yaml.safe_load(dvcfile.render("real", real, tmp_path))
    up = "studies/real/upstream"
    assert spec["stages"]["upstream"]["outs"] == [
        {f"{up}/data": {"cache": False}},
        {f"{up}/profile.parquet": {"cache": False}},
        {f"{up}/guides.parquet": {"cache": False}},
        f"{up}/models",
    ]
    for stage in ("base", "cell"):
        assert f"{up}/models" in spec["stages"][stage]["deps"]
        assert up not in spec["stages"][stage]["deps"]
    assert "plots" not in spec  # no cell has run
    cells = [f"{v}-{s}" for v in real.variants for s in real.seeds]
    for cell in cells[:2]:
        (tmp_path / "studies/real/cells" / cell).mkdir(parents=True)
        (tmp_path / "studies/real/cells" / cell / "train.csv").write_text("step,reward\n")
    spec = yaml.safe_load(dvcfile.render("real", real, tmp_path))
    assert spec["plots"][1] == {
        "real: rewards/format/mean": {
            "x": "step",
            "y": {f"cells/{c}/train.csv": "rewards/format/mean" for c in cells[:2]},
            "title": "real: rewards/format/mean (a line per cell)",
            "template": "series",
        }
    }
    tiny = load_study(
        _study(tmp_path / "tiny", GOOD.replace("params: {", "params: {model.chat: true, "))
    )
    assert tiny.own_upstream and not tiny.real_model
    assert "plots" not in yaml.safe_load(dvcfile.render("tiny", tiny, tmp_path / "tiny"))


def test_a_bad_override_is_named_with_the_variant_and_the_key(tmp_path):
    study = load_study(_study(tmp_path, GOOD.replace("train.group_size: 4", "train.grup: 4")))
    with pytest.raises(StudyError, match=r"variant b[\s\S]*train.grup: unknown key"):
        cell_params(read_yaml(ROOT / "params.yaml"), study, "b", 0, "s/study.yaml")


# --- a small study through DVC -----------------------------------------------------------------

TINY_STUDY = {
    "title": "tiny",
    "question": "does a run twice as long differ?",
    "seeds": [0],
    "baseline": "short",
    "budget": {"steps": 1},
    "params": {"eval.samples": 2},
    "variants": {"short": {"algo": "grpo"}, "long": {"algo": "grpo", "train.steps": 2}},
    "claims": [
        {
            "id": "longer-is-better",
            "claim": "two steps beat one",
            "paper": "-",
            "checks": [
                {"variant": "long", "baseline": "short", "expect": "better", "effect": 0.02}
            ],
        }
    ],
}


def _ran(done: subprocess.CompletedProcess) -> set[str]:
    text = done.stdout + done.stderr
    names = {line.split("'")[1] for line in text.splitlines() if line.startswith("Running stage '")}
    return {n.removeprefix("studies/tiny/dvc.yaml:") for n in names}


@pytest.fixture(scope="module")
def study_repo(tmp_path_factory):
    from test_pipeline import make_repo  # the pipeline tests' small repo

    repo = make_repo(tmp_path_factory.mktemp("study"))
    (repo / "studies/tiny").mkdir(parents=True)
    (repo / "studies/tiny/study.yaml").write_text(yaml.safe_dump(TINY_STUDY, sort_keys=False))
    dvcfile.write("tiny", repo)
    sh(repo, "git", "add", "-A")
    sh(repo, "git", "commit", "-qm", "tiny study")
    return repo


def sh(repo, *cmd, check=True):
    from test_pipeline import sh as _sh

    return _sh(repo, *cmd, check=check)


def _seeds(repo: Path, seeds: list[int]) -> None:
    path = repo / "studies/tiny/study.yaml"
    study = yaml.safe_load(path.read_text())
    study["seeds"] = seeds
    path.write_text(yaml.safe_dump(study, sort_keys=False))


pipeline = pytest.mark.pipeline


@pipeline
def test_a_study_runs_its_cells_through_dvc_and_reports(study_repo):
    repo = study_repo
    done = sh(repo, "dvc", "repro", "studies/tiny/dvc.yaml")
    assert {"code", "upstream", "base@0", "cell@short-0", "cell@long-0", "report"} <= _ran(done)
    assert "study tiny: cell" in done.stderr and "left" in done.stderr  # the progress line
    cells = repo / "studies/tiny/cells"
    short, long_ = (json.loads((cells / f"{k}.json").read_text()) for k in ("short-0", "long-0"))
    assert (short["steps"], long_["steps"]) == (1, 2)
    assert long_["rollouts"] == 2 * short["rollouts"] == 2 * 4 * 4  # 4 prompts x G 4 a step
    for key in ("short-0", "long-0"):
        assert (cells / key / "questions.parquet").exists() and (cells / key / "train.csv").exists()
        assert (cells / key / "dynamics/confidence.csv").exists()
        # what an auditor reads: each evaluation completion with the form of its answer, and
        # the rollout log, a row per question per step
        comps = pq.read_table(cells / key / "completions.parquet").to_pylist()
        assert {c["form"] for c in comps} <= {"boxed", "stated", "program", "other"}
        steps = pq.read_table(cells / key / "rollouts.parquet").column("step").to_pylist()
        assert len(steps) == 4 * len(set(steps)) == 4 * (1 if key == "short-0" else 2)
    assert not (repo / "studies/tiny/.work/short-0").exists()  # the workspace is gone
    # what the cell records of how it was made: every resolved param, the code's commit, the
    # machine, and the base model and eval set it ran on, by content
    run = json.loads((cells / "long-0/run.json").read_text())
    head = sh(repo, "git", "rev-parse", "HEAD").stdout.strip()
    assert run["git"] == {"commit": head, "changed": []}
    assert run["params"]["train"]["steps"] == 2 and run["params"]["numerics"] == "portable"
    assert run["params"]["eval"]["max_new_tokens"] > 0  # a default filled in, not only overrides
    from grpo_core.io import digest

    assert run["provenance"] == {
        "base": digest(repo / "models/base"),
        "eval_set": digest(repo / "data/prepared/eval.parquet"),
    }
    from grpo_core.models.precision import bf16_is_native, cpu_name

    assert run["machine"] == {"cpu": cpu_name(), "bf16_native": bf16_is_native()}
    shown = sh(repo, "dvc", "metrics", "show").stdout
    assert "studies/tiny/cells/short-0.json" in shown and "studies/tiny/cells/long-0.json" in shown
    report = (repo / "reports/tiny.md").read_text()
    assert "longer-is-better" in report and "inconclusive" in report  # one seed: no interval
    # the results are in git, not in the DVC cache
    status = sh(repo, "git", "status", "--porcelain", "-uall").stdout
    assert "studies/tiny/cells/" in status and "reports/" in status
    assert "studies/tiny/upstream/guides.parquet" in status  # in git too: no cache to pull
    assert "studies/tiny/code.md5" in status
    sh(repo, "git", "add", "-A")
    sh(repo, "git", "commit", "-qm", "study seed 0")
    again = sh(repo, "dvc", "repro", "studies/tiny/dvc.yaml")
    assert _ran(again) == set()


@pipeline
def test_a_cell_is_reproduced_before_its_lock_is_recorded(study_repo):
    """`stages.study_reproduce` re-runs a committed cell from HEAD's code in a worktree: the
    same bits pass; a committed number no code produced fails, names the file and the
    difference, and records no lock; a cell whose inputs moved is refused, not re-run."""
    repo = study_repo
    if not (repo / "studies/tiny/cells/short-0.json").exists():
        sh(repo, "dvc", "repro", "studies/tiny/dvc.yaml")
        sh(repo, "git", "add", "-A")
        sh(repo, "git", "commit", "-qm", "study seed 0")
    cmd = [sys.executable, "-m", "stages.study_reproduce", "studies/tiny", "short-0"]
    done = sh(repo, *cmd)
    assert "studies/tiny/dvc.yaml:cell@short-0: reproduced:" in done.stdout
    assert "largest difference" not in done.stdout  # bit for bit, wall time aside
    assert "reproduce" not in sh(repo, "git", "worktree", "list").stdout  # cleaned up

    summary = repo / "studies/tiny/cells/short-0.json"
    original = summary.read_text()
    forged = json.loads(original)
    forged["accuracy"] += 0.01
    summary.write_text(json.dumps(forged))
    sh(repo, "git", "commit", "-qam", "a number no code produced")
    lock = (repo / "studies/tiny/dvc.lock").read_text()
    done = sh(repo, *cmd, "--commit", check=False)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "NOT reproduced" in done.stdout
    assert "FAIL studies/tiny/cells/short-0.json: 0.01 at accuracy" in done.stdout
    assert "no lock recorded" in done.stderr
    assert (repo / "studies/tiny/dvc.lock").read_text() == lock
    summary.write_text(original)
    sh(repo, "git", "commit", "-qam", "back")

    weights = repo / "models/base/grpo_lab.json"
    saved = weights.read_text()
    weights.write_text(saved.replace("{", '{"edited": 1, ', 1))  # another base
    try:
        done = sh(repo, *cmd, check=False)
        assert done.returncode == 2
        assert "not the ones it was made from: models/base (modified)" in done.stderr
    finally:
        weights.write_text(saved)


@pipeline
def test_the_learning_rate_probe_reads_the_cells_rate_and_trains_another(study_repo, tmp_path):
    """`benchmarks.lr_probe` on the study's 2-step cell: its own rate read from the cell's
    step metrics (no training), another trained in a scratch workspace that is then removed;
    the held-out evaluation after the last step is in both."""
    from benchmarks.lr_probe import summarize

    repo = study_repo
    cell = repo / "studies/tiny/cells/long-0"
    own = json.loads((cell / "run.json").read_text())["resolved"]["train"]["lr"]
    out = tmp_path / "lr.md"
    probe = ["python", "-m", "benchmarks.lr_probe", "studies/tiny", "--variant", "long"]
    probe += ["--seed", "0", "--steps", "2", "--lrs", f"{own:g}", "3e-3", "--out", str(out)]
    sh(repo, "env", f"PYTHONPATH={ROOT}", *probe)
    result = json.loads(out.with_suffix(".json").read_text())["results"]
    assert result[f"{own:g}"]["source"].endswith("cells/long-0/train.csv")
    assert result[f"{own:g}"] == summarize((cell / "train.csv").read_text(), 2) | {
        "source": result[f"{own:g}"]["source"],
        "wall_s": None,
    }
    trained = result["3e-3"]
    assert trained["source"] == "trained" and trained["wall_s"] > 0
    assert [s for s, _ in trained["heldout"]] == [2]  # after the last step
    assert not any((repo / "studies/tiny/.work").glob("lr-*"))
    assert "| 3e-3 |" in out.read_text() and "this probe" in out.read_text()
    # --extend keeps what the file holds: nothing trains again
    sh(repo, "env", f"PYTHONPATH={ROOT}", *probe, "--extend")
    # the same results, the trained rate's wall time included: it was not trained again
    assert json.loads(out.with_suffix(".json").read_text())["results"] == result
    other = [*probe[:6], "--seed", "1", *probe[8:], "--extend"]
    refused = sh(repo, "env", f"PYTHONPATH={ROOT}", *other, check=False)
    assert refused.returncode and "not this cell: --extend refused" in refused.stderr
    # --set: another setting at the cell's own rate trains (the cell's metrics are not its)
    changed = tmp_path / "set.md"
    with_set = [*probe[:12], "--set", "train.max_new_tokens=12", "--out", str(changed)]
    sh(repo, "env", f"PYTHONPATH={ROOT}", *with_set)
    got = json.loads(changed.with_suffix(".json").read_text())
    assert got["set"] == {"train.max_new_tokens": 12}
    assert got["results"][f"{own:g}"]["source"] == "trained"
    assert got["results"][f"{own:g}"]["length_last"] <= 12
    assert "--set train.max_new_tokens=12" in changed.read_text()
    bad = sh(repo, "env", f"PYTHONPATH={ROOT}", *probe[:12], "--set", "train.nope=1", check=False)
    assert bad.returncode and "nope" in bad.stderr


def test_the_learning_rate_probe_halves_the_steps_by_hand():
    """`summarize` on a 4-step table: reward halves (0.1, 0.3) and (0.5, 0.7), held-out
    after steps 2 and 4, the last step's length and truncated share."""
    from benchmarks.lr_probe import summarize

    csv_text = "step,rewards/correct/mean,heldout/accuracy,grad_norm,completions/mean_length,"
    csv_text += "completions/clipped_ratio\n"
    csv_text += "0,0.1,,1.0,50,0.5\n1,0.3,0.25,3.0,40,0.25\n2,0.5,,1.0,30,0.125\n"
    csv_text += "3,0.7,0.5,3.0,20,0.0\n4,0.9,0.75,1.0,10,0.0\n"
    got = summarize(csv_text, 4)
    assert got == {
        "reward_first_half": 0.2,
        "reward_second_half": 0.6,
        "heldout": [[2, 0.25], [4, 0.5]],
        "grad_norm_mean": 2.0,
        "length_last": 20.0,
        "clipped_last": 0.0,
    }
    with pytest.raises(ValueError, match="2 steps of metrics, the probe needs 3"):
        summarize("step,reward\n0,0.5\n1,0.5\n", 3)
    with pytest.raises(ValueError, match="--steps 1"):
        summarize(csv_text, 1)


@pipeline
def test_adding_a_seed_runs_only_that_seeds_cells(study_repo):
    repo = study_repo
    _seeds(repo, [0, 1])
    done = sh(repo, "dvc", "repro", "studies/tiny/dvc.yaml")
    assert _ran(done) == {"base@1", "cell@short-1", "cell@long-1", "report"}
    sh(repo, "git", "add", "-A")
    sh(repo, "git", "commit", "-qm", "seed 1")


@pipeline
def test_a_killed_study_resumes_at_its_first_unfinished_cell(study_repo):
    repo = study_repo
    _seeds(repo, [0, 1, 2])
    from test_pipeline import _env

    proc = subprocess.Popen(
        ["dvc", "repro", "studies/tiny/dvc.yaml"],
        cwd=repo,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    cells, work = repo / "studies/tiny/cells", repo / "studies/tiny/.work"
    deadline = time.time() + 300

    def one_done_and_the_other_started() -> bool:
        return any(
            (cells / f"{k}-2.json").exists() and (work / f"{other}-2").exists()
            for k, other in (("short", "long"), ("long", "short"))
        )

    while not one_done_and_the_other_started():
        assert proc.poll() is None and time.time() < deadline, "seed 2 did not get that far"
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    finished = {k for k in ("short", "long") if (cells / f"{k}-2.json").exists()}
    assert len(finished) == 1  # killed during the other cell, its workspace left behind
    done = sh(repo, "dvc", "repro", "studies/tiny/dvc.yaml")
    ran = _ran(done)
    assert {f"cell@{k}-2" for k in ("short", "long") if k not in finished} <= ran
    assert not {f"cell@{k}-2" for k in finished} & ran
    assert not {"cell@short-0", "cell@long-1", "upstream"} & ran
    sh(repo, "git", "add", "-A")
    sh(repo, "git", "commit", "-qm", "seed 2")


@pipeline
def test_a_teammate_gets_the_study_without_recomputing(study_repo, tmp_path):
    repo = study_repo
    upstream, remote, clone = tmp_path / "up.git", tmp_path / "remote", tmp_path / "mate"
    sh(tmp_path, "git", "init", "-q", "--bare", str(upstream))
    sh(repo, "git", "remote", "add", "study-origin", str(upstream))
    sh(repo, "dvc", "remote", "add", "-f", "-d", "study-shared", str(remote))
    sh(repo, "dvc", "repro")  # the main pipeline, whole, as a teammate would have pushed it
    sh(repo, "git", "add", "-A")
    sh(repo, "git", "commit", "-qm", "main pipeline and remote")
    sh(repo, "git", "push", "-q", "study-origin", "HEAD:main")
    sh(repo, "dvc", "push")  # the main pipeline's outputs: the study is all in git
    sh(tmp_path, "git", "clone", "-q", "-b", "main", str(upstream), str(clone))
    pulled = sh(clone, "dvc", "pull")  # exits 0: nothing of the study is missing
    assert "Checkout failed" not in pulled.stdout + pulled.stderr
    assert (clone / "models/base/model.safetensors").exists()
    assert sh(clone, "dvc", "status").stdout.strip() == "Data and pipelines are up to date."
    done = sh(clone, "dvc", "repro", "studies/tiny/dvc.yaml")
    assert _ran(done) == set()
    assert (clone / "reports/tiny.md").read_text() == (repo / "reports/tiny.md").read_text()
    shown = sh(clone, "dvc", "metrics", "show").stdout
    assert "studies/tiny/cells/long-0.json" in shown


@pipeline
def test_a_study_with_its_own_data_and_base_builds_them_in_its_upstream(study_repo):
    """`data` in a study's params: its upstream prepares the data and trains the base from
    data/raw under the study's params; its cells train from that base."""
    repo = study_repo
    own = {**TINY_STUDY, "params": {"eval.samples": 2, "data.train_per_level": 30}}
    own["variants"] = {"short": {"algo": "grpo"}}
    own["claims"] = []
    (repo / "studies/own").mkdir()
    (repo / "studies/own/study.yaml").write_text(yaml.safe_dump(own, sort_keys=False))
    dvcfile.write("own", repo)
    done = sh(repo, "dvc", "repro", "studies/own/dvc.yaml")
    text = done.stdout + done.stderr
    assert "Running stage 'studies/own/dvc.yaml:cell@short-0'" in text
    assert "Running stage 'base'" not in text  # the main pipeline's base is not touched
    up = repo / "studies/own/upstream"
    import pyarrow.parquet as pq

    assert pq.read_table(up / "data/prepared/train.parquet").num_rows == 30 * 2  # levels 1-2
    assert (up / "models/base/model.safetensors").exists()
    assert json.loads((repo / "studies/own/cells/short-0.json").read_text())["steps"] == 1
    # a clone whose DVC cache lacks the model: stages.study_models rebuilds the model alone,
    # DVC finds it the recorded one, and nothing reruns (the profile is kept, not redone)
    shutil.rmtree(up / "models")
    status = sh(repo, "dvc", "status", "studies/own/dvc.yaml:upstream").stdout
    assert "studies/own/upstream/models" in status
    rebuilt = sh(repo, "python", "-m", "stages.study_models", "studies/own")
    assert rebuilt.stdout.strip().endswith(
        "the recorded model (dvc status lists no changed output)"
    )
    assert (up / "models/base/model.safetensors").exists()
    assert not (repo / "studies/own/.work/models").exists()
    assert _ran(sh(repo, "dvc", "repro", "studies/own/dvc.yaml")) == set()
    # a study on the main pipeline's base has no model of its own to rebuild
    refused = sh(repo, "python", "-m", "stages.study_models", "studies/tiny", check=False)
    assert refused.returncode == 2
    assert "studies/tiny: its cells train from the main pipeline's base" in refused.stderr


@pipeline
def test_a_study_with_a_base_per_seed_trains_one_for_each_seed(study_repo):
    """`bases: per_seed` on the main pipeline's data: studies/seed_bases/ trains the base
    once per seed with model.seed = the seed (shared by every such study); each seed's
    upstream profiles its base, that seed's cells and base evaluation read it, and the report
    says what the seeds vary and how many bases its cells ran on."""
    from grpo_core.io import digest

    repo = study_repo
    spec = {**TINY_STUDY, "seeds": [0, 1], "bases": "per_seed", "claims": []}
    spec["variants"] = {"short": {"algo": "grpo"}}
    (repo / "studies/seeded").mkdir()
    (repo / "studies/seeded/study.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    dvcfile.write("seeded", repo)
    assert (repo / "studies/seed_bases/dvc.yaml").exists()
    done = sh(repo, "dvc", "repro", "studies/seeded/dvc.yaml")
    text = done.stdout + done.stderr
    for stage in ("seed_bases/dvc.yaml:base@0", "seed_bases/dvc.yaml:base@1"):
        assert f"Running stage 'studies/{stage}'" in text
    ran = {n.removeprefix("studies/seeded/dvc.yaml:") for n in _ran(done)}
    assert {"upstream@0", "upstream@1", "base@0", "base@1", "cell@short-0", "cell@short-1"} <= ran
    assert "Running stage 'base'" not in text  # the main pipeline's base is untouched
    seeded = repo / "studies/seed_bases"
    bases = {s: digest(seeded / f"{s}/models/base") for s in (0, 1)}
    assert bases[0] != bases[1]  # another SFT seed, another base
    cells = repo / "studies/seeded/cells"
    for s in (0, 1):
        run = json.loads((cells / f"short-{s}/run.json").read_text())
        assert run["provenance"]["base"] == bases[s]
        assert run["params"]["model"]["seed"] == s
        assert run["provenance"]["eval_set"] == digest(repo / "data/prepared/eval.parquet")
    report = (repo / "reports/seeded.md").read_text()
    assert "each seed trains from its own base" in report
    assert "2 distinct base(s) recorded over 2 seed(s)" in report
    # a clone without the cached bases retrains them: the same bits, so no cell reruns
    sh(repo, "dvc", "repro", "--force", "--single-item", "studies/seed_bases/dvc.yaml:base@1")
    assert digest(seeded / "1/models/base") == bases[1]
    again = sh(repo, "dvc", "repro", "studies/seeded/dvc.yaml")
    assert _ran(again) == set()
    with pytest.raises(ValidationError, match="model.seed"):
        Study.model_validate({**spec, "params": {"model.seed": 3}})


@pipeline
def test_the_cells_go_stale_through_the_code_manifest_exactly_when_their_code_changes(study_repo):
    """The cells depend on studies/tiny/code.md5, which the `code` stage writes from the files
    they run: an edit to one of those files changes it; an edit to the report's code does not."""
    repo = study_repo
    trained, reported = repo / "grpo_core/training/run.py", repo / "grpo_core/studies/report.py"
    saved = {p: p.read_text() for p in (trained, reported)}
    manifest = repo / "studies/tiny/code.md5"
    before = manifest.read_text()
    assert "  grpo_core/training/run.py\n" in before
    assert "grpo_core/studies/report.py" not in before
    try:
        reported.write_text(saved[reported] + "\n# an edit\n")
        sh(repo, "dvc", "repro", "studies/tiny/dvc.yaml:code")
        assert manifest.read_text() == before
        trained.write_text(saved[trained] + "\n# an edit\n")
        sh(repo, "dvc", "repro", "studies/tiny/dvc.yaml:code")
        assert manifest.read_text() != before
        status = sh(repo, "dvc", "status", "studies/tiny/dvc.yaml").stdout
        assert "studies/tiny/dvc.yaml:cell@short-0:" in status
        assert "modified:           studies/tiny/code.md5" in status
    finally:
        for path, text in saved.items():
            path.write_text(text)
        sh(repo, "dvc", "repro", "studies/tiny/dvc.yaml:code")
    assert manifest.read_text() == before
