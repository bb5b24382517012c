"""`numerics` and `threads` (grpo_core/config/runtime.py): the environment each stands for, how
a process takes it, and that under `portable` a warm start is the same bits whatever kernels
the environment asked for, where under `native` it is not. The thread count is part of the run
under either (MKL's COMPATIBLE branch splits a GEMM's sums by it: a 1-thread rebuild of the
default run trained another policy), so every torch stage depends on `threads`
(tests/test_dvc_yaml.py)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from grpo_core.config.runtime import (
    CHOSEN,
    PORTABLE_ENV,
    environment,
    process_env,
    settings,
)

ROOT = Path(__file__).resolve().parents[1]


def test_each_setting_stands_for_its_environment():
    assert environment("native", 3) == {"OMP_NUM_THREADS": "3", "MKL_NUM_THREADS": "3"}
    assert environment("portable", 1) == {
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "ATEN_CPU_CAPABILITY": "avx2",
        "MKL_CBWR": "COMPATIBLE,STRICT",
        "ONEDNN_MAX_CPU_ISA": "AVX2",
    }


def test_native_keeps_the_users_kernels_but_not_what_portable_passed_down():
    user = {"ATEN_CPU_CAPABILITY": "avx512", "PATH": "/bin"}
    assert process_env("native", 2, user)["ATEN_CPU_CAPABILITY"] == "avx512"
    inherited = process_env("native", 2, {**PORTABLE_ENV, "PATH": "/bin"})
    assert not set(PORTABLE_ENV) & set(inherited) and inherited["PATH"] == "/bin"
    # portable replaces whatever the user set
    assert process_env("portable", 2, user)["ATEN_CPU_CAPABILITY"] == "avx2"


def test_settings_come_from_params_yaml_with_defaults_for_what_is_missing(tmp_path):
    params = tmp_path / "params.yaml"
    params.write_text("numerics: native\nthreads: 1\n")
    assert settings(params) == ("native", 1)
    params.write_text("seed: 0\n")
    assert settings(params) == ("portable", 2)
    params.write_text("numerics: [oops\n")  # the stage's own validation names the problem
    assert settings(params) == ("portable", 2)
    assert settings(tmp_path / "missing.yaml") == ("portable", 2)


def test_importing_stages_sets_the_environment_before_torch_loads(tmp_path):
    (tmp_path / "params.yaml").write_text("numerics: portable\nthreads: 1\n")
    code = (
        "import stages, os, torch; print(torch.backends.cpu.get_cpu_capability(), "
        "torch.get_num_threads(), os.environ['MKL_CBWR'])"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT), "ATEN_CPU_CAPABILITY": "default"}
    env.pop(CHOSEN, None)
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert done.stdout.split() == ["AVX2", "1", "COMPATIBLE,STRICT"], done.stderr


WARM_START = """
import hashlib, json, sys
import numpy as np, torch
from grpo_core.config.model import ModelParams
from grpo_core.data.tiny import arith
from grpo_core.models.sft import warm_start
from grpo_core.models.tiny import build_char_tokenizer, build_tiny_model

torch.set_num_threads(int(sys.argv[1]))
rng = np.random.default_rng(0)
pairs = [(int(a), int(b)) for a, b in rng.integers(10, 1000, size=(256, 2))]
prompts = [arith.prompt(a, b) for a, b in pairs]
targets = [arith.solution(a, b) for a, b in pairs]
cfg = ModelParams(sft={"steps": 4, "stop": None, "guided_batch_size": 0, "batch_size": 64,
                       "level_weights": [1.0]})
tok = build_char_tokenizer(prompts + targets)
model = build_tiny_model(tok, cfg.tiny, 0)
warm_start(model, tok, prompts, targets, np.ones(len(prompts), dtype=int), cfg.sft, 0)
blob = b"".join(p.detach().numpy().tobytes() for p in model.parameters())
print(json.dumps(hashlib.sha256(blob).hexdigest()))
"""


def _warm_start(numerics: str, threads: int, extra: dict[str, str] | None = None) -> str:
    env = {k: v for k, v in os.environ.items() if k not in PORTABLE_ENV and k != CHOSEN}
    env = process_env(numerics, threads, env | (extra or {})) | {"PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", WARM_START, str(threads)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout.splitlines()[-1])


@pytest.mark.pipeline
def test_a_portable_warm_start_is_the_same_bits_whatever_kernels_the_environment_asks_for():
    portable = _warm_start("portable", 2)
    assert _warm_start("portable", 2, {"ATEN_CPU_CAPABILITY": "default"}) == portable
    assert _warm_start("portable", 2, {"MKL_CBWR": "AVX2"}) == portable
    # native: the machine's own kernels (AVX-512 where there is one) or MKL's AVX2 branch
    native = {_warm_start("native", 2), _warm_start("native", 2, {"MKL_CBWR": "AVX2"})}
    assert len(native | {portable}) > 1, "no setting changed the bits: the test proves nothing"
