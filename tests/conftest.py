import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from grpo_core.config.model import TinyModelParams
from grpo_core.data.tiny import arith
from grpo_core.models.tiny import build_char_tokenizer, build_tiny_model


@pytest.fixture(scope="session")
def tokenizer():
    texts = [arith.prompt(47, 38), arith.solution(47, 38), "0123456789+=?:QA \n\\boxed{}"]
    return build_char_tokenizer(texts)


@pytest.fixture
def tiny_model(tokenizer):
    params = TinyModelParams(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64)
    return build_tiny_model(tokenizer, params, seed=0).eval()


@pytest.fixture(autouse=True)
def _threads():
    torch.set_num_threads(1)


def copy_repository(dest: Path) -> Path:
    """The repository's files (tracked, and new ones git does not ignore) copied into `dest`:
    a fresh copy to follow the docs or a recipe in without touching this checkout."""
    root = Path(__file__).resolve().parents[1]
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=root,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    for rel in filter(None, listed.split("\0")):
        src = root / rel
        if src.is_file() and not src.is_symlink():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    return dest
