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
