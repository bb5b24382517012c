import numpy as np
import pyarrow as pa
import pytest
from PIL import Image

from grpo_core.analysis.figures import token_figure
from grpo_core.analysis.token_dynamics import (
    TOKENS_SCHEMA,
    long_table,
    plot_tables,
    token_dynamics,
)
from grpo_core.errors import InputError
from grpo_core.training.rollout_log import ROLLOUT_LOG

# What the train stage writes (data/rollouts.parquet), the three update-weight columns included.
LOG_SCHEMA = ROLLOUT_LOG
NEW_COLUMNS = ["update_weight_abs", "update_weight_mean", "clip_frac"]


def group(
    step,
    qid,
    level,
    difficulty,
    reward_std,
    adv,
    lc,
    li,
    trained,
    uw=None,
    um=None,
    clip=None,
    guided=False,
):
    return {
        "step": step,
        "id": qid,
        "level": level,
        "reward_mean": 1.0 - difficulty,
        "reward_std": reward_std,
        "mean_length": 20.0,
        "confidence": 0.5,
        "difficulty": difficulty,
        "value": None,
        "adv_abs_mean": adv,
        "logp_correct": lc,
        "logp_incorrect": li,
        "guided": guided,
        "guide_fraction": 0.25 if guided else None,
        "resampled": False,
        "trained": trained,
        "update_weight_abs": uw,
        "update_weight_mean": um,
        "clip_frac": clip,
    }


def make_log():
    rows = [
        # step 0: a, b at level 3; c, d at level 4.
        group(0, "a", 3, 0.25, 0.4, 0.1, -0.5, -1.5, True, 0.2, 0.05, 0.1),
        # b: nothing solved -> no logp_correct; all rewards equal -> zero advantage; guided.
        group(0, "b", 3, 1.0, 0.0, 0.0, None, -2.0, False, guided=True),
        group(0, "c", 4, 0.5, 0.5, 0.3, -1.0, -1.0, True, 0.6, -0.1, 0.3),
        # d: all solved, not trained; a stray weight must be ignored (trained groups only).
        group(0, "d", 4, 0.0, 0.0, 0.0, -0.2, None, False, 9.0, 9.0, 0.9),
        # step 1: only a and c.
        group(1, "a", 3, 0.0, 0.0, 0.0, -0.1, None, False),
        group(1, "c", 4, 0.25, 0.4, 0.2, -0.6, -1.2, True, 0.3, 0.1, 0.0),
    ]
    return pa.Table.from_pylist(rows, schema=LOG_SCHEMA)


PROFILE = pa.table(
    {
        "id": ["a", "b", "c", "z"],  # d is unprofiled; z never appears in the log
        "bin": ["hard", "unsolved", "easy", "solved"],
        "pass_rate": [0.25, 0.0, 0.75, 1.0],
    }
)


def row(tokens, step, by, slice_):
    rows = [r for r in tokens.to_pylist() if (r["step"], r["by"], r["slice"]) == (step, by, slice_)]
    assert len(rows) == 1, (step, by, slice_)
    return rows[0]


def test_all_slice_by_hand():
    tokens = token_dynamics(make_log())
    assert tokens.schema == TOKENS_SCHEMA
    r = row(tokens, 0, "all", "all")
    assert r["questions"] == 4
    assert r["accuracy"] == pytest.approx((0.75 + 0.0 + 0.5 + 1.0) / 4)
    # plain mean over groups that have one: b has no correct rollout, d no incorrect one
    assert r["logp_correct"] == pytest.approx((-0.5 - 1.0 - 0.2) / 3)
    assert r["logp_incorrect"] == pytest.approx((-1.5 - 2.0 - 1.0) / 3)
    assert r["confidence_gap"] == pytest.approx((-1.7 / 3) - (-4.5 / 3))
    assert r["adv_abs_mean"] == pytest.approx(0.1)
    assert r["zero_adv_frac"] == pytest.approx(0.5)  # b and d
    assert r["trained_frac"] == pytest.approx(0.5)
    assert r["guided_frac"] == pytest.approx(0.25)
    # over trained groups a and c only: d's 9.0 is masked out
    assert r["update_weight_abs"] == pytest.approx(0.4)
    assert r["update_weight_mean"] == pytest.approx(-0.025)
    assert r["clip_frac"] == pytest.approx(0.2)

    r1 = row(tokens, 1, "all", "all")
    assert r1["questions"] == 2
    assert r1["accuracy"] == pytest.approx(0.875)
    assert r1["logp_incorrect"] == pytest.approx(-1.2)
    assert r1["update_weight_abs"] == pytest.approx(0.3)  # only c trained


