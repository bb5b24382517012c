"""The real-model path on CPU: a Qwen3-architecture model with random weights and Qwen3's real
tokenizer and chat template (`grpo_core.models.qwen3`), its generation, log-probs and the
whole pipeline over it on real-format benchmark rows.

What this cannot show (docs/scale.md#real-models): anything a trained model does (the random
weights solve nothing, so rewards are 0 and training has no signal), bf16 numerics, GPU
memory and speed, vLLM."""

import json
import re
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import torch
from transformers import AutoTokenizer

from grpo_core.data.prompts import render_prompt
from grpo_core.models.qwen3 import EOS, PAD, build_qwen3
from grpo_core.rollout.sampler import generate
from grpo_core.rollout.scoring import token_logprobs

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests/fixtures/benchmarks"
END_RATE = 0.04  # the model ends about 2 completions in 3 within 24 tokens (`build_qwen3`)


@pytest.fixture(scope="module")
def qwen3_dir(tmp_path_factory) -> Path:
    return build_qwen3(tmp_path_factory.mktemp("qwen3") / "qwen3-tiny", end_rate=END_RATE)


@pytest.fixture(scope="module")
def qwen3(qwen3_dir):
    from grpo_core.models.loading import load_model

    model, tokenizer = load_model(qwen3_dir, device=torch.device("cpu"))
    return model.eval(), tokenizer


def test_the_model_has_qwen3s_tokenizer_modules_and_vocabulary(qwen3_dir, qwen3):
    model, tokenizer = qwen3
    assert type(tokenizer).__name__ == "Qwen2Tokenizer" and len(tokenizer) == 151_669
    assert (tokenizer.eos_token, tokenizer.pad_token) == (EOS, PAD)
    assert model.config.model_type == "qwen3" and model.config.vocab_size == 151_936
    names = {n.rsplit(".", 1)[-1] for n, _ in model.named_modules()}
    assert {"q_proj", "k_proj", "v_proj", "o_proj", "q_norm", "k_norm"} <= names
    assert {"gate_proj", "up_proj", "down_proj", "lm_head"} <= names
    # Byte-level BPE: any text round-trips, digits are single tokens (Qwen's pre-tokenizer).
    text = "Natalia sold 48 clips; 48/2 = 24 in May. Ünïcode ✓"
    assert tokenizer.decode(tokenizer(text).input_ids) == text
    assert tokenizer.tokenize("1234") == ["1", "2", "3", "4"]
    assert "Apache" in (qwen3_dir / "TOKENIZER_NOTICE").read_text()
    assert "Apache License" in (qwen3_dir / "TOKENIZER_LICENSE").read_text()


def test_a_prompt_goes_through_qwen3s_chat_template(qwen3):
    _, tokenizer = qwen3
    assert render_prompt(tokenizer, "What is 2+2?", chat=True) == (
        "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n"
    )


def test_generation_stops_at_im_end_and_log_probs_ignore_padding(qwen3, qwen3_dir):
    """Prompts of different lengths (left padding) and completions that end at `<|im_end|>`
    at different steps (right padding): the masked layout's log-probs equal each row's own,
    computed alone with no padding at all, in one piece or in chunks of the LM head."""
    model, _ = qwen3
    tokenizer = AutoTokenizer.from_pretrained(qwen3_dir)
    assert tokenizer.padding_side == "right"  # Qwen's own: the sampler pads on the left anyway
    prompts = [
        render_prompt(tokenizer, q, chat=True)
        for q in ("What is 2+2?", "Natalia sold clips to 48 of her friends in April. How many?")
    ]
    torch.manual_seed(0)
    ro = generate(model, tokenizer, prompts, 4, 1.0, 24)
    eos = tokenizer.convert_tokens_to_ids(EOS)
    ended = ~ro.truncated
    assert 0 < int(ended.sum()) < len(ended), "some rows end before 24 tokens, some do not"
    comp = ro.completion_ids
    for row, mask, done in zip(comp, ro.completion_mask, ended, strict=True):
        n = int(mask.sum())
        if done:  # EOS is the last masked token, then padding
            assert row[n - 1] == eos and (row[n:] == tokenizer.pad_token_id).all()
        assert eos not in row[: n - 1]
    assert all(EOS not in t and PAD not in t for t in ro.texts)  # decoded without specials
    assert len(set(ro.attention_mask[:, : ro.prompt_len].sum(1).tolist())) == 2  # left-padded

    whole, _ = token_logprobs(model, ro.input_ids, ro.attention_mask, ro.prompt_len, 1.0)
    chunked, _ = token_logprobs(
        model, ro.input_ids, ro.attention_mask, ro.prompt_len, 1.0, chunk_bytes=4 * 151_936 * 5
    )
    mask = ro.completion_mask.bool()  # scoring = sampling, on the completions' tokens
    assert torch.allclose(whole[mask], ro.sampler_logp[mask], atol=1e-5)
    for i in range(len(ro.texts)):
        keep = ro.attention_mask[i].bool()
        ids = ro.input_ids[i, keep][None]
        p = int(keep[: ro.prompt_len].sum())
        alone, _ = token_logprobs(model, ids, torch.ones_like(ids), p, 1.0)
        n = int(ro.completion_mask[i].sum())
        assert torch.allclose(whole[i, :n], alone[0], atol=1e-5)
        assert torch.allclose(chunked[i, :n], alone[0], atol=1e-5)


