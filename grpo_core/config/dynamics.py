"""`dynamics` stage params: the `dynamics` section."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from grpo_core.config.core import PositiveFloat, PositiveInt, Section, StageParams
from grpo_core.config.runtime import Numerics, Threads


class DynamicsParams(Section):
    """`dynamics` stage: what training changed in the weights (per tensor and checkpoint,
    grpo_core.analysis.tensor_dynamics) and in the tokens (from the rollout log,
    grpo_core.analysis.token_dynamics)."""

    tolerance: PositiveFloat = Field(
        2**-8,
        description="An entry counts as changed when |W_t - W_0| > tolerance * |W_0|; the "
        "default 2^-8 is bf16's unit roundoff: a smaller change would not survive storing "
        "the weights in bf16.",
    )
    svd: Literal["auto", "exact", "randomized"] = Field(
        "auto",
        description="Singular values of each update: exact, randomized (the top svd_rank, "
        "torch.svd_lowrank), or auto (exact up to svd_exact_max rows or columns).",
    )
    svd_rank: PositiveInt = Field(64, description="Singular values a randomized SVD estimates.")
    svd_exact_max: PositiveInt = Field(
        1024, description="auto: an exact SVD when min(rows, cols) is at most this."
    )
    svd_niter: Annotated[int, Field(ge=0)] = Field(
        4, description="Power iterations of the randomized SVD (more: sharper, slower)."
    )


class DynamicsStage(StageParams):
    """What `dynamics` reads: no seed (its randomized SVD seeds itself)."""

    numerics: Numerics = "portable"
    threads: Threads = 2
    dynamics: DynamicsParams = DynamicsParams()
