"""The top-level `numerics` and `threads` params: which CPU kernels torch computes with, and on
how many threads.

A float32 run's bits depend on the kernels the CPU dispatches to: ATen picks its vector width
(AVX2 or AVX-512) by CPU, MKL its GEMM branch by CPU and thread count. Training amplifies a
difference in the last bit into another model: the tiny base built on three machines from the
same commit scored 39%, 47% and 92% at level 3. `numerics: portable` pins every choice made by
CPU (`PORTABLE_ENV`), so a run gives the same bits whatever kernels the environment asks for and
across the Intel machines measured, at the same `threads`; it does not across vendors: an AMD
EPYC rebuilt the default run with another base (level 3 at 76.8% against 89.4%), whichever MKL
branch it was given (benchmarks/results/numerics.md, "An AMD machine"). `native` lets each CPU
take its fastest kernels, and the outputs then differ by CPU. Under either the thread count is
part of the computation: MKL's strict mode, which makes a GEMM independent of it, covers only
its Intel-only AVX2 and AVX-512 branches, not the vendor-neutral COMPATIBLE one (measured: a
16 x 128 x 30 GEMM, the tiny model's LM head at a decode step, differs between 1 and 2
threads), so `threads` is every torch stage's dependency (benchmarks/results/numerics.md).

The settings are environment variables that torch, MKL and oneDNN read when they load, so
`apply` runs when the `stages` package is imported (stages/__init__.py), before any of them.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Literal

import yaml
from pydantic import Field

Numerics = Annotated[
    Literal["portable", "native"],
    Field(
        description="portable: kernels pinned to what every x86-64 CPU with AVX2 has (ATen's "
        "AVX2 kernels, MKL's vendor-neutral CNR branch, oneDNN capped at AVX2), so the same commit "
        "and params, `threads` included, give the same bits on the Intel CPUs measured, not "
        "on an AMD EPYC (another base from the same commit: benchmarks/results/numerics.md); "
        "compare runs by their bases' hashes (`provenance`). native: each CPU's fastest "
        "kernels (AVX-512, AMX for bfloat16), and outputs that differ by CPU. Every stage "
        "that computes with torch reads it.",
    ),
]
Threads = Annotated[
    int,
    Field(
        gt=0,
        description="torch's intra-op threads in every stage (OMP_NUM_THREADS). MKL splits "
        "its sums by it, so the outputs depend on it under either `numerics` (a 1-thread "
        "rebuild of the default run gave the same base and another policy, equal to float "
        "rounding: benchmarks/results/numerics.md), and every torch stage depends on it: keep "
        "it to reproduce a run, change it to rerun faster on more cores. Another job on the "
        "same cores slows a stage several times over (issue 39: 2 threads beside another job "
        "ran SFT at 553-784 ms a step against 157-174 ms with 1).",
    ),
]

# What `portable` sets. MKL's AVX2 branch is Intel-only (on an AMD CPU MKL silently falls back
# to its CPU-specific branch); COMPATIBLE is the branch both vendors run alike. STRICT would
# make a GEMM independent of the thread count on the AVX2 and AVX-512 branches only: on
# COMPATIBLE MKL runs standard CNR (the same bits at a fixed thread count), and the flag stays
# for the CPUs where it applies.
PORTABLE_ENV = {
    "ATEN_CPU_CAPABILITY": "avx2",
    "MKL_CBWR": "COMPATIBLE,STRICT",
    "ONEDNN_MAX_CPU_ISA": "AVX2",
}
THREAD_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")


def settings(params_file: str | Path = "params.yaml") -> tuple[str, int]:
    """`numerics` and `threads` as params.yaml sets them (their defaults when it does not, or
    when the file cannot be read: the stage's own validation then names the problem)."""
    numerics, threads = "portable", 2
    try:
        raw = yaml.safe_load(Path(params_file).read_text())
    except (OSError, yaml.YAMLError):
        return numerics, threads
    if isinstance(raw, dict):
        if raw.get("numerics") in ("portable", "native"):
            numerics = raw["numerics"]
        if isinstance(raw.get("threads"), int) and raw["threads"] > 0:
            threads = raw["threads"]
    return numerics, threads


def environment(numerics: str, threads: int) -> dict[str, str]:
    """The environment variables `numerics` and `threads` stand for."""
    env = {name: str(threads) for name in THREAD_ENV}
    if numerics == "portable":
        env.update(PORTABLE_ENV)
    return env


def process_env(numerics: str, threads: int, base: dict[str, str]) -> dict[str, str]:
    """`base` (an environment) as a process computing under `numerics` and `threads` needs it.
    Under `native` the kernel variables a user set are kept, but not those a `portable`
    process passed down; under `portable` they are replaced."""
    env = dict(base)
    if numerics == "native":
        for name, value in PORTABLE_ENV.items():
            if env.get(name) == value:
                del env[name]
    return env | environment(numerics, threads)


# Set by a process that chose the numerics for its children (a study whose params set them):
# it wins over params.yaml's.
CHOSEN = "GRPO_LAB_NUMERICS"


def apply(params_file: str | Path = "params.yaml") -> dict[str, str]:
    """Set the process's environment from params.yaml's `numerics` and `threads` (or the
    numerics a parent chose, `CHOSEN`), before torch is imported (after, torch has read them).
    Returns what was set."""
    numerics, threads = settings(params_file)
    numerics = os.environ.get(CHOSEN, numerics)
    env = process_env(numerics, threads, dict(os.environ))
    os.environ.clear()
    os.environ.update(env)
    return environment(numerics, threads)
