import pytest
import yaml

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
    from grpo_core.algorithms.presets import PRESETS

    with open("params.yaml") as f:
        train = yaml.safe_load(f)["train"]
    for key in PRESETS["grpo"]:
        section, _, leaf = key.rpartition(".")
        assert (train[section] if section else train)[leaf] is None, key


@pytest.mark.parametrize(
    "algo, expected",
    [
        ("grpo", dict(advantage="grpo", loss_agg="token-mean", clip_high=0.2)),
        ("dr_grpo", dict(advantage="dr_grpo", loss_agg="seq-mean-token-sum-norm")),
        ("dapo", dict(clip_high=0.28, dynamic_sampling=True, overlong_filter=True)),
        ("codapo", {"codapo.enabled": True, "oc_grpo.mode": "off"}),
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


@pytest.mark.parametrize(
    "raw, expected",
    [
        ({"train": {"group_sise": 8}}, ["train.group_sise: unknown key", "group_size"]),
        ({"train": {"group_size": -4}}, ["train.group_size", "greater than or equal to 2"]),
        ({"train": {"lr": "fast"}}, ["train.lr", "'fast'"]),
        ({"algo": "ppo"}, ["algo", "'ppo'", "allowed values", "'grpo'", "'oc_grpo'"]),
        ({"train": {"curriculum": "medium"}}, ["train.curriculum", "'learnable'"]),
        ({"train": {"oc_grpo": {"c_min": 2.0}}}, ["c_min (2.0) must not exceed c_max"]),
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
        {"data": {"train": ["gsm8k"], "eval": [{"name": "math500", "path": "m.jsonl", "limit": 5}]}}
    ).data
    assert data.train[0].name == "gsm8k" and data.train[0].path is None
    assert (data.eval[0].name, data.eval[0].path, data.eval[0].limit) == ("math500", "m.jsonl", 5)
    # real data alone, without tiny-world domains, is a valid world
    assert parse_params({"data": {"domains": [], "train": ["gsm8k"], "eval": ["math500"]}})


def test_launch_names_an_accelerate_config_that_exists():
    assert parse_params({}).launch == "cpu"
    for name in ("cpu", "ddp_cpu2", "zero2_cpu2", "zero2_8gpu", "zero3_8gpu"):
        assert parse_params({"launch": name}).launch == name
    with pytest.raises(ParamsError, match=r"launch: .*configs/accelerate/ddp_cpu3\.yaml"):
        parse_params({"launch": "ddp_cpu3"})
    with pytest.raises(ParamsError, match="launch"):
        parse_params({"launch": "../params"})
