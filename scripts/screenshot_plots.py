"""Screenshot the DVC plots page in a headless browser with no network: docs/img/plots.png.

    python scripts/screenshot_plots.py [--out docs/img/plots.png] [--width 1400]

Needs `dvc` (the venv's) and Chromium (`apt-get install chromium`). It runs `dvc plots show`
into a temporary folder (the repo's dvc_plots/ is left alone) for the Vega-Lite plots declared
in dvc.yaml (not the PNG figures, which docs/dynamics.md shows), and opens the page with every
host name unresolvable and a dead proxy: a page that still loaded Vega from a CDN would draw
nothing. The screenshot is cropped to the drawn area and reduced to a 256-colour palette, so
the file stays small.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml
from PIL import Image, ImageChops

ROOT = Path(__file__).resolve().parent.parent
BROWSERS = ("chromium", "chromium-browser", "google-chrome")


def _literal(plot_id: str) -> str:
    """A `dvc plots show` target matching exactly `plot_id`. DVC reads targets as regular
    expressions matched at the start of an id, and drops backslashes on the way, so special
    characters are escaped as one-character classes."""
    if "\\" in plot_id or "^" in plot_id:
        raise SystemExit(f"cannot target the plot {plot_id!r}: rename it")
    return "".join(f"[{c}]" if c in "().*+?{}[]|$" else c for c in plot_id) + "$"


def declared_plots() -> list[str]:
    """The ids of the Vega-Lite plots dvc.yaml declares, on stage outputs (the file's path)
    then at its top level (not the PNG figures, which are on docs/dynamics.md)."""
    doc = yaml.safe_load((ROOT / "dvc.yaml").read_text())
    on_stages = [
        next(iter(p))
        for stage in doc["stages"].values()
        for p in stage.get("plots", [])
        if isinstance(p, dict) and "y" in next(iter(p.values()))
    ]
    top = [
        next(iter(p)) for p in doc["plots"] if isinstance(p, dict) and "y" in next(iter(p.values()))
    ]
    return on_stages + top


def plots_page(out_dir: Path) -> Path:
    """`dvc plots show` of the declared Vega-Lite plots into `out_dir`; returns the page."""
    venv_bin = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{venv_bin}{os.pathsep}{os.environ['PATH']}"}
    targets = [_literal(plot_id) for plot_id in declared_plots()]
    subprocess.run(
        ["dvc", "plots", "show", "-o", str(out_dir), *targets],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
    )
    return out_dir / "index.html"


def screenshot(page: Path, target: Path, width: int, height: int) -> None:
    """Chromium's screenshot of `page`, offline: no name resolves, every request goes to a
    proxy that does not exist."""
    browser = next((b for b in BROWSERS if shutil.which(b)), None)
    if browser is None:
        raise SystemExit("no Chromium found: apt-get install -y chromium")
    subprocess.run(
        [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--host-resolver-rules=MAP * ~NOTFOUND",
            "--proxy-server=127.0.0.1:9",
            f"--window-size={width},{height}",
            "--virtual-time-budget=10000",
            f"--screenshot={target}",
            page.as_uri(),
        ],
        check=True,
        capture_output=True,
    )


def crop_and_shrink(raw: Path, out: Path, margin: int = 12) -> Image.Image:
    """Crop `raw` to its non-white content plus a margin, save it as a palette PNG."""
    img = Image.open(raw).convert("RGB")
    box = ImageChops.difference(img, Image.new("RGB", img.size, "white")).getbbox()
    if box is None:
        raise SystemExit(f"{raw}: the page is blank, the plots did not draw")
    left, top, right, bottom = box
    img = img.crop(
        (
            max(0, left - margin),
            max(0, top - margin),
            min(img.width, right + margin),
            min(img.height, bottom + margin),
        )
    )
    img = img.quantize(colors=256, method=Image.Quantize.MEDIANCUT)
    out.parent.mkdir(parents=True, exist_ok=True)
    img.save(out, optimize=True)
    return img


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--out", type=Path, default=ROOT / "docs/img/plots.png")
    ap.add_argument("--width", type=int, default=1400)
    ap.add_argument("--height", type=int, default=3000, help="window height: above the page's")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        page = plots_page(Path(tmp) / "plots")
        raw = Path(tmp) / "raw.png"
        screenshot(page, raw, args.width, args.height)
        img = crop_and_shrink(raw, args.out)
    size_kb = args.out.stat().st_size / 1e3
    print(f"{args.out}: {img.width}x{img.height}, {size_kb:.0f} kB")


if __name__ == "__main__":
    main()