def test_chunked_log_probs_and_gradients_equal_the_whole_head_through_lora(qwen3_dir):
    """LoRA on Qwen3's module names; the LM head in pieces of 7 tokens under activation
    checkpointing against the model's own logits: log-probs, entropies and every adapter
    gradient within 1e-5."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(qwen3_dir, dtype=torch.float32)
    targets = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=targets))
    for name, p in model.named_parameters():
        if "lora_B" in name:  # B starts at 0: make the adapters do something
            torch.nn.init.normal_(p, std=0.02)
    torch.manual_seed(0)
    prompt = torch.randint(0, 151_000, (2, 6)).repeat_interleave(3, 0)  # groups share prompts
    ids = torch.cat([prompt, torch.randint(0, 151_000, (6, 9))], 1)
    attn = torch.ones_like(ids)
    attn[:3, :2] = 0  # group 0's prompt is shorter
    results = []
    for chunk_bytes in (2**40, 4 * 151_936 * 7):
        model.zero_grad()
        logp, entropy = token_logprobs(
            model, ids, attn, 6, 0.7, with_entropy=True, entropy_grad=True, chunk_bytes=chunk_bytes
        )
        (logp.sum() + 0.1 * entropy.sum()).backward()
        grads = [p.grad.clone() for p in model.parameters() if p.requires_grad]
        results.append((logp.detach(), entropy.detach(), grads))
    (lw, ew, gw), (lc, ec, gc) = results
    assert torch.allclose(lw, lc, atol=1e-5) and torch.allclose(ew, ec, atol=1e-5)
    assert len(gw) == 2 * 7 * 2  # A and B of 7 modules in 2 layers
    assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(gw, gc, strict=True))
    assert any(g.abs().max() > 0 for g in gw)


def test_the_trainer_runs_the_lm_head_in_pieces_on_qwens_vocabulary(qwen3_dir, monkeypatch):
    """One GRPO step with LoRA on Qwen's names: 16 rows x 48 tokens of 151,936 float32 logits
    are over LOGIT_CHUNK_BYTES, so every update forward goes through `head_logprobs`, with
    gradients, and the adapters get a gradient through it."""
    from grpo_core.config.params import parse_params
    from grpo_core.models.loading import load_model
    from grpo_core.rollout import scoring
    from grpo_core.training.batch import Question
    from grpo_core.training.run import policy_and_reference, run
    from grpo_core.training.trainer import GRPOTrainer

    train = {"steps": 1, "prompts_per_step": 2, "group_size": 8, "max_new_tokens": 48}
    train |= {"micro_batch_size": 16, "updates_per_batch": 1, "warmup_steps": 0}
    train["lora"] = {"enabled": True, "r": 4, "target_modules": LORA_TARGETS}
    # Reward variance from length alone (the random weights solve nothing): DAPO's overlong term.
    reward = {"weights": {"overlong": 1.0}, "overlong_cache": 40}
    params = parse_params({"train": train, "reward": reward})
    model, tokenizer = load_model(qwen3_dir, device=torch.device("cpu"))
    questions = [
        Question(f"q{i}", "math", 0, render_prompt(tokenizer, q, chat=True), "4", solution="4")
        for i, q in enumerate(["What is 2+2?", "What is 1+3?"])
    ]
    calls = []
    original = scoring.head_logprobs

    def spy(head, hidden, *args, **kw):
        calls.append((tuple(hidden.shape), torch.is_grad_enabled()))
        return original(head, hidden, *args, **kw)

    monkeypatch.setattr(scoring, "head_logprobs", spy)
    torch.manual_seed(0)
    model, reference = policy_and_reference(model, params.train)
    trainer = GRPOTrainer(model, tokenizer, params.train, reference=reference, reward=params.reward)
    metrics = []
    run(trainer, questions, 1, seed=0, on_step=lambda step, m, rows: metrics.append(m))
    piece = scoring.LOGIT_CHUNK_BYTES // (4 * 151_936)  # tokens: more than one piece each
    assert calls and all(grad and rows * t > piece for (rows, t, _), grad in calls), calls
    assert metrics[0]["grad_norm"] > 0


# --- the pipeline ------------------------------------------------------------------------------

# The real-format fixture rows (the benchmarks' own column layouts) the pipeline reads.
BENCHMARKS = {
    "gsm8k": "gsm8k_main_test.parquet",
    "math500": "math500_test.jsonl",
    "gpqa_diamond": "gpqa_diamond.csv",
    "humaneval": "openai_humaneval_test.parquet",
}
LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
NEW_TOKENS = 24


def _params(model_dir: Path) -> dict:
    import yaml

    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    raw = {k: {"name": k, "path": f"data/raw/{v}"} for k, v in BENCHMARKS.items()}
    sampling = {"samples": 2, "max_new_tokens": NEW_TOKENS, "batch_size": 8}
    params["data"].update(
        domains=[], train=[raw["gsm8k"]], eval=[raw[k] for k in ("math500", "gpqa_diamond")]
    )
    params["data"]["eval"].append({**raw["humaneval"], "limit": 4})
    params["model"].update(name=str(model_dir), chat=True)
    params["profile"].update(**sampling, max_per_level=4)
    params["guide"].update(**sampling, fractions=[0.5, 1.0])
    params["train"].update(
        levels=[0],  # GSM8K grades no difficulty
        steps=2,
        prompts_per_step=2,
        group_size=8,
        # 16 rows x at least 28 tokens (all 16 ending sooner is unlikely, and the run is
        # seeded) of 151,936 float32 logits are over LOGIT_CHUNK_BYTES: the trainer's LM head
        # runs in pieces, as on a real model (asserted by the trainer test above)
        max_new_tokens=2 * NEW_TOKENS,
        micro_batch_size=16,
        checkpoint_every=1,
    )
    params["train"]["lora"].update(enabled=True, r=4, alpha=8.0, target_modules=LORA_TARGETS)
    params["eval"].update(**sampling, pass_at=[1, 2])
    # The random weights solve nothing: DAPO's soft overlong punishment (0 down to -1 over
    # tokens 9-48) gives the groups reward variance by length, so the update has work to do.
    params["reward"]["weights"]["overlong"] = 1.0
    params["reward"]["overlong_cache"] = 40
    params["reward"]["code"].update(workers=1)
    return params


@pytest.mark.pipeline
def test_the_pipeline_trains_and_evaluates_a_qwen3_model_on_real_benchmark_rows(
    qwen3_dir, tmp_path
):
    from tests.test_pipeline import make_repo, sh

    repo = make_repo(tmp_path, _params(qwen3_dir), raw=tuple(BENCHMARKS.values()))
    done = sh(repo, "dvc", "repro")
    out = done.stdout + done.stderr

    # The chat template, in every stage that prompts the model unguided.
    shown = re.findall(r"the first prompt as the model is given it: (.*)$", out, re.MULTILINE)
    # profile, train (its questions and its held-out sample, train.heldout), evaluate base and
    # policy
    assert len(shown) == 5, out[-3000:]
    for prompt in map(json.loads, shown):
        assert prompt.startswith("<|im_start|>user\n")
        assert "\\boxed{}" in prompt or "'Answer: X'" in prompt  # the domain's answer form
        assert prompt.endswith("<|im_end|>\n<|im_start|>assistant\n")
    assert json.loads((repo / "models/base/grpo_lab.json").read_text())["chat"] is True

    # Completions end at <|im_end|> or at max_new_tokens; rewards are the verifier's on the
    # decoded text.
    from grpo_core.rewards.verify import verify_batch

    samples = pq.read_table(repo / "data/eval_samples.parquet").to_pylist()
    ended = [s for s in samples if not s["truncated"]]
    assert ended and len(ended) < len(samples)
    assert all(s["length"] <= NEW_TOKENS for s in samples)
    assert all(s["length"] == NEW_TOKENS for s in samples if s["truncated"])
    assert not any(EOS in s["completion"] for s in samples)
    gold = {r["id"]: r for r in pq.read_table(repo / "data/prepared/eval.parquet").to_pylist()}
    rewards = verify_batch(
        [s["domain"] for s in samples],
        [s["completion"] for s in samples],
        [gold[s["id"]]["answer"] for s in samples],
    )
    assert rewards == [s["reward"] for s in samples]

    # Metrics per benchmark, for the base and the trained policy.
    metrics = json.loads((repo / "metrics/eval.json").read_text())
    for model in ("base", "policy"):
        assert set(metrics[model]) == {"math500", "gpqa_diamond", "humaneval", "by_domain"}
        assert set(metrics[model]["by_domain"]) == {"math", "mcq", "code"}
    summary = json.loads((repo / "metrics/train.json").read_text())
    assert summary["steps"] == 2 and summary["rollouts"] == 2 * 2 * 8
    assert summary["num_warnings"] == 0, summary["warnings"]
    trained = pq.read_table(repo / "data/rollouts.parquet").column("trained").to_pylist()
    assert any(trained)
    from safetensors.torch import load_file

    base, policy = (load_file(repo / f"models/{m}/model.safetensors") for m in ("base", "policy"))
    moved = {k for k in base if not torch.equal(base[k].float(), policy[k].float())}
    assert moved and all(k.rsplit(".", 2)[-2] in LORA_TARGETS for k in moved)
    # LoRA on Qwen3's module names: the checkpoints hold the adapters, the policy is merged.
    adapter = json.loads((repo / "checkpoints/step-000002/adapter_config.json").read_text())
    assert sorted(adapter["target_modules"]) == sorted(LORA_TARGETS)
    config = json.loads((repo / "models/policy/config.json").read_text())
    assert config["model_type"] == "qwen3" and config["vocab_size"] == 151_936
    tokenizer = AutoTokenizer.from_pretrained(repo / "models/policy")
    assert tokenizer.eos_token == EOS and render_prompt(tokenizer, "x", chat=True) == (
        "<|im_start|>user\nx<|im_end|>\n<|im_start|>assistant\n"
    )


@pytest.mark.parametrize("temperature", [1.0, 0.2])
def test_the_samplers_speed_ups_draw_the_same_tokens_on_qwen3(qwen3, monkeypatch, temperature):
    """The growing KV cache and the floored scores: the same tokens, log-probs and entropies
    as before them, bit for bit, on Qwen's 151,936-token vocabulary in float32 (the random
    weights' logits are close together: the floor raises nothing at T = 1, some at 0.2)."""
    from tests.sampler_reference import assert_the_same_draws

    model, tokenizer = qwen3
    prompts = [render_prompt(tokenizer, q, chat=True) for q in ("What is 2+2?", "Say hi")]
    assert_the_same_draws(model, tokenizer, prompts, monkeypatch, temperature, 8)


