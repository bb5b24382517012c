import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from benchmarks.repro import paired_levels


def test_paired_difference_and_its_standard_error(tmp_path):
    # Level 3, two questions, two samples each. q1: base 0/2, policy 2/2 (d = 1);
    # q2: base 1/2, policy 1/2 (d = 0). Mean d = 0.5; sd = sqrt(0.5); se = sd / sqrt(2) = 0.5.
    rows = []
    for model, q, rewards in [
        ("base", "q1", [0, 0]),
        ("policy", "q1", [1, 1]),
        ("base", "q2", [1, 0]),
        ("policy", "q2", [0, 1]),
    ]:
        rows += [
            {"model": model, "decoding": "sampled", "level": 3, "id": q, "reward": float(r)}
            for r in rewards
        ]
        # greedy rows are not samples: they must not enter avg@k
        rows.append({"model": model, "decoding": "greedy", "level": 3, "id": q, "reward": 1.0})
    path = tmp_path / "samples.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    out = paired_levels(path)
    assert out == {
        3: {
            "base": pytest.approx(0.25),
            "policy": pytest.approx(0.75),
            "delta": pytest.approx(0.5),
            "se_delta": pytest.approx(0.5),
            "questions": 2,
        }
    }


def test_overrides_set_dotted_keys_with_yaml_values_and_refuse_unknown_ones(tmp_path):
    import yaml

    from benchmarks.repro import set_params

    path = tmp_path / "params.yaml"
    path.write_text("seed: 0\nmodel:\n  sft:\n    steps: 500\n    stop:\n      level: 4\n")
    set_params(path, ["seed=2", "model.sft.steps=800", "model.sft.stop=null"])
    assert yaml.safe_load(path.read_text()) == {
        "seed": 2,
        "model": {"sft": {"steps": 800, "stop": None}},
    }
    for bad in ("model.sft.stpes=1", "nope.x=1", "seed"):
        with pytest.raises(SystemExit, match="-S"):
            set_params(path, [bad])
    assert yaml.safe_load(path.read_text())["model"]["sft"]["steps"] == 800  # untouched


def test_the_seeds_table_has_a_row_per_seed_with_each_levels_difference():
    from benchmarks.repro import seeds_table

    def result(base: float, policy: float) -> dict:
        level = {"base": base, "policy": policy, "delta": policy - base, "se_delta": 0.012}
        return {
            "levels": {3: level, 4: level},
            "band": [3, 4],
            "band_delta": policy - base,
            "overall_delta": policy - base,
            "total_s": 250.4,
        }

    table = seeds_table({0: result(0.5, 0.75), 7: result(0.2, 0.1)})
    head, rule, *rows = table.splitlines()
    assert head.count("|") == rule.count("|") == rows[0].count("|")
    assert rows[0].startswith("| 0 | 50.0 / 50.0 | 75.0 / 75.0 | +25.0 (1.2) | +25.0 (1.2) |")
    assert rows[1].startswith("| 7 | 20.0 / 20.0 | 10.0 / 10.0 | -10.0 (1.2) |")
    assert rows[1].endswith("| -10.0 | 250 s |")
