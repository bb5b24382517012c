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
