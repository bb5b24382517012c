"""The scripts the docs show run as shown: `python scripts/X.py` from the repository root, with
no PYTHONPATH (the set-up installs the project editable, so grpo_core imports from the working
tree, where `python scripts/X.py` would otherwise look in scripts/ only)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("script", ["hint_probe.py", "oc_example.py", "screenshot_plots.py"])
def test_a_script_runs_from_the_root_without_pythonpath(script):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(
        [sys.executable, f"scripts/{script}", "--help"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "usage:" in done.stdout
