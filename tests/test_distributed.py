"""Data-parallel training equals one process: 2 CPU processes over gloo, started by the real
`accelerate launch` with configs/accelerate/ddp_cpu2.yaml (DDP) and with
configs/accelerate/zero2_cpu2.yaml (DeepSpeed ZeRO-2: optimizer state and gradients sharded,
the engine clips and steps), against one process with the same global batch and seed, on a
tiny locally built model.

Tolerance, derived from the computation rather than fit to one machine. Not exact: each
process runs its share of the groups, so the forwards, the gradient sums and the all-reduce
add the same numbers in other batch shapes and orders, which rounds differently in float32
(a relative 2^-24 per addition). Every step metric (loss included) is held within 1e-6
(measured ~1e-8). A weight is the sum of its Adam steps, and Adam divides by sqrt(v): on an
entry whose gradient is near 0, a rounding-size difference of the gradient can change its
step by anything up to Adam's bound on one step, lr (1 - beta1) / sqrt(1 - beta2) (Kingma &
Ba 2015, section 2.1). So every weight is held to that bound times the 6 steps taken
(`ADAM_BOUND`: no rounding can move a weight further), and the bulk of them, all but
`FEW` (1%), to 3e-5, ten times the measured ~2e-6 of an entry whose gradient is not near 0: a
real bug (a group trained twice, a gradient not all-reduced) moves most weights past it. (A
fixed 3e-5 for every weight failed on another machine's kernels at one entry of 2,048:
3.51e-5.) Sampling itself is the same
(each group draws from its own generator), so any larger difference is a real bug. ZeRO-2 is
held to the same tolerances: its differences are of the same kind (a reduce-scatter of
flattened gradients instead of DDP's all-reduce, and its own clipping coefficient, the same
formula as clip_grad_norm_'s).

A killed 2-process run resumes (the train stage's checkpoint and resume state, the optimizer state
sharded under ZeRO-2) and ends exactly as the unbroken 2-process run: same processes, same
numbers in the same order, so no tolerance.

This file is also the launched worker
(`python tests/test_distributed.py OUT SCENARIO,... [RUN_DIR]`).
"""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from grpo_core.rollout.scoring import LOGIT_CHUNK_BYTES as DEFAULT_CHUNK
from tests.tolerance import adam_bound
from tests.tolerance import assert_weights_close as _assert_weights_close

ROOT = Path(__file__).resolve().parents[1]
LOSS_ATOL, WEIGHT_ATOL = 1e-6, 3e-5
STEPS = 3
LR, UPDATES_PER_BATCH = 1e-2, 2
ADAM_BOUND = adam_bound(STEPS * UPDATES_PER_BATCH, LR)


def assert_weights_close(got: torch.Tensor, want: torch.Tensor, key: str) -> None:
    """ADAM_BOUND everywhere, WEIGHT_ATOL but for a few entries (tests/tolerance.py)."""
    _assert_weights_close(got, want, bound=ADAM_BOUND, atol=WEIGHT_ATOL, key=key)