def test_finished_rows_leaving_the_batch_keep_the_draws_on_qwen3(qwen3):
    """`compact` on Qwen3's vocabulary in float32: the same tokens, and log-probs and
    entropies within float rounding, with the batch shrinking as completions end."""
    from tests.sampler_reference import assert_compaction_keeps_draws

    model, tokenizer = qwen3
    prompts = [render_prompt(tokenizer, q, chat=True) for q in ("What is 2+2?", "Say hi", "x")]
    smallest, _ = assert_compaction_keeps_draws(model, tokenizer, prompts, 1.0, 40, 1e-5)
    assert smallest < 12


def test_the_step_benchmark_times_a_step_its_shares_and_an_evaluation(qwen3_dir, tmp_path):
    """`benchmarks.smollm2_step` on a small model (the SmolLM2 table's command, shrunk): a
    step of each configuration with its FLOP-counted share of the matmul limit, and the
    evaluation row, in the table and its JSON."""
    import subprocess
    import sys

    out = tmp_path / "step.md"
    args = ["--model", str(qwen3_dir), "--prompts", "1", "--group", "2", "--new-tokens", "3"]
    args += ["--steps", "1", "--configs", "float32:inverse_cdf:2:hf_merged:0.5"]
    args += ["--eval-problems", "2", "--eval-samples", "2", "--eval-tokens", "4"]
    args += ["--eval-batch", "4", "2", "--eval-compact", "both", "--out", str(out)]
    subprocess.run([sys.executable, "-m", "benchmarks.smollm2_step", *args], check=True, cwd=ROOT)
    result = json.loads(out.with_suffix(".json").read_text())
    step, *evaluations = result["results"]
    assert step["config"] == "float32:inverse_cdf:2:hf_merged:0.5" and step["step_s"] > 0
    assert step["rest_flop"] > step["generate_flop"] > 0  # two updates and pi_old's scoring
    assert step["rest_share"] >= 0 and step["generate_share"] >= 0
    # one evaluation per call size, each without and with finished rows leaving the batch
    assert [(e["eval_batch"], e["compact"]) for e in evaluations] == [
        (4, False),
        (4, True),
        (2, False),
        (2, True),
    ]
    for e in evaluations:
        assert e["config"] == "evaluation" and e["completions"] == 4 and 0 <= e["rewarded"] <= 1
        assert e["generate_flop"] > 0 and e["generate_share"] >= 0
    text = out.read_text()
    assert "| float32 | inverse_cdf | 2 | hf_merged | 0.5 |" in text
    assert "Evaluation (`eval_config`): 4 completions" in text and "| 4 | yes | **" in text


