from pathlib import Path

import pytest
import yaml
from pydantic import BaseModel

from grpo_core.config.core import ParamsError
from grpo_core.config.params import Params, load_params, parse_params


def test_repository_params_yaml_is_valid_and_complete():
    params = load_params("params.yaml")
    with open("params.yaml") as f:
        raw = yaml.safe_load(f)
    # Every declared field is spelled out in params.yaml, so users see every knob.
    assert set(raw) == set(Params.model_fields)
    for section in ("data", "model", "profile", "guide", "train", "dynamics", "eval", "reward"):
        assert set(raw[section]) == set(type(getattr(params, section)).model_fields), section
    for sub in ("codapo", "oc_grpo", "lora"):
        assert set(raw["train"][sub]) == set(type(getattr(params.train, sub)).model_fields), sub
    for sub in ("code", "weights"):
        assert set(raw["reward"][sub]) == set(type(getattr(params.reward, sub)).model_fields), sub


def test_preset_knobs_are_null_in_params_yaml_so_algo_decides_them():
    from grpo_core.algorithms.presets import _NO_SHAPING, PRESETS, REWARD_PRESETS

    with open("params.yaml") as f:
        raw = yaml.safe_load(f)
    sections = [(raw["train"], key) for key in PRESETS["grpo"]]
    reward_keys = {*_NO_SHAPING, *(k for preset in REWARD_PRESETS.values() for k in preset)}
    sections += [(raw["reward"], key) for key in [*reward_keys, "overlong_cache"]]
    for params, key in sections:
        section, _, leaf = key.rpartition(".")
        assert (params[section] if section else params)[leaf] is None, key


@pytest.mark.parametrize(
    "algo, expected",
    [
        ("grpo", dict(advantage="grpo", loss_agg="token-mean", clip_high=0.2)),
        ("grpo", dict(filter_zero_std=False, dynamic_sampling=False, kl_coef=0.0)),
        (
            "dr_grpo",
            dict(advantage="dr_grpo", loss_agg="seq-mean-token-sum-norm", filter_zero_std=True),
        ),
        ("dapo", dict(clip_high=0.28, dynamic_sampling=True, overlong_filter=False)),
        ("dapo", dict(loss_agg="token-mean", filter_zero_std=False)),
        ("codapo", {"filter_zero_std": False}),
        ("oc_grpo", {"filter_zero_std": False}),
        ("codapo", {"codapo.enabled": True, "oc_grpo.mode": "off"}),
        ("codapo", {"dual_clip": 3.0, "entropy_coef": 0.001}),
        ("oc_grpo", {"oc_grpo.mode": "fixed", "codapo.enabled": False}),
    ],
)
def test_algo_presets_fill_the_null_knobs(algo, expected):
    train = parse_params({"algo": algo, "train": {"advantage": None, "codapo": {}}}).train
    for key, value in expected.items():
        obj = train
        for part in key.split("."):
            obj = getattr(obj, part)
        assert obj == value, key


def test_a_knob_set_in_params_overrides_the_preset():
    train = parse_params(
        {"algo": "dapo", "train": {"clip_high": 0.4, "codapo": {"enabled": True}}}
    ).train
    assert train.clip_high == 0.4 and train.dynamic_sampling and train.codapo.enabled


@pytest.mark.parametrize("algo", ["grpo", "dr_grpo", "dapo", "codapo", "oc_grpo"])
@pytest.mark.parametrize("budget", [72, 200, 3])
def test_presets_fill_the_overlong_punishment_dapo_with_a_cache_of_a_fifth_of_the_budget(
    algo, budget
):
    """DAPO's final recipe (sec. 3.4): soft overlong punishment, weight 1, its cache 4,096 of
    the 20,480-token budget; the other presets leave it off. The cache is 20% of
    train.max_new_tokens for every preset (it only matters with a weight)."""
    null = {"weights": {"overlong": None}, "overlong_cache": None}
    for reward in (null, {}):  # null in params.yaml, or missing
        params = parse_params({"algo": algo, "train": {"max_new_tokens": budget}, "reward": reward})
        assert params.reward.weights.overlong == (0.5 if algo == "dapo" else 0.0)
        assert params.reward.overlong_cache == max(1, round(0.2 * budget))
        assert params.reward.weights.correct == 1.0 and params.reward.code.workers == 2