# name -> (algo, train overrides, question answers). The toy verifier rewards a completion
# whose first character is one of its question's answer characters (dense enough that most
# groups are informative); an empty answer is never rewarded (a uniform group).
DIGITS = "0123456789"
SCENARIOS = {
    "grpo": ("grpo", {}, [DIGITS] * 4),
    "dapo": ("dapo", {}, [DIGITS, "", DIGITS, DIGITS]),  # dynamic sampling refills
    "codapo": ("codapo", {}, [DIGITS] * 4),  # CoDaPO's resampling queue
    "oc_grpo": ("grpo", {"oc_grpo": {"mode": "adaptive"}}, ["7", "", DIGITS, "7"]),
    # One informative group: the second process trains no row (a zero-weight synced pass).
    "one_group": ("grpo", {}, [DIGITS, "", "", ""]),
    # The LM head in pieces of 5 tokens under activation checkpointing (what a real
    # vocabulary gets, `grpo_core.rollout.scoring.head_logprobs`), outside DDP's forward;
    # under ZeRO-3 the head stays whole (sharded weights): there, this checks that fallback.
    "chunked_head": ("grpo", {}, [DIGITS] * 4),
    # A KL penalty: full fine-tuning against a reference copy, and LoRA against the policy
    # with its adapters off (under ZeRO-3: forwards on gathered weights).
    "kl": ("grpo", {"kl_coef": 0.05}, [DIGITS] * 4),
    "lora_kl": ("grpo", {"kl_coef": 0.05, "lora": {"enabled": True, "r": 4}}, [DIGITS] * 4),
}
CHUNKED_TOKENS = 5
# launch -> (accelerate config, the distributed type its processes must report, scenarios).
# ZeRO-2 reduces gradients at every backward, so uneven shares (dapo's refills, one_group's
# idle process) are where it could deadlock or miscount.
LAUNCHES = {
    "ddp": ("ddp_cpu2.yaml", "MULTI_CPU", list(SCENARIOS)),  # accelerate: DDP on the CPU
    "zero2": (
        "zero2_cpu2.yaml",
        "DEEPSPEED",
        ["grpo", "dapo", "codapo", "one_group", "chunked_head"],
    ),
    # ZeRO-3: the weights sharded too (configs/accelerate/zero3_cpu2.json shards every
    # parameter, even the tiny model's); rollouts run on weights gathered once per step.
    "zero3": (
        "zero3_cpu2.yaml",
        "DEEPSPEED",
        ["grpo", "dapo", "codapo", "oc_grpo", "one_group", "chunked_head", "kl", "lora_kl"],
    ),
}
CASES = [(launch, name) for launch, (_, _, names) in LAUNCHES.items() for name in names]
# Resume: this scenario (CoDaPO: a resampling queue and the sampler in the trainer state),
# checkpointed after every step and killed in step KILLED_IN (after training it, before its
# state is saved), then resumed from step KILLED_IN by a second launch.
RESUME_SCENARIO, KILLED_IN = "codapo", 1


def _setup(name: str):
    from grpo_core.config.model import TinyModelParams
    from grpo_core.config.params import parse_params
    from grpo_core.data.tiny import arith
    from grpo_core.models.tiny import build_char_tokenizer, build_tiny_model
    from grpo_core.rewards import verify as rewards
    from grpo_core.training.batch import Question

    rewards.VERIFIERS["toy"] = lambda completion, answer: float(
        bool(completion) and completion[0] in answer
    )
    algo, overrides, answers = SCENARIOS[name]
    texts = [arith.prompt(47, 38), arith.solution(47, 38), "0123456789+=?:QA \n\\boxed{}"]
    tokenizer = build_char_tokenizer(texts)
    from grpo_core.rollout import scoring

    scoring.LOGIT_CHUNK_BYTES = (  # the default again for every other scenario
        4 * len(tokenizer) * CHUNKED_TOKENS if name == "chunked_head" else DEFAULT_CHUNK
    )
    params = TinyModelParams(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64)
    model = build_tiny_model(tokenizer, params, seed=0)
    train = {
        "steps": STEPS,
        "prompts_per_step": 4,
        "group_size": 4,
        "max_new_tokens": 4,
        "lr": LR,
        "micro_batch_size": 4,  # several micro-batches per process: no_sync then sync
        "updates_per_batch": UPDATES_PER_BATCH,
        **overrides,
    }
    # Only the toy verifier's reward (no format term): an empty answer makes a uniform group.
    params = parse_params({"algo": algo, "train": train, "reward": {"weights": {"format": 0.0}}})
    questions = [
        Question(f"q{i}", "toy", 1, f"Q: {i}+1=?\nA: ", a, solution="7" + DIGITS)
        for i, a in enumerate(answers)
    ]
    return model, tokenizer, params, questions


