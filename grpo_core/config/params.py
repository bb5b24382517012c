"""The whole params.yaml as one model: for tests, benchmarks and tools that read every section.
No stage imports it: each validates its own view (`<Stage>Stage` beside its section)."""

from __future__ import annotations

from pathlib import Path

from grpo_core.config import core
from grpo_core.config.core import ParamsError, Seed
from grpo_core.config.data import DataParams
from grpo_core.config.dynamics import DynamicsParams
from grpo_core.config.eval import EvalParams
from grpo_core.config.guide import GuideParams
from grpo_core.config.launch import Launch
from grpo_core.config.model import ModelParams
from grpo_core.config.profile import ProfileParams
from grpo_core.config.reward import RewardParams
from grpo_core.config.runtime import Numerics, Threads
from grpo_core.config.train import Algo, TrainChecks, TrainParams


class Params(TrainChecks):
    """The whole `params.yaml`."""

    seed: Seed = 0
    algo: Algo = "grpo"
    data: DataParams = DataParams()
    model: ModelParams = ModelParams()
    profile: ProfileParams = ProfileParams()
    guide: GuideParams = GuideParams()
    train: TrainParams = TrainParams()
    dynamics: DynamicsParams = DynamicsParams()
    eval: EvalParams = EvalParams()
    reward: RewardParams = RewardParams()
    launch: Launch = "cpu"
    numerics: Numerics = "portable"
    threads: Threads = 2


# Keys added after runs were recorded without them, each with the value that does what a run
# from before it did: a recorded run that lacks the key ran with that value. (Not every new
# key's default: `train.heldout.every` came in at 5, where runs before it held nothing out.)
ADDED_KEYS = {f"{section}.compact": False for section in ("profile", "guide", "train", "eval")}


def parse_params(raw: object, source: str = "params.yaml") -> Params:
    """The whole params file, validated (a parsed YAML mapping)."""
    return core.parse_params(raw, Params, source)


def load_params(path: str | Path = "params.yaml") -> Params:
    """The whole params file at `path`, validated."""
    return core.load_params(Params, path)


__all__ = ["ADDED_KEYS", "Params", "ParamsError", "load_params", "parse_params"]
