"""A re-run cell against the committed one (grpo_core/studies/reproduce.py), by hand-built
files; the command itself (`stages.study_reproduce`) runs on a real study in
tests/test_studies.py."""

import io
import json
import math

import pyarrow as pa
import pyarrow.parquet as pq

from grpo_core.studies.reproduce import compare_file, compare_trees, render


def parquet(**columns) -> bytes:
    buf = io.BytesIO()
    pq.write_table(pa.table(columns), buf)
    return buf.getvalue()


def test_the_same_bytes_are_reproduced():
    d = compare_file("cells/a-0.json", b'{"accuracy": 0.5}', b'{"accuracy": 0.5}')
    assert d.identical and d.max_diff == 0.0 and d.passes(0.0)


def test_wall_time_git_state_and_machine_are_not_outputs():
    a = json.dumps({"accuracy": 0.5, "wall_s": {"total": 99.9}, "git": {"commit": "a"},
                    "machine": {"cpu": "AMD EPYC"}})  # fmt: skip
    b = json.dumps({"accuracy": 0.5, "wall_s": {"total": 12.0}, "git": {"commit": "b"},
                    "machine": {"cpu": "Intel Xeon"}})  # fmt: skip
    assert compare_file("cells/a-0.json", a.encode(), b.encode()).identical
    # where the cell recorded no machine (before it was recorded), the same outputs still are
    old = json.dumps({"accuracy": 0.5, "wall_s": {"total": 99.9}})
    assert compare_file("cells/a-0.json", old.encode(), b.encode()).identical


def test_a_number_off_by_a_little_is_its_difference_and_where():
    a = json.dumps({"accuracy": 0.5, "levels": [0.25, 0.75]}).encode()
    b = json.dumps({"accuracy": 0.5, "levels": [0.25, 0.7500001]}).encode()
    d = compare_file("cells/a-0.json", a, b)
    assert not d.identical and d.where == "levels.1"
    assert math.isclose(d.max_diff, 1e-7, rel_tol=1e-6)
    assert not d.passes(0.0) and d.passes(1e-6)


def test_csv_and_parquet_are_compared_cell_by_cell():
    a = b"step,loss,reward\n1,0.5,0.25\n2,0.4,0.5\n"
    b = b"step,loss,reward\n1,0.5,0.25\n2,0.375,0.5\n"
    d = compare_file("cells/a-0/train.csv", a, b)
    assert (d.where, d.max_diff) == ("1.loss", 0.025000000000000022)
    p = parquet(id=["q1", "q2"], accuracy=[1.0, 0.5])
    q = parquet(id=["q1", "q2"], accuracy=[1.0, 0.25])
    d = compare_file("cells/a-0/questions.parquet", p, q)
    assert (d.where, d.max_diff) == ("1.accuracy", 0.25)


def test_what_cannot_be_compared_fails_at_any_tolerance():
    gone = compare_file("cells/a-0/run.json", b"{}", None)
    assert gone.max_diff == math.inf and "re-run" in gone.where and not gone.passes(1e9)
    text = compare_file("cells/a-0.json", b'{"algo": "grpo"}', b'{"algo": "dapo"}')
    assert text.max_diff == math.inf and "algo" in text.where
    keys = compare_file("cells/a-0.json", b'{"a": 1}', b'{"a": 1, "b": 2}')
    assert keys.max_diff == math.inf and "keys differ: b" in keys.where


def test_the_verdict_names_every_file_that_differs():
    diffs = compare_trees(
        {"x.json": b'{"a": 1.0}', "y.json": b'{"a": 2.0}'},
        {"x.json": b'{"a": 1.0}', "y.json": b'{"a": 2.5}'},
    )
    text = render("cell@a-0", diffs, 0.0)
    assert text.splitlines() == [
        "cell@a-0: NOT reproduced: 1 of 2 files bit for bit the same; largest difference 0.5 "
        "(tolerance 0)",
        "  FAIL y.json: 0.5 at a",
    ]
    assert render("cell@a-0", diffs, 1.0).startswith("cell@a-0: reproduced")