def _train(name: str, accelerator=None, save_to: Path | None = None) -> dict:
    """Train one scenario; returns the step metrics, the final weights and, per step, which
    groups this process sampled and which batch rows it trained. `save_to`: the main process
    also saves the policy there (`save_pretrained`, the weights gathered as stages.train
    gathers them)."""
    from grpo_core.training.run import policy_and_reference, run
    from grpo_core.training.trainer import GRPOTrainer

    torch.manual_seed(0)
    model, tokenizer, params, questions = _setup(name)
    model, reference = policy_and_reference(model, params.train)
    initial = {k: v.clone() for k, v in model.state_dict().items()}
    trainer = GRPOTrainer(
        model,
        tokenizer,
        params.train,
        reference=reference,
        reward=params.reward,
        accelerator=accelerator,
    )
    metrics, shares = [], []
    original = trainer.update

    def update(*args, **kw):
        out = original(*args, **kw)
        shares.append(getattr(trainer, "trained_rows", []))
        return out

    trainer.update = update
    run(trainer, questions, STEPS, seed=0, on_step=lambda s, m, r: metrics.append(m))
    # train.heldout's evaluation as train_policy runs it, on every process, weights gathered
    from grpo_core.training.heldout import HeldoutEval

    sample = [
        {
            "domain": q.domain,
            "source": "toy",
            "level": 1 + i % 2,
            "prompt": q.prompt,
            "answer": q.answer,
        }
        for i, q in enumerate(questions)
    ]
    heldout = HeldoutEval(params, tokenizer, chat=False, problems=sample)
    with trainer.parallel.gathered(trainer.model):
        held = heldout(trainer.model, STEPS)
    with trainer.parallel.gathered(trainer.model):  # ZeRO-3: whole on every process
        state = {k: v.detach().cpu().clone() for k, v in trainer.model.state_dict().items()}
        if save_to is not None and trainer.is_main:
            trainer.model.save_pretrained(save_to)
    lora = params.train.lora.enabled  # adapters, not a model transformers loads alone
    saved = str(save_to) if save_to is not None and trainer.is_main and not lora else None
    return {
        "metrics": metrics,
        "state": state,
        "initial": initial,
        "trained_rows": shares,
        "saved": saved,
        "heldout": held,
    }


class _Killed(Exception):
    pass


def _resume_phase(phase: str, accelerator, run_dir: Path) -> dict:
    """The train stage's checkpointing (grpo_core.training.run.train_policy) on the harness,
    its files in `run_dir`: "kill" trains
    RESUME_SCENARIO until it is killed in step KILLED_IN, "resume" loads the last state and
    trains to the end as the stage does; the step metrics (the resumed ones included), the
    final weights and the step it resumed from."""
    from grpo_core.training.batch import QuestionSampler
    from grpo_core.training.checkpoints import checkpoint_dir, load_checkpoint, save_checkpoint
    from grpo_core.training.resume import load_resume, save_resume
    from grpo_core.training.run import run
    from grpo_core.training.trainer import GRPOTrainer

    main_process = accelerator.is_main_process
    fingerprint = f"test:{accelerator.distributed_type.name}:{accelerator.num_processes}"
    torch.manual_seed(0)
    model, tokenizer, params, questions = _setup(RESUME_SCENARIO)
    sampler = QuestionSampler(len(questions), seed=0)
    history: list[dict] = []
    log_rows: list[dict] = []
    start = 0
    resume = None
    if phase == "resume":
        resume = load_resume(fingerprint, run_dir=run_dir) if main_process else None
        accelerator.wait_for_everyone()
        if not main_process:
            resume = load_resume(fingerprint, False, accelerator.process_index, run_dir)
        assert resume is not None
        start = resume["step"]
        load_checkpoint(model, checkpoint_dir(run_dir, start))
        sampler.load_state_dict(resume["sampler"])
        history, log_rows = resume["history"], resume["log_rows"]
    trainer = GRPOTrainer(
        model, tokenizer, params.train, reward=params.reward, accelerator=accelerator
    )
    if resume is not None:
        trainer.load_state_dict(resume["trainer"], questions)

    def on_step(step: int, metrics: dict, rows: list[dict]) -> None:
        if phase == "kill" and step == KILLED_IN:
            raise _Killed
        history.append(metrics)
        log_rows.extend({"step": step, **row} for row in rows)
        with trainer.parallel.gathered(model):  # as grpo_core.training.run does
            if main_process:
                save_checkpoint(model, step + 1, run_dir)
        save_resume(
            fingerprint,
            step + 1,
            trainer,
            sampler,
            history,
            log_rows,
            accelerator.wait_for_everyone,
            run_dir,
        )
        accelerator.wait_for_everyone()

    try:
        run(trainer, questions, STEPS, 0, on_step, sampler=sampler, start=start)
    except _Killed:
        assert phase == "kill"
    with trainer.parallel.gathered(trainer.model):  # ZeRO-3: whole on every process
        state = {k: v.detach().cpu().clone() for k, v in trainer.model.state_dict().items()}
    trainable = sum(  # ZeRO-3: a sharded parameter's own numel is 0
        getattr(p, "ds_numel", p.numel()) for p in trainer.model.parameters() if p.requires_grad
    )
    return {"metrics": history, "state": state, "start": start, "trainable": trainable}


