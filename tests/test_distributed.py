"""Data-parallel training equals one process: 2 CPU processes over gloo, started by the real
`accelerate launch` with configs/accelerate/ddp_cpu2.yaml (DDP) and with
configs/accelerate/zero2_cpu2.yaml (DeepSpeed ZeRO-2: optimizer state and gradients sharded,
the engine clips and steps), against one process with the same global batch and seed, on a
tiny locally built model.

Tolerance: every step metric (loss included) within 1e-6 and every weight within 3e-5
(absolute; lr 1e-2, 3 steps of 2 updates; measured: metrics ~1e-8, weights mostly ~2e-6 with
one near-zero-gradient entry at 1e-5). Not exact: each
process runs its share of the groups, so the forwards, the gradient sums and the all-reduce
add the same numbers in other batch shapes and orders, which rounds differently in float32;
Adam then divides by sqrt(v), which on an entry whose gradient is near 0 turns a rounding-size
difference of the gradient into up to ~lr * 1e-3 of the step. Sampling itself is the same
(each group draws from its own generator), so any larger difference is a real bug. ZeRO-2 is
held to the same tolerances: its differences are of the same kind (a reduce-scatter of
flattened gradients instead of DDP's all-reduce, and its own clipping coefficient, the same
formula as clip_grad_norm_'s).

This file is also the launched worker (`python tests/test_distributed.py OUT SCENARIO,...`).
"""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
LOSS_ATOL, WEIGHT_ATOL = 1e-6, 3e-5
STEPS = 3

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
}
# launch -> (accelerate config, the distributed type its processes must report, scenarios).
# ZeRO-2 reduces gradients at every backward, so uneven shares (dapo's refills, one_group's
# idle process) are where it could deadlock or miscount.
LAUNCHES = {
    "ddp": ("ddp_cpu2.yaml", "MULTI_CPU", list(SCENARIOS)),  # accelerate: DDP on the CPU
    "zero2": ("zero2_cpu2.yaml", "DEEPSPEED", ["grpo", "dapo", "codapo", "one_group"]),
}
CASES = [(launch, name) for launch, (_, _, names) in LAUNCHES.items() for name in names]


def _setup(name: str):
    from grpo_core import rewards
    from grpo_core.config import TinyModelParams, parse_params
    from grpo_core.tiny import arith
    from grpo_core.tiny.model import build_tiny_model
    from grpo_core.tiny.tokenizer import build_char_tokenizer
    from grpo_core.trainer import Question

    rewards.VERIFIERS["toy"] = lambda completion, answer: float(
        bool(completion) and completion[0] in answer
    )
    algo, overrides, answers = SCENARIOS[name]
    texts = [arith.prompt(47, 38), arith.solution(47, 38), "0123456789+=?:QA \n\\boxed{}"]
    tokenizer = build_char_tokenizer(texts)
    params = TinyModelParams(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64)
    model = build_tiny_model(tokenizer, params, seed=0)
    train = {
        "steps": STEPS,
        "prompts_per_step": 4,
        "group_size": 4,
        "max_new_tokens": 4,
        "lr": 1e-2,
        "micro_batch_size": 4,  # several micro-batches per process: no_sync then sync
        "updates_per_batch": 2,
        **overrides,
    }
    # Only the toy verifier's reward (no format term): an empty answer makes a uniform group.
    params = parse_params({"algo": algo, "train": train, "reward": {"weights": {"format": 0.0}}})
    questions = [
        Question(f"q{i}", "toy", 1, f"Q: {i}+1=?\nA: ", a, solution="7" + DIGITS)
        for i, a in enumerate(answers)
    ]
    return model, tokenizer, params, questions


def _train(name: str, accelerator=None) -> dict:
    """Train one scenario; returns the step metrics, the final weights and, per step, which
    groups this process sampled and which batch rows it trained."""
    from grpo_core.trainer import GRPOTrainer, run

    torch.manual_seed(0)
    model, tokenizer, params, questions = _setup(name)
    initial = {k: v.clone() for k, v in model.state_dict().items()}
    trainer = GRPOTrainer(
        model, tokenizer, params.train, reward=params.reward, accelerator=accelerator
    )
    metrics, shares = [], []
    original = trainer.update

    def update(*args, **kw):
        out = original(*args, **kw)
        shares.append(getattr(trainer, "trained_rows", []))
        return out

    trainer.update = update
    run(trainer, questions, STEPS, seed=0, on_step=lambda s, m, r: metrics.append(m))
    state = {k: v.detach().cpu().clone() for k, v in trainer.model.state_dict().items()}
    return {"metrics": metrics, "state": state, "initial": initial, "trained_rows": shares}


def _worker(out: Path, names: list[str]) -> None:
    """Run inside `accelerate launch`: the scenarios `names`, every process writes its results
    and how it ran (the Accelerator stages.train builds)."""
    from grpo_core.distributed import make_accelerator

    torch.set_num_threads(1)
    accelerator = make_accelerator()
    # A process that silently runs alone would still "match" one process.
    assert accelerator.num_processes == 2, accelerator.num_processes
    results = {name: _train(name, accelerator) for name in names}
    results["_launch"] = {
        "num_processes": accelerator.num_processes,
        "distributed_type": accelerator.distributed_type.name,
        "backend": accelerator.state.backend,
    }
    torch.save(results, out / f"rank{accelerator.process_index}.pt")
    accelerator.wait_for_everyone()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _launch(launch: str, out: Path) -> tuple[list[dict], float]:
    config, _, names = LAUNCHES[launch]
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
    ]
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    wall = time.perf_counter() - start
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    ranks = [torch.load(out / f"rank{r}.pt", weights_only=False) for r in (0, 1)]
    print(f"2-process {launch} launch: {wall:.1f}s")
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
    if launch == "zero2" and importlib.util.find_spec("deepspeed") is None:
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
            torch.testing.assert_close(r["state"][key], w, atol=WEIGHT_ATOL, rtol=0)
        max_weight = max(max_weight, float((r0["state"][key] - w).abs().max()))
        moved |= not torch.equal(w, one["initial"][key])
    assert moved, "the weights did not move: the comparison would be vacuous"
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


@pytest.mark.parametrize(
    "loss_agg", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"]
)
def test_partial_losses_with_global_denominators_sum_to_the_one_process_loss(loss_agg):
    """Hand-computed: 3 sequences, per-token losses [[1, 2, 0], [3, 0, 0], [4, 5, 6]] with
    masks [[1, 1, 0], [1, 0, 0], [1, 1, 1]]: 6 tokens, 3 sequences, budget 4.
    token-mean: 21 / 6; seq-mean-token-mean: (1.5 + 3 + 5) / 3; sum-norm: 21 / (3 * 4).
    Process 0 holds rows 0-1, process 1 row 2; each divides by the whole batch's counts."""
    from grpo_core.losses import agg_loss

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
    from grpo_core.trainer import _share

    for n in range(0, 9):
        for world in (1, 2, 3, 8):
            blocks = [_share(n, r, world) for r in range(world)]
            assert blocks[0][0] == 0 and blocks[-1][1] == n
            assert all(a[1] == b[0] for a, b in zip(blocks, blocks[1:], strict=False))
            assert max(h - lo for lo, h in blocks) - min(h - lo for lo, h in blocks) <= 1


if __name__ == "__main__":
    _worker(Path(sys.argv[1]), sys.argv[2].split(","))