def test_the_trl_benchmark_times_both_trainers_with_lora_in_bf16(qwen3_dir, tmp_path):
    """`benchmarks.trl_smollm2` on a small model (the SmolLM2 comparison's command, shrunk):
    both trainers run with LoRA in bf16, alternate, generate exactly `--new-tokens` tokens, and
    the table prints TRL's config beside the times."""
    import subprocess
    import sys

    out = tmp_path / "trl.md"
    args = ["--model", str(qwen3_dir), "--prompts", "2", "--group", "8", "--new-tokens", "3"]
    args += ["--steps", "1", "--warmup", "0", "--out", str(out)]
    subprocess.run([sys.executable, "-m", "benchmarks.trl_smollm2", *args], check=True, cwd=ROOT)
    report = json.loads(out.with_suffix(".json").read_text())
    for kind in ("ours", "trl"):
        part = report[kind]
        assert part["completion_length_min"] == part["completion_length_max"] == 3
        assert part["ms_per_step"] > part["generation_ms"] > 0
    assert report["ours"]["frac_trained"] == 1.0  # the coin: every group has signal
    assert report["trl_config"]["bf16"] is True and report["trl_config"]["num_iterations"] == 2
    text = out.read_text()
    assert "| ours |" in text and "| trl |" in text and '"loss_type": "dapo"' in text