def _worker(out: Path, names: list[str], run_dir: Path | None = None) -> None:
    """Run inside `accelerate launch`: the scenarios `names`, every process writes its results
    and how it ran (the Accelerator stages.train builds)."""
    from grpo_core.training.parallel import data_parallel, make_accelerator

    torch.set_num_threads(1)
    accelerator = make_accelerator()
    # A process that silently runs alone would still "match" one process.
    assert accelerator.num_processes == 2, accelerator.num_processes
    results = {
        name: _resume_phase(name.split(":")[1], accelerator, run_dir)
        if name.startswith("resume:")
        else _train(name, accelerator, out / f"policy-{name}")
        for name in names
    }
    results["_launch"] = {
        "num_processes": accelerator.num_processes,
        "distributed_type": accelerator.distributed_type.name,
        "backend": accelerator.state.backend,
    }
    torch.save(results, out / f"rank{accelerator.process_index}.pt")
    data_parallel(accelerator).close()  # as stages.train ends


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _launch(
    launch: str, out: Path, names: list[str] | None = None, run_dir: Path | None = None
) -> tuple[list[dict], float]:
    config, _, scenarios = LAUNCHES[launch]
    names = names or scenarios
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    for var in ("RANK", "LOCAL_RANK", "WORLD_SIZE"):
        env.pop(var, None)
    cmd = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--config_file",
        str(ROOT / "configs/accelerate" / config),
        "--main_process_port",
        str(_free_port()),
        str(Path(__file__)),
        str(out),
        ",".join(names),
        *([str(run_dir)] if run_dir is not None else []),
    ]
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    wall = time.perf_counter() - start
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    ranks = [torch.load(out / f"rank{r}.pt", weights_only=False) for r in (0, 1)]
    print(f"2-process {launch} launch ({','.join(names)}): {wall:.1f}s")
    return ranks, wall


@pytest.fixture(scope="module")
def launched(tmp_path_factory):
    """launch -> (every process's results, wall time): each launch runs once per module."""
    cache: dict[str, tuple[list[dict], float]] = {}

    def get(launch: str) -> tuple[list[dict], float]:
        if launch not in cache:
            cache[launch] = _launch(launch, tmp_path_factory.mktemp(launch))
        return cache[launch]

    return get


@pytest.fixture(scope="module")
def one_process() -> dict[str, dict]:
    """The one-process reference of each scenario, trained once for both launches."""
    return {}


