"""The DVC plots of this repository, rendered by DVC itself from the committed metrics/ files:
every plot dvc.yaml declares draws, from files in git (a clean clone needs no `dvc pull` or
`dvc repro`), once each, in one colour per series, on a page that loads nothing from the
network. And the long-format files behind the plots whose series vary.
"""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest
import torch
import yaml
from safetensors.torch import save_file

from grpo_core.analysis.tensor_dynamics import tensor_dynamics, update_by_module

ROOT = Path(__file__).resolve().parents[1]
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".gif", ".svg")
# The dvclive folder the train stage writes (a cached output now); DVC used to plot every file
# in it on its own.
DVCLIVE_PLOTS = "metrics/train/plots/metrics/"


def _dvc(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    """The venv's `dvc`, as a user runs it."""
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "DVC_NO_ANALYTICS": "1",
    }
    done = subprocess.run(["dvc", *args], cwd=cwd, env=env, capture_output=True, text=True)
    assert done.returncode == 0, f"dvc {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
    return done


def declared() -> dict[str, dict]:
    """Every plot dvc.yaml declares, {id: properties}: on a stage's output (id: the file, whose
    one y column is normalised to `y: {file: column}`) and in the top-level `plots:` section;
    an image's properties are empty."""
    doc = yaml.safe_load((ROOT / "dvc.yaml").read_text())
    out = {}
    for stage in doc["stages"].values():
        for entry in stage.get("plots", []):
            path, props = (entry, {}) if isinstance(entry, str) else next(iter(entry.items()))
            props = {k: v for k, v in (props or {}).items() if k != "cache"}
            if "y" in props:
                props["y"] = {path: props["y"]}
            out[path] = props
    for entry in doc["plots"]:
        plot_id, props = (entry, {}) if isinstance(entry, str) else next(iter(entry.items()))
        out[plot_id] = props or {}
    # DVC draws every dvc.yaml's plots: a study's (grpo_core/studies/dvcfile.py) name files
    # relative to its folder.
    for path in sorted(ROOT.glob("studies/*/dvc.yaml")):
        folder = path.parent.relative_to(ROOT).as_posix()
        for entry in yaml.safe_load(path.read_text()).get("plots", []):
            plot_id, props = next(iter(entry.items()))
            ys = {f"{folder}/{f}": cols for f, cols in props["y"].items()}
            out[plot_id] = {**props, "y": ys}
    return out


def files_of(plot_id: str, props: dict) -> list[str]:
    """The data files one declared plot reads."""
    return list(props["y"]) if "y" in props else [plot_id]


def y_columns(props: dict) -> set[str]:
    """The y columns a declared line plot names (`y: {file: column or [columns]}`)."""
    return {c for cols in props["y"].values() for c in (cols if isinstance(cols, list) else [cols])}


def series_count(props: dict, values: list[dict]) -> int:
    """How many lines a declared plot draws for one revision: its y columns, or for a
    long-format file (a `series` column) its distinct series."""
    if any("series" in row for row in values):
        return len({row["series"] for row in values})
    return len(y_columns(props))


@pytest.fixture(scope="module")
def shown() -> dict:
    """`dvc plots show --json` in the repository: {"data": {id: [render]}, "errors": [...]}."""
    return json.loads(_dvc("plots", "show", "--json").stdout)


def test_every_declared_plot_renders_with_data_and_no_error(shown):
    """Each declared plot comes back with data, and a line plot with every series it names:
    its y columns, or the `series` of a long file (the convergence plot's levels and bins)."""
    assert shown.get("errors", []) == []
    plots = declared()
    assert len(plots) >= 15
    for plot_id, props in plots.items():
        renders = shown["data"].get(plot_id)
        assert renders, f"{plot_id!r} did not render"
        (render,) = renders  # one revision: the workspace
        if plot_id.endswith(IMAGE_SUFFIXES):
            assert render["type"] == "image" and render["url"], plot_id
            continue
        assert render["type"] == "vega", plot_id
        values = render["content"]["data"]["values"]
        y_field = render["content"]["encoding"]["y"]["field"]
        assert sum(row.get(y_field) not in (None, "") for row in values) >= 2, plot_id
        assert {row["field"] for row in values} == y_columns(props), plot_id
    long = shown["data"]["hierarchical convergence (group accuracy by level and profile bin)"]
    series = {row["series"] for row in long[0]["content"]["data"]["values"]}
    assert {"level3", "level4", "bin_hard", "bin_easy"} <= series


def test_plotted_files_are_in_git_not_in_the_dvc_cache():
    """So a clean clone renders every plot: each file exists, git does not ignore it, and the
    stage output that holds it has `cache: false` (DVC leaves it to git)."""
    from dvc.repo import Repo

    files = sorted({f for pid, props in declared().items() for f in files_of(pid, props)})
    with Repo(str(ROOT)) as repo:
        for path in files:
            assert (ROOT / path).is_file(), path
            ignored = subprocess.run(["git", "check-ignore", "-q", path], cwd=ROOT)
            assert ignored.returncode == 1, f"{path} is git-ignored"
            outs = repo.find_outs_by_path(str(ROOT / path), strict=False)
            assert outs and not any(out.use_cache for out in outs), f"{path} is DVC-cached"