def test_accuracy_and_logp_per_level_per_step():
    tokens = token_dynamics(make_log())
    got = {
        (r["step"], r["slice"]): (r["questions"], r["accuracy"], r["logp_correct"])
        for r in tokens.to_pylist()
        if r["by"] == "level"
    }
    assert got.keys() == {(0, "3"), (0, "4"), (1, "3"), (1, "4")}
    assert got[0, "3"] == (2, pytest.approx(0.375), pytest.approx(-0.5))  # b's null skipped
    assert got[0, "4"] == (2, pytest.approx(0.75), pytest.approx(-0.6))
    assert got[1, "3"] == (1, pytest.approx(1.0), pytest.approx(-0.1))
    assert got[1, "4"] == (1, pytest.approx(0.75), pytest.approx(-0.6))
    # a level whose groups all lack logp_incorrect gives null, not NaN or an error
    assert row(tokens, 1, "level", "3")["logp_incorrect"] is None
    assert row(tokens, 1, "level", "3")["confidence_gap"] is None
    # untrained-only slice: null weights
    assert row(tokens, 1, "level", "3")["update_weight_abs"] is None
    assert row(tokens, 1, "level", "3")["trained_frac"] == 0.0


def test_row_order_without_profile():
    tokens = token_dynamics(make_log())
    keys = list(
        zip(
            tokens["step"].to_pylist(),
            tokens["by"].to_pylist(),
            tokens["slice"].to_pylist(),
            strict=True,
        )
    )
    assert keys == [
        (0, "all", "all"),
        (0, "level", "3"),
        (0, "level", "4"),
        (1, "all", "all"),
        (1, "level", "3"),
        (1, "level", "4"),
    ]


def test_adv_quantiles_linear_interpolation():
    # Five groups at one step, |adv| = 0.4, 0.1, 0.0, 0.2, 1.0; sorted 0, .1, .2, .4, 1.
    # Linear interpolation at position q * (n - 1):
    #   p10: pos 0.4 -> 0 + 0.4 * 0.1 = 0.04
    #   p50: pos 2.0 -> 0.2
    #   p90: pos 3.6 -> 0.4 + 0.6 * (1.0 - 0.4) = 0.76
    advs = [0.4, 0.1, 0.0, 0.2, 1.0]
    log = pa.Table.from_pylist(
        [group(7, f"q{i}", 1, 0.5, 0.5, a, -1.0, -2.0, True) for i, a in enumerate(advs)],
        schema=LOG_SCHEMA,
    )
    r = row(token_dynamics(log), 7, "all", "all")
    assert r["adv_abs_p10"] == pytest.approx(0.04)
    assert r["adv_abs_p50"] == pytest.approx(0.2)
    assert r["adv_abs_p90"] == pytest.approx(0.76)
    assert r["adv_abs_p90"] == pytest.approx(np.quantile(advs, 0.9, method="linear"))
    assert r["adv_abs_mean"] == pytest.approx(0.34)
    assert r["zero_adv_frac"] == 0.0

    # step 0 of the hand log: sorted 0, 0, .1, .3 -> p10 0, p50 0.05, p90 .1 + .7 * .2 = .24
    r0 = row(token_dynamics(make_log()), 0, "all", "all")
    assert (r0["adv_abs_p10"], r0["adv_abs_p50"], r0["adv_abs_p90"]) == (
        pytest.approx(0.0),
        pytest.approx(0.05),
        pytest.approx(0.24),
    )


def test_bins_from_profile_with_unprofiled_id():
    tokens = token_dynamics(make_log(), PROFILE)
    bins = [
        (r["step"], r["slice"], r["questions"], r["accuracy"])
        for r in tokens.to_pylist()
        if r["by"] == "bin"
    ]
    # ordered by difficulty (unsolved, hard, easy, solved), unprofiled last; no empty bins
    assert bins == [
        (0, "unsolved", 1, 0.0),
        (0, "hard", 1, 0.75),
        (0, "easy", 1, 0.5),
        (0, "unprofiled", 1, 1.0),
        (1, "hard", 1, 1.0),
        (1, "easy", 1, 0.75),
    ]
    assert row(tokens, 0, "bin", "unprofiled")["update_weight_abs"] is None  # d not trained
    # the all and level rows are the same with or without a profile
    plain = token_dynamics(make_log())
    assert tokens.filter(pa.compute.not_equal(tokens["by"], "bin")).equals(plain)


def test_old_log_without_update_weight_columns_gives_nulls():
    old = make_log().drop_columns(NEW_COLUMNS)
    tokens = token_dynamics(old, PROFILE)
    for name in NEW_COLUMNS:
        assert tokens[name].null_count == tokens.num_rows
    new = token_dynamics(make_log(), PROFILE)
    assert tokens.drop_columns(NEW_COLUMNS).equals(new.drop_columns(NEW_COLUMNS))