@pytest.mark.parametrize(("launch", "name"), CASES)
def test_two_processes_train_as_one(launched, one_process, launch, name):
    if launch.startswith("zero") and importlib.util.find_spec("deepspeed") is None:
        pytest.skip("deepspeed is not installed (`make` installs requirements-deepspeed.lock)")
    ranks, _ = launched(launch)
    for rank in ranks:
        assert rank["_launch"]["num_processes"] == 2
        assert rank["_launch"]["distributed_type"] == LAUNCHES[launch][1]
        assert rank["_launch"]["backend"] == "gloo"
    if name not in one_process:
        one_process[name] = _train(name)
    one = one_process[name]
    r0, r1 = ranks[0][name], ranks[1][name]
    max_loss = max_weight = 0.0
    assert len(one["metrics"]) == len(r0["metrics"]) == STEPS
    for step, (a, b, c) in enumerate(
        zip(one["metrics"], r0["metrics"], r1["metrics"], strict=True)
    ):
        assert set(a) == set(b), step
        for key in a:  # every process reports the one-process metrics
            assert b[key] == c[key], (step, key)
            assert b[key] == pytest.approx(a[key], abs=LOSS_ATOL, rel=1e-5), (step, key)
        max_loss = max(max_loss, abs(a["loss"] - b["loss"]))
    moved = False
    for key, w in one["state"].items():
        for r in (r0, r1):
            assert_weights_close(r["state"][key], w, key)
        max_weight = max(max_weight, float((r0["state"][key] - w).abs().max()))
        moved |= not torch.equal(w, one["initial"][key])
    assert moved, "the weights did not move: the comparison would be vacuous"
    # the held-out evaluation: the same numbers on both processes, and the one process's
    assert r0["heldout"] == r1["heldout"]
    assert r0["heldout"] == pytest.approx(one["heldout"], abs=1e-9)
    # The policy the main process saved (gathered under ZeRO-3) is a model transformers loads,
    # with the one process's weights.
    from transformers import AutoModelForCausalLM

    if r0["saved"] is not None:
        saved = AutoModelForCausalLM.from_pretrained(r0["saved"]).state_dict()
        for key, w in one["state"].items():
            assert_weights_close(saved[key], w, key)
    print(f"{launch}/{name}: max |loss diff| {max_loss:.2e}, max |weight diff| {max_weight:.2e}")
    # Each process trained its own share: disjoint and together all the one process trained.
    for step in range(STEPS):
        a, b, whole = r0["trained_rows"][step], r1["trained_rows"][step], one["trained_rows"][step]
        assert not set(a) & set(b) and sorted(a + b) == sorted(whole), step
    both = [bool(r0["trained_rows"][s]) and bool(r1["trained_rows"][s]) for s in range(STEPS)]
    if name == "one_group":  # one process only took part in the all-reduce, every step
        assert not any(both)
        assert all(r0["trained_rows"][s] or r1["trained_rows"][s] for s in range(STEPS))
    else:  # both processes trained a non-empty share (all steps but OC-GRPO's first)
        assert sum(both) >= STEPS - 1, both