def test_no_plot_is_drawn_twice(shown):
    """Only the declared plots render (no dvclive file plotted on its own), and no column is
    drawn twice: a stage-level plot (an uncached output must be a plot for DVC's run cache)
    and the top-level ones split a file's columns between them."""
    rendered = set(shown["data"])
    assert not [p for p in rendered if p.startswith(DVCLIVE_PLOTS)]
    assert rendered == set(declared())
    # No two plots draw the same column of the same file.
    drawn = [
        (f, c)
        for props in declared().values()
        for f, cols in props.get("y", {}).items()
        for c in (cols if isinstance(cols, list) else [cols])
    ]
    assert len(drawn) == len(set(drawn)), sorted(d for d in drawn if drawn.count(d) > 1)


def test_multi_series_plots_get_one_colour_per_series(shown):
    """DVC's default template colours by revision and tells a plot's fields apart by dash only;
    every declared line plot uses .dvc/plots/series.json, which colours by a series name built
    from what varies (rev, file, field, a long file's `series`), from a palette with a distinct
    colour for each line."""
    multi = 0
    for plot_id, props in declared().items():
        if plot_id.endswith(IMAGE_SUFFIXES):
            continue
        assert props.get("template") == "series", plot_id
        (render,) = shown["data"][plot_id]
        spec = render["content"]
        color = spec["encoding"]["color"]
        assert color["field"] == "series_label" and color["type"] == "nominal", plot_id
        assert "series_label" in [t.get("as") for t in spec["transform"]], plot_id
        n = series_count(props, spec["data"]["values"])
        multi += n > 1
        assert len(set(color["scale"]["range"])) >= n, plot_id
        assert "strokeDash" not in spec["encoding"], plot_id
    # confidence, advantage, convergence, update weights, modules, SFT calibration, ...
    assert multi >= 8


def test_plots_page_loads_nothing_from_the_network(tmp_path):
    """`dvc plots show` writes its page from configs/plots/offline.html (.dvc/config): Vega,
    Vega-Lite and vega-embed inlined, at the versions scripts/vendor_vega.py pins, and no
    <script src=...>, so the page draws offline."""
    out = tmp_path / "plots"
    _dvc("plots", "show", "-o", str(out), "metrics/sft/loss.csv", "hierarchical convergence")
    page = (out / "index.html").read_text()
    assert "<script src" not in page.replace(" ", "") and "cdn.jsdelivr" not in page
    assert page.count("vegaEmbed('#") == 2
    spec = importlib.util.spec_from_file_location("vendor_vega", ROOT / "scripts/vendor_vega.py")
    vendor = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(vendor)
    for name, version, _ in vendor.PACKAGES:
        assert f"<script>/* {name} {version} */" in page, name
    assert 0.5e6 < (ROOT / "configs/plots/offline.html").stat().st_size < 1.5e6


def _write_model(directory: Path, tensors: dict[str, torch.Tensor]) -> Path:
    directory.mkdir(parents=True)
    save_file(tensors, str(directory / "model.safetensors"))
    return directory


def test_update_by_module_is_long_with_one_series_per_module_type(tmp_path):
    """metrics/dynamics/update_by_module.csv's table, from real safetensors checkpoints: one row
    per (module type, checkpoint), module types in MODULE_TYPES order (q before embed), and
    ||W_t - W_0|| / ||W_0|| by hand: q (norm 1) gains 0.1 in each of its 2 entries per step, the
    embedding (norm 2) moves by a norm-1 step at step 20 only."""
    q = torch.tensor([[1.0, 0.0]])
    embed = torch.tensor([[2.0, 0.0]])
    name_q, name_e = "model.layers.0.self_attn.q_proj.weight", "model.embed_tokens.weight"
    base = _write_model(tmp_path / "base", {name_e: embed, name_q: q})
    checkpoints = [
        (10, _write_model(tmp_path / "s10", {name_e: embed, name_q: q + 0.1})),
        (20, _write_model(tmp_path / "s20", {name_e: embed * 1.5, name_q: q + 0.2})),
    ]
    table = update_by_module(tensor_dynamics(base, checkpoints, progress=False))
    assert table.schema == pa.schema(
        [("step", pa.int32()), ("series", pa.string()), ("rel_update", pa.float64())]
    )
    rows = table.to_pylist()
    assert [(r["series"], r["step"]) for r in rows] == [
        ("q", 10),
        ("q", 20),
        ("embed", 10),
        ("embed", 20),
    ]
    assert [r["rel_update"] for r in rows] == pytest.approx(
        [(2 * 0.1**2) ** 0.5, (2 * 0.2**2) ** 0.5, 0.0, 0.5]
    )
