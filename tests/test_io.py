import json

import pyarrow as pa
import pytest

from grpo_core.data.schema import problems_table, read_problems
from grpo_core.io import atomic_path, write_json, write_parquet


def test_atomic_write_keeps_the_old_file_when_interrupted(tmp_path):
    target = tmp_path / "out.json"
    write_json({"v": 1}, target)
    with pytest.raises(RuntimeError), atomic_path(target) as tmp:
        tmp.write_text("half")
        raise RuntimeError("killed")
    assert json.loads(target.read_text()) == {"v": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]  # no temporary left behind


def test_atomic_directory_replace(tmp_path):
    target = tmp_path / "model"
    for version in ("1", "2"):
        with atomic_path(target) as tmp:
            tmp.mkdir()
            (tmp / "v.txt").write_text(version)
    assert (target / "v.txt").read_text() == "2"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]


def test_read_problems_checks_the_schema(tmp_path):
    row = {
        "id": "a",
        "domain": "math",
        "source": "arith",
        "level": 1,
        "prompt": "p",
        "answer": "1",
        "solution": "s",
        "meta": "{}",
    }
    good = tmp_path / "good.parquet"
    write_parquet(problems_table([row]), good)
    assert read_problems(good).to_pylist() == [row]
    bad = tmp_path / "bad.parquet"
    write_parquet(pa.Table.from_pylist([{"id": "a", "prompt": "p"}]), bad)
    with pytest.raises(ValueError, match=r"bad.parquet: missing columns \['domain'"):
        read_problems(bad)
    with pytest.raises(FileNotFoundError, match="nope.parquet: not found"):
        read_problems(tmp_path / "nope.parquet")


def test_digest_of_a_file_and_of_a_directory(tmp_path):
    import hashlib

    from grpo_core.io import digest

    f = tmp_path / "eval.parquet"
    f.write_bytes(b"abc")
    assert digest(f) == hashlib.sha256(b"\0abc\1").hexdigest()[:16]
    model = tmp_path / "base"
    (model / "sub").mkdir(parents=True)
    (model / "sub" / "b.json").write_bytes(b"2")
    (model / "a.bin").write_bytes(b"1")
    expected = hashlib.sha256(b"a.bin\x001\x01sub/b.json\x002\x01").hexdigest()[:16]
    assert digest(model) == expected
    (model / ".cache").write_bytes(b"not the model's")  # hidden files are left out
    assert digest(model) == expected
    (model / "a.bin").write_bytes(b"3")  # one byte of the weights: another model
    assert digest(model) != expected
    with pytest.raises(FileNotFoundError, match="nowhere"):
        digest(tmp_path / "nowhere")