def test_missing_required_column_names_it():
    with pytest.raises(InputError, match="rollout log is missing column 'difficulty'"):
        token_dynamics(make_log().drop_columns(["difficulty"]))
    with pytest.raises(InputError, match="'adv_abs_mean', 'trained'"):
        token_dynamics(make_log().drop_columns(["adv_abs_mean", "trained"]))
    with pytest.raises(InputError, match="profile table is missing column 'bin'"):
        token_dynamics(make_log(), PROFILE.drop_columns(["bin"]))


def test_profile_with_conflicting_bins_is_an_input_error():
    profile = pa.table({"id": ["a", "a"], "bin": ["hard", "easy"]})
    with pytest.raises(InputError, match="'a'"):
        token_dynamics(make_log(), profile)


def test_empty_log():
    tokens = token_dynamics(make_log().slice(0, 0))
    assert tokens.num_rows == 0 and tokens.schema == TOKENS_SCHEMA
    tables = plot_tables(tokens)
    assert all(t.num_rows == 0 for t in tables.values())


def test_plot_tables_columns_and_values():
    tables = plot_tables(token_dynamics(make_log(), PROFILE))
    assert list(tables) == [
        "confidence",
        "advantage",
        "convergence",
        "convergence_long",
        "update_weights",
    ]
    assert tables["confidence"].column_names == ["step", "logp_correct", "logp_incorrect"]
    assert tables["advantage"].column_names == [
        "step",
        "adv_abs_p10",
        "adv_abs_p50",
        "adv_abs_p90",
        "zero_adv_frac",
    ]
    assert tables["update_weights"].column_names == [
        "step",
        "update_weight_abs",
        "update_weight_mean",
        "clip_frac",
    ]
    conv = tables["convergence"]
    assert conv.column_names == [
        "step",
        "level3",
        "level4",
        "bin_unsolved",
        "bin_hard",
        "bin_easy",
        "bin_unprofiled",
    ]
    assert conv.to_pydict() == {
        "step": [0, 1],
        "level3": [pytest.approx(0.375), 1.0],
        "level4": [0.75, 0.75],
        "bin_unsolved": [0.0, None],  # b is absent at step 1
        "bin_hard": [0.75, 1.0],
        "bin_easy": [0.5, 0.75],
        "bin_unprofiled": [1.0, None],
    }
    assert tables["confidence"]["logp_incorrect"].to_pylist() == [pytest.approx(-1.5), -1.2]
    assert tables["advantage"]["zero_adv_frac"].to_pylist() == [0.5, 0.5]
    assert tables["update_weights"].to_pydict() == {
        "step": [0, 1],
        "update_weight_abs": [pytest.approx(0.4), pytest.approx(0.3)],
        "update_weight_mean": [pytest.approx(-0.025), pytest.approx(0.1)],
        "clip_frac": [pytest.approx(0.2), 0.0],
    }
    assert all(t.schema.field("step").type == pa.int32() for t in tables.values())

    # The DVC plot's file: the same numbers, series by series, the null slices left out.
    assert tables["convergence_long"].to_pydict() == {
        "step": [0, 1, 0, 1, 0, 0, 1, 0, 1, 0],
        "series": ["level3", "level3", "level4", "level4", "bin_unsolved", "bin_hard",
                   "bin_hard", "bin_easy", "bin_easy", "bin_unprofiled"],
        "accuracy": [pytest.approx(0.375), 1.0, 0.75, 0.75, 0.0, 0.75, 1.0, 0.5, 0.75, 1.0],
    }  # fmt: skip

    no_bins = plot_tables(token_dynamics(make_log()))["convergence"]
    assert no_bins.column_names == ["step", "level3", "level4"]


def test_long_table_keeps_column_order_and_drops_missing_values():
    wide = pa.table(
        {
            "step": pa.array([10, 20], type=pa.int32()),
            "q": [0.5, None],
            "embed": [float("nan"), 0.25],
        }
    )
    long = long_table(wide, "rel_update")
    assert long.schema == pa.schema(
        [("step", pa.int32()), ("series", pa.string()), ("rel_update", pa.float64())]
    )
    assert long.to_pylist() == [
        {"step": 10, "series": "q", "rel_update": 0.5},
        {"step": 20, "series": "embed", "rel_update": 0.25},
    ]
    assert long_table(wide.select(["step"]), "x").num_rows == 0


def test_token_figure_writes_png(tmp_path):
    target = tmp_path / "plots" / "tokens.png"
    token_figure(token_dynamics(make_log(), PROFILE), target)
    with Image.open(target) as img:
        assert img.format == "PNG"
        assert img.size[0] > 500 and img.size[1] > 400
    assert [p.name for p in target.parent.iterdir()] == ["tokens.png"]  # no temp left behind

    # an old log (no update weights) still draws, as does an overwrite
    token_figure(token_dynamics(make_log().drop_columns(NEW_COLUMNS)), target)
    with Image.open(target) as img:
        img.verify()
