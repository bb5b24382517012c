import pytest
import yaml

from grpo_core.config import Params, ParamsError, load_params, parse_params


def test_repository_params_yaml_is_valid_and_complete():
    params = load_params("params.yaml")
    with open("params.yaml") as f:
        raw = yaml.safe_load(f)
    # Every declared field is spelled out in params.yaml, so users see every knob.
    assert set(raw) == set(Params.model_fields)
    for section in ("data", "model", "train", "eval"):
        assert set(raw[section]) == set(type(getattr(params, section)).model_fields), section


@pytest.mark.parametrize(
    "raw, expected",
    [
        ({"train": {"group_sise": 8}}, ["train.group_sise: unknown key", "group_size"]),
        ({"train": {"group_size": -4}}, ["train.group_size", "greater than or equal to 2"]),
        ({"train": {"lr": "fast"}}, ["train.lr", "'fast'"]),
        ({"algo": "ppo"}, ["algo", "'ppo'", "allowed values", "'grpo'"]),
        ({"data": {"levels": [0, 6]}}, ["data.levels.0", "data.levels.1"]),
        ({"eval": {"samples": 2, "pass_at": [4]}}, ["pass_at values [4] exceed samples (2)"]),
        ({"model": {"tiny": {"hidden_size": 100, "num_heads": 3}}}, ["divisible by num_heads"]),
        ({"bogus": 1}, ["bogus: unknown key", "allowed keys here: seed, algo"]),
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