def test_the_dtype_benchmark_measures_every_sampler_setting(qwen3_dir, tmp_path):
    """`benchmarks.cpu_dtype` on a small model (the SmolLM2 table's command, shrunk): every
    draw and record setting of `benchmarks.cpu_dtype.GENERATIONS` timed in both precisions,
    the bf16 log-probs compared with fp32's, and the table written beside its JSON."""
    import subprocess
    import sys

    from benchmarks.cpu_dtype import GENERATIONS

    out = tmp_path / "dtype.md"
    args = ["--model", str(qwen3_dir), "--batch", "4", "--group", "2", "--new-tokens", "3"]
    args += ["--micro", "2", "--temperature", "0.2", "--matmul-seconds", "0.05", "--out", str(out)]
    subprocess.run([sys.executable, "-m", "benchmarks.cpu_dtype", *args], check=True, cwd=ROOT)
    result = json.loads(out.with_suffix(".json").read_text())
    assert result["temperature"] == 0.2 and "at T = 0.2" in out.read_text()
    for dtype in ("float32", "bfloat16"):
        for _, _, suffix in GENERATIONS:
            assert result[dtype][f"generate{suffix}_tokens_per_s"] > 0
    assert result["bfloat16"]["logp_max_abs_diff"] >= 0


def test_the_update_benchmark_times_a_micro_batch_per_size_and_attention_kernel(
    qwen3_dir, tmp_path
):
    """`benchmarks.smollm2_update` shrunk onto the tiny Qwen3: one row per micro-batch size
    and attention kernel, in the table and its JSON."""
    import subprocess
    import sys

    out = tmp_path / "update.md"
    args = ["--model", str(qwen3_dir), "--sizes", "2", "3", "--attention", "default", "math"]
    args += ["--prompt", "3", "--completion", "4", "--repeats", "1", "--out", str(out)]
    subprocess.run([sys.executable, "-m", "benchmarks.smollm2_update", *args], check=True, cwd=ROOT)
    result = json.loads(out.with_suffix(".json").read_text())
    got = [(r["rows"], r["attention"]) for r in result["results"]]
    assert got == [(2, "default"), (3, "default"), (2, "math"), (3, "math")]
    for r in result["results"]:
        assert r["seconds"] > 0 and abs(r["per_row"] * r["rows"] - r["seconds"]) < 1e-3
    assert "| 3 | math |" in out.read_text()