def test_a_reward_knob_set_in_params_overrides_the_preset():
    mine = {"weights": {"overlong": 0.5, "format": 0.1}, "overlong_cache": 20}
    reward = parse_params({"algo": "dapo", "reward": mine}).reward
    assert (reward.weights.overlong, reward.weights.format, reward.overlong_cache) == (0.5, 0.1, 20)
    reward = parse_params({"algo": "grpo", "reward": {"weights": {"overlong": 1.0}}}).reward
    assert (reward.weights.overlong, reward.overlong_cache) == (1.0, 14)
    reward = parse_params({"algo": "dapo", "reward": {"weights": {"overlong": 0.0}}}).reward
    assert reward.weights.overlong == 0.0  # an explicit 0 turns DAPO's punishment off


@pytest.mark.parametrize(
    "raw, expected",
    [
        ({"train": {"group_sise": 8}}, ["train.group_sise: unknown key", "group_size"]),
        ({"train": {"group_size": -4}}, ["train.group_size", "greater than or equal to 2"]),
        ({"train": {"lr": "fast"}}, ["train.lr", "'fast'"]),
        ({"algo": "ppo"}, ["algo", "'ppo'", "allowed values", "'grpo'", "'oc_grpo'"]),
        ({"train": {"curriculum": "medium"}}, ["train.curriculum", "'learnable'"]),
        ({"train": {"oc_grpo": {"floor": 2.0}}}, ["floor (2.0) must not exceed cap"]),
        ({"guide": {"fractions": [0.6, 0.2]}}, ["guide", "must be increasing"]),
        ({"train": {"codapo": {"quantile": 1.5}}}, ["train.codapo.quantile"]),
        ({"data": {"levels": [0, 6]}}, ["data.levels.0", "data.levels.1"]),
        ({"eval": {"samples": 2, "pass_at": [4]}}, ["pass_at values [4] exceed samples (2)"]),
        ({"model": {"tiny": {"hidden_size": 100, "num_heads": 3}}}, ["divisible by num_heads"]),
        ({"bogus": 1}, ["bogus: unknown key", "allowed keys here: seed, algo"]),
        ({"data": {"domains": ["poetry"]}}, ["data.domains.0", "'arith'", "'code'"]),
        ({"data": {"domains": []}}, ["no problems", "data.train and data.eval"]),
        ({"data": {"eval": [{"path": "x.jsonl"}]}}, ["data.eval.0.name", "Field required"]),
        ({"data": {"eval": [{"name": "math500", "limt": 5}]}}, ["data.eval.0.limt: unknown key"]),
        ({"reward": {"code": {"workers": 0}}}, ["reward.code.workers"]),
        (
            {"reward": {"weights": {"overlong": 1.0}, "overlong_cache": 80}},
            ["reward.overlong_cache (80) must not exceed train.max_new_tokens (72)"],
        ),
        (
            {"algo": "dapo", "reward": {"overlong_cache": 80}},
            ["reward.overlong_cache (80) must not exceed train.max_new_tokens (72)"],
        ),
        ({"algo": "dapo", "reward": {"overlong_cache": 0}}, ["reward.overlong_cache"]),
        ({"algo": "dapo", "reward": {"weights": {"overlong": "x"}}}, ["reward.weights.overlong"]),
        ({"algo": "dapo", "reward": {"weights": [1.0]}}, ["reward.weights"]),
        ({"reward": {"weights": {"lenght": 1.0}}}, ["reward.weights.lenght: unknown key"]),
    ],
)
def test_bad_params_name_the_key(raw, expected):
    with pytest.raises(ParamsError) as info:
        parse_params(raw)
    for text in expected:
        assert text in str(info.value)


def test_not_a_mapping_and_bad_yaml(tmp_path):
    with pytest.raises(ParamsError, match="expected a mapping"):
        parse_params([1, 2])
    bad = tmp_path / "params.yaml"
    bad.write_text("train: [unclosed\n")
    with pytest.raises(ParamsError, match="not valid YAML"):
        load_params(bad)
    with pytest.raises(ParamsError, match="not found"):
        load_params(tmp_path / "missing.yaml")


def test_dataset_lists_take_names_or_mappings():
    data = parse_params(
        {
            "data": {
                "train": ["gsm8k"],
                "eval": [{"name": "math500", "path": "data/raw/m.jsonl", "limit": 5}],
            }
        }
    ).data
    assert data.train[0].name == "gsm8k" and data.train[0].path is None
    eval0 = (data.eval[0].name, data.eval[0].path, data.eval[0].limit)
    assert eval0 == ("math500", "data/raw/m.jsonl", 5)
    # real data alone, without tiny-world domains, is a valid world
    assert parse_params({"data": {"domains": [], "train": ["gsm8k"], "eval": ["math500"]}})