@pytest.mark.parametrize("launch", list(LAUNCHES))
def test_a_killed_two_process_run_resumes_and_ends_as_the_unbroken_run(launched, launch, tmp_path):
    """Killed in step KILLED_IN of STEPS (checkpoints after every step); a second launch resumes
    from step KILLED_IN. Under ZeRO-2 each process saved and loads its own optimizer shard."""
    if launch.startswith("zero") and importlib.util.find_spec("deepspeed") is None:
        pytest.skip("deepspeed is not installed (`make` installs requirements-deepspeed.lock)")
    unbroken = [rank[RESUME_SCENARIO] for rank in launched(launch)[0]]
    run_dir = tmp_path / "run"
    killed = _launch(launch, tmp_path / "killed", ["resume:kill"], run_dir)[0][0]["resume:kill"]
    resume = run_dir / "resume"
    state = json.loads((resume / "state.json").read_text())
    sharded = launch in ("zero2", "zero3")
    assert (state["step"], state["world"], state["sharded"]) == (KILLED_IN, 2, sharded)
    files = sorted(f.name for f in resume.iterdir())
    assert files == sorted(["state.json", "trainer.pt"] + (["trainer-rank1.pt"] if sharded else []))
    if sharded:  # each process's own half of the fp32 master weights and the Adam moments
        from grpo_core.training.parallel import zero_state_globals

        with torch.serialization.safe_globals(zero_state_globals()):
            shards = [
                torch.load(resume / f, weights_only=True)
                for f in ("trainer.pt", "trainer-rank1.pt")
            ]
        assert [s["rank"] for s in shards] == [0, 1]
        # ZeRO-2's flat fp32 partition; ZeRO-3's, padded to equal sizes
        key = "single_partition_of_fp32_groups" if launch == "zero2" else "fp32_flat_groups"
        sizes = [s["optimizer"][key][0].numel() for s in shards]
        assert sizes[0] == sizes[1], sizes
        assert sum(sizes) == killed["trainable"] or launch == "zero3", sizes
        assert killed["trainable"] <= sum(sizes) < killed["trainable"] + 2, sizes

    ranks, wall = _launch(launch, tmp_path / "resumed", ["resume:resume"], run_dir)
    max_weight = 0.0
    for rank, whole in zip(ranks, unbroken, strict=True):
        resumed = rank["resume:resume"]
        assert resumed["start"] == KILLED_IN
        assert resumed["metrics"] == whole["metrics"]
        for key, w in whole["state"].items():
            max_weight = max(max_weight, float((resumed["state"][key] - w).abs().max()))
            assert torch.equal(resumed["state"][key], w), key
    print(f"{launch} resumed: max |weight diff| {max_weight:.2e} (resume launch {wall:.1f}s)")


@pytest.mark.parametrize(
    "loss_agg", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"]
)
def test_partial_losses_with_global_denominators_sum_to_the_one_process_loss(loss_agg):
    """Hand-computed: 3 sequences, per-token losses [[1, 2, 0], [3, 0, 0], [4, 5, 6]] with
    masks [[1, 1, 0], [1, 0, 0], [1, 1, 1]]: 6 tokens, 3 sequences, budget 4.
    token-mean: 21 / 6; seq-mean-token-mean: (1.5 + 3 + 5) / 3; sum-norm: 21 / (3 * 4).
    Process 0 holds rows 0-1, process 1 row 2; each divides by the whole batch's counts."""
    from grpo_core.algorithms.losses import agg_loss

    loss = torch.tensor([[1.0, 2, 0], [3, 0, 0], [4, 5, 6]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0], [1, 1, 1]])
    expected = {
        "token-mean": 21 / 6,
        "seq-mean-token-mean": (1.5 + 3 + 5) / 3,
        "seq-mean-token-sum-norm": 21 / 12,
    }[loss_agg]
    counts = dict(num_tokens=6.0, num_seqs=3.0, max_tokens=4)
    parts = [
        agg_loss(loss[rows], mask[rows], loss_agg, **counts) for rows in (slice(0, 2), slice(2, 3))
    ]
    assert float(agg_loss(loss, mask, loss_agg, max_tokens=4)) == pytest.approx(expected)
    assert float(sum(parts)) == pytest.approx(expected)
    # DDP averages the processes' gradients: scaling each part by the world size makes the
    # average the sum.
    assert float(sum(2 * p for p in parts) / 2) == pytest.approx(expected)


def test_group_shares_are_contiguous_whole_and_cover_every_group():
    from grpo_core.training.parallel import share

    for n in range(0, 9):
        for world in (1, 2, 3, 8):
            blocks = [share(n, r, world) for r in range(world)]
            assert blocks[0][0] == 0 and blocks[-1][1] == n
            assert all(a[1] == b[0] for a, b in zip(blocks, blocks[1:], strict=False))
            assert max(h - lo for lo, h in blocks) - min(h - lo for lo, h in blocks) <= 1


if __name__ == "__main__":
    _worker(Path(sys.argv[1]), sys.argv[2].split(","), *map(Path, sys.argv[3:]))
