"""The set-up holds beyond this machine: `make` installs torch from the PyTorch index that
TORCH_INDEX names (PyPI's Linux torch is the multi-GB CUDA build), at requirements.lock's pin,
before anything else can pull a torch of its own; without TORCH_INDEX it leaves the choice to
pip's configured sources, as here (a local CPU wheel). `make -n -B` prints the commands
without running them."""

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CPU = "https://download.pytorch.org/whl/cpu"


def _install_commands(*args: str) -> list[str]:
    done = subprocess.run(
        ["make", "-n", "-B", ".venv/.installed", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    return [line for line in done.stdout.splitlines() if "pip install" in line]


def _pin() -> str:
    lock = (ROOT / "requirements.lock").read_text()
    (pin,) = re.findall(r"^torch==\S+$", lock, flags=re.M)
    return pin


@pytest.mark.parametrize("index", [CPU, "https://download.pytorch.org/whl/cu130"])
def test_torch_comes_first_from_the_named_index_at_the_locked_version(index):
    commands = _install_commands(f"TORCH_INDEX={index}")
    assert f'"{_pin()}" --index-url {index}' in commands[0]
    assert "-r requirements.lock" in commands[1]


def test_without_an_index_pips_own_sources_decide():
    commands = _install_commands()
    assert not any("--index-url" in c for c in commands)
    assert "-r requirements.lock" in commands[0]


def test_the_readme_gives_both_install_commands():
    readme = (ROOT / "README.md").read_text()
    assert f"make repro TORCH_INDEX={CPU}" in readme
    assert "make repro TORCH_INDEX=https://download.pytorch.org/whl/cu" in readme