@pytest.mark.parametrize(
    "path, tracked",
    [
        ("data/raw/m.jsonl", True),
        ("data/raw/math/train", True),  # a directory of files
        ("./data/raw/m.jsonl", True),
        ("data/raw", True),
        ("m.jsonl", False),
        ("data/m.jsonl", False),
        ("data/raw/../m.jsonl", False),  # the text says data/raw, the file is not in it
        ("data/rawer/m.jsonl", False),
        ("/tmp/m.jsonl", False),
        ("tests/fixtures/benchmarks/math500_test.jsonl", False),
    ],
)
def test_a_dataset_path_must_be_under_data_raw_which_dvc_tracks(path, tracked):
    """`prepare` depends on data/raw (dvc.yaml): a file elsewhere could change without DVC
    rerunning it, so validation refuses it, naming the key and where to move the file."""
    raw = {"data": {"train": [{"name": "gsm8k", "path": path}], "eval": ["math500"]}}
    if tracked:
        assert parse_params(raw).data.train[0].path == path
        return
    with pytest.raises(ParamsError) as info:
        parse_params(raw)
    assert "data.train.0.path" in str(info.value)
    assert "move it under data/raw/, which the prepare stage tracks" in str(info.value)


def test_an_absolute_dataset_path_is_checked_against_the_working_directory(tmp_path, monkeypatch):
    """Stages run in the repository root: an absolute path inside its data/raw/ is tracked."""
    monkeypatch.chdir(tmp_path)
    inside = str(tmp_path / "data/raw/m.jsonl")
    assert parse_params({"data": {"eval": [{"name": "math500", "path": inside}]}})
    with pytest.raises(ParamsError, match="data.eval.0.path"):
        parse_params({"data": {"eval": [{"name": "math500", "path": str(tmp_path / "m.jsonl")}]}})


def test_launch_names_an_accelerate_config_that_exists():
    assert parse_params({}).launch == "cpu"
    for name in ("cpu", "ddp_cpu2", "zero2_cpu2", "zero2_8gpu", "zero3_8gpu"):
        assert parse_params({"launch": name}).launch == name
    with pytest.raises(ParamsError, match=r"launch: .*configs/accelerate/ddp_cpu3\.yaml"):
        parse_params({"launch": "ddp_cpu3"})
    with pytest.raises(ParamsError, match="launch"):
        parse_params({"launch": "../params"})


def test_train_and_eval_seeds_default_to_the_top_level_seed():
    from grpo_core.config.core import parse_params as parse_view
    from grpo_core.config.eval import EvaluateStage
    from grpo_core.config.train import TrainStage

    assert parse_view({"seed": 3}, TrainStage).run_seed == 3
    assert parse_view({"seed": 3, "train": {"seed": 7}}, TrainStage).run_seed == 7
    assert parse_view({"seed": 3}, EvaluateStage).eval_seed == 3
    assert parse_view({"seed": 3, "eval": {"seed": 0}}, EvaluateStage).eval_seed == 0
    with pytest.raises(ParamsError, match="train.seed"):
        parse_params({"train": {"seed": -1}})


def test_the_params_reference_page_is_current_and_describes_every_key():
    """docs/params.md is `python -m grpo_core.params_reference docs/params.md` of today's
    models: a key added, removed or re-described without regenerating it fails here; and every
    key of params.yaml has a row with a description."""
    from grpo_core.params_reference import render, rows

    assert Path("docs/params.md").read_text() == render(), (
        "docs/params.md is stale: python -m grpo_core.params_reference docs/params.md"
    )
    with open("params.yaml") as f:
        raw = yaml.safe_load(f)

    def keys(mapping: dict, prefix: str = "") -> set[str]:
        out = set()
        for k, v in mapping.items():
            out.add(prefix + k)
            if isinstance(v, dict):
                out |= keys(v, f"{prefix}{k}.")
        return out

    documented = {}
    for name, info in Params.model_fields.items():
        section = info.annotation if isinstance(info.annotation, type) else None
        if section is not None and issubclass(section, BaseModel):
            documented |= {r[0].strip("`"): r[3] for r in rows(section, name + ".")}
    section_keys = {k for k in keys(raw) if "." in k}
    assert section_keys <= set(documented), sorted(section_keys - set(documented))
    assert not [k for k in section_keys if not documented[k]], "keys without a description"


def test_a_type_is_named_with_its_bounds_and_choices():
    from typing import Annotated, Literal

    from pydantic import Field

    from grpo_core.params_reference import type_name

    assert type_name(Annotated[float, Field(gt=0, le=1)]) == "float (> 0, <= 1)"
    assert type_name(Literal["a", "b"]) == '"a" \\| "b"'
    assert type_name(list[int] | None) == "list of int or null"
