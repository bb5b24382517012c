"""Tensor-level update statistics (grpo_core.analysis.tensor_dynamics) on real safetensors / peft
directories,
against hand-computed answers."""

import json
import math
import warnings

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from grpo_core.analysis.figures import heatmap_figure
from grpo_core.analysis.spectrum import singular_values, spectrum_stats
from grpo_core.analysis.tensor_dynamics import TENSORS_SCHEMA, aggregate, classify, tensor_dynamics
from grpo_core.analysis.weights import load_update
from grpo_core.errors import InputError


def write(directory, tensors, file="model.safetensors"):
    directory.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous().clone() for k, v in tensors.items()}, str(directory / file))
    return directory


def run(base, checkpoints, **kwargs):
    table = tensor_dynamics(base, checkpoints, progress=False, **kwargs)
    assert table.schema == TENSORS_SCHEMA
    return table


def rows(table, name):
    """The rows of one tensor, by step."""
    return sorted((r for r in table.to_pylist() if r["name"] == name), key=lambda r: r["step"])


def orthonormal(n, k, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.linalg.qr(torch.randn(n, k, generator=g, dtype=torch.float64))[0]


def erank(values):
    p = values / values.sum()
    p = p[p > 0]
    return math.exp(-(p * p.log()).sum().item())


# ---------------------------------------------------------------------------------------------
# Names


@pytest.mark.parametrize(
    "name, expected",
    [
        ("model.layers.3.self_attn.q_proj.weight", (3, "q")),
        ("model.layers.3.self_attn.q_proj.bias", (3, "q")),
        ("model.layers.12.self_attn.k_proj.weight", (12, "k")),
        ("model.layers.0.self_attn.v_proj.weight", (0, "v")),
        ("model.layers.0.self_attn.o_proj.weight", (0, "o")),
        ("model.layers.1.mlp.gate_proj.weight", (1, "gate")),
        ("model.layers.1.mlp.up_proj.weight", (1, "up")),
        ("model.layers.1.mlp.down_proj.weight", (1, "down")),
        ("model.layers.1.input_layernorm.weight", (1, "norm")),
        ("model.layers.1.self_attn.q_norm.weight", (1, "norm")),
        ("model.norm.weight", (None, "norm")),
        ("model.embed_tokens.weight", (None, "embed")),
        ("lm_head.weight", (None, "lm_head")),
        ("transformer.h.2.ln_1.weight", (2, "norm")),
        ("transformer.h.2.attn.c_attn.weight", (2, "other")),
        ("transformer.wte.weight", (None, "embed")),
        ("blocks.5.mlp.experts.3.w2.weight", (5, "down")),
        ("model.rotary_emb.inv_freq", (None, "other")),
    ],
)
def test_classify(name, expected):
    assert classify(name) == expected


# ---------------------------------------------------------------------------------------------
# One tensor, one checkpoint: hand-computed values


def test_rel_update_by_hand(tmp_path):
    # W_0 = 3 * ones(2, 2): ||W_0||_F = sqrt(4 * 9) = 6. ΔW = ones(2, 2): ||ΔW||_F = 2, so
    # rel_update = 2 / 6 = 1/3; ΔW = 2 * (e/√2)(e/√2)^T has σ = (2, 0): stable rank 4 / 4 = 1.
    w0 = 3 * torch.ones(2, 2)
    base = write(tmp_path / "base", {"w": w0})
    ckpt = write(tmp_path / "c1", {"w": w0 + 1})
    (row,) = rows(run(base, [(7, ckpt)]), "w")
    assert row["step"] == 7 and row["shape"] == "2x2" and row["numel"] == 4
    assert row["base_norm"] == pytest.approx(6.0)
    assert row["update_norm"] == pytest.approx(2.0)
    assert row["rel_update"] == pytest.approx(1 / 3)
    assert row["changed_frac"] == 1.0 and row["update_sparsity"] == 0.0
    assert row["stable_rank"] == pytest.approx(1.0, abs=1e-6)
    assert row["effective_rank"] == pytest.approx(1.0, abs=1e-4)
    assert row["svd"] == "exact" and row["spectrum_energy"] == 1.0
    assert row["cos_prev"] is None and row["increment_norm"] == pytest.approx(2.0)


def test_rank_one_and_rank_two_updates(tmp_path):
    w0 = torch.randn(12, 20, generator=torch.Generator().manual_seed(0))
    u, v = orthonormal(12, 2, seed=1), orthonormal(20, 2, seed=2)
    rank1 = (0.5 * u[:, :1] @ v[:, :1].T).float()  # σ = (0.5)
    rank2 = (0.5 * u @ v.T).float()  # σ = (0.5, 0.5): equal singular values
    base = write(tmp_path / "base", {"a": w0, "b": w0})
    ckpt = write(tmp_path / "c", {"a": w0 + rank1, "b": w0 + rank2})
    table = run(base, [(1, ckpt)])
    (a,), (b,) = rows(table, "a"), rows(table, "b")
    assert a["stable_rank"] == pytest.approx(1.0, rel=1e-4)
    assert a["effective_rank"] == pytest.approx(1.0, rel=1e-3)
    assert b["stable_rank"] == pytest.approx(2.0, rel=1e-4)
    assert b["effective_rank"] == pytest.approx(2.0, rel=1e-3)


def test_changed_frac_counts_touched_entries(tmp_path):
    w0 = torch.randn(4, 5, generator=torch.Generator().manual_seed(0))
    w1 = w0.clone()
    w1[0, 0] += 1.0
    w1[2, 3] -= 0.5
    w1[3, 4] += 2.0
    base = write(tmp_path / "base", {"w": w0})
    ckpt = write(tmp_path / "c", {"w": w1})
    (row,) = rows(run(base, [(1, ckpt)]), "w")
    assert row["changed_frac"] == pytest.approx(3 / 20)
    assert row["update_sparsity"] == pytest.approx(17 / 20)


def test_untouched_tensor_is_zero(tmp_path):
    w0 = torch.randn(6, 4, generator=torch.Generator().manual_seed(0))
    bias = torch.randn(6, generator=torch.Generator().manual_seed(1))
    base = write(tmp_path / "base", {"w": w0, "x.bias": bias, "moved": w0})
    c1 = write(tmp_path / "c1", {"w": w0, "x.bias": bias, "moved": w0 + 1})
    c2 = write(tmp_path / "c2", {"w": w0, "x.bias": bias, "moved": w0 + 2})
    table = run(base, [(1, c1), (2, c2)])
    for row in rows(table, "w"):
        assert row["rel_update"] == 0 and row["update_norm"] == 0 and row["changed_frac"] == 0
        assert row["update_sparsity"] == 1
        assert row["stable_rank"] == 0 and row["effective_rank"] == 0
        assert row["svd"] is None and row["spectrum_energy"] is None and row["cos_prev"] is None
    for row in rows(table, "x.bias"):  # 1-D: no ranks at all
        assert row["rel_update"] == 0 and row["changed_frac"] == 0
        assert row["stable_rank"] is None and row["effective_rank"] is None


def test_zero_base_tensor(tmp_path):
    # ||W_0|| = 0: rel_update is 0 without an update, null with one; an entry whose W_0 is 0
    # counts as changed iff its ΔW != 0, however small.
    base = write(tmp_path / "base", {"same": torch.zeros(3), "moved": torch.zeros(4)})
    moved = torch.tensor([0.0, 1e-30, 0.0, -2.0])
    ckpt = write(tmp_path / "c", {"same": torch.zeros(3), "moved": moved})
    table = run(base, [(1, ckpt)])
    assert rows(table, "same")[0]["rel_update"] == 0.0
    (row,) = rows(table, "moved")
    assert row["rel_update"] is None and row["update_norm"] == pytest.approx(2.0)
    assert row["changed_frac"] == pytest.approx(2 / 4)


def test_changes_below_tolerance_count_as_unchanged(tmp_path):
    # W_0 = 1 everywhere; tolerance 2^-8: |ΔW| = 2^-9 is unchanged, 2^-7 and 2^-8 + 2^-20 changed,
    # exactly 2^-8 is not (the rule is |ΔW| > tolerance * |W_0|). All exact in float32.
    w0 = torch.ones(8)
    w1 = w0.clone()
    w1[0] += 2**-9
    w1[1] -= 2**-9
    w1[2] += 2**-7
    w1[3] += 2**-8
    w1[4] += 2**-8 + 2**-20
    base = write(tmp_path / "base", {"w": w0})
    ckpt = write(tmp_path / "c", {"w": w1})
    (row,) = rows(run(base, [(1, ckpt)]), "w")
    assert row["changed_frac"] == pytest.approx(2 / 8)
    (row,) = rows(run(base, [(1, ckpt)], tolerance=2**-10), "w")
    assert row["changed_frac"] == pytest.approx(5 / 8)


def test_cos_prev_of_same_and_opposite_increments(tmp_path):
    w0 = torch.randn(5, 7, generator=torch.Generator().manual_seed(0))
    d = torch.randn(5, 7, generator=torch.Generator().manual_seed(1)) * 0.25
    base = write(tmp_path / "base", {"w": w0})
    # increments: d, d (same direction), -d (opposite), 0 (none), d
    weights = [w0 + d, w0 + 2 * d, w0 + d, w0 + d, w0 + 2 * d]
    ckpts = [(10 * (i + 1), write(tmp_path / f"c{i}", {"w": w})) for i, w in enumerate(weights)]
    got = rows(run(base, ckpts), "w")
    assert [r["step"] for r in got] == [10, 20, 30, 40, 50]
    assert got[0]["cos_prev"] is None
    assert got[1]["cos_prev"] == pytest.approx(1.0, abs=1e-6)
    assert got[2]["cos_prev"] == pytest.approx(-1.0, abs=1e-6)
    assert got[3]["cos_prev"] is None  # a zero increment has no direction
    assert got[4]["cos_prev"] is None  # nor does the one before it
    norm_d = torch.linalg.vector_norm(d).item()
    expected = [norm_d, norm_d, norm_d, 0.0, norm_d]
    assert [r["increment_norm"] for r in got] == pytest.approx(expected, rel=1e-5, abs=1e-6)
    assert got[3]["rel_update"] == pytest.approx(got[0]["rel_update"], rel=1e-6)


# ---------------------------------------------------------------------------------------------
# Storage: dtypes and shards


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_checkpoint_of_float32_base(tmp_path, dtype):
    # Storing W_0 in bf16 / f16 moves every entry by up to the unit roundoff (2^-8 / 2^-11)
    # times |W_0|: none of that counts as changed; the k entries really moved do.
    g = torch.Generator().manual_seed(0)
    w0 = torch.randn(16, 32, generator=g) + 0.1
    w1 = w0.clone()
    touched = torch.randperm(w0.numel(), generator=g)[:37]
    w1.view(-1)[touched] += 0.5
    base = write(tmp_path / "base", {"w": w0})
    ckpt = write(tmp_path / "c", {"w": w1.to(dtype)})
    (row,) = rows(run(base, [(1, ckpt)]), "w")
    assert row["changed_frac"] == pytest.approx(37 / w0.numel())
    assert row["update_norm"] == pytest.approx(0.5 * math.sqrt(37), rel=0.02)


def test_bf16_base_and_checkpoint(tmp_path):
    w0 = torch.randn(8, 8, generator=torch.Generator().manual_seed(0)).bfloat16()
    w1 = w0.clone()
    w1[1, 2] = w1[1, 2] + 1
    base = write(tmp_path / "base", {"same": w0, "w": w0})
    ckpt = write(tmp_path / "c", {"same": w0, "w": w1})
    table = run(base, [(1, ckpt)])
    assert rows(table, "same")[0]["update_norm"] == 0.0
    (row,) = rows(table, "w")
    assert row["changed_frac"] == pytest.approx(1 / 64)
    assert row["update_norm"] == pytest.approx(float(w1[1, 2]) - float(w0[1, 2]))
    assert row["stable_rank"] == pytest.approx(1.0) and row["effective_rank"] == pytest.approx(1.0)


def test_sharded_base_equals_single_file(tmp_path):
    g = torch.Generator().manual_seed(0)
    tensors = {
        "model.embed_tokens.weight": torch.randn(10, 4, generator=g),
        "model.layers.0.self_attn.q_proj.weight": torch.randn(4, 4, generator=g),
        "model.layers.0.input_layernorm.weight": torch.randn(4, generator=g),
        "model.norm.weight": torch.randn(4, generator=g),
    }
    moved = {k: v + 0.1 * torch.randn(v.shape, generator=g) for k, v in tensors.items()}
    single = write(tmp_path / "single", tensors)
    sharded = tmp_path / "sharded"
    names = sorted(tensors)
    weight_map = {}
    for i, part in enumerate((names[:2], names[2:])):
        file = f"model-0000{i + 1}-of-00002.safetensors"
        write(sharded, {k: tensors[k] for k in part}, file)
        weight_map.update(dict.fromkeys(part, file))
    (sharded / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    ckpt = write(tmp_path / "c", moved)
    assert run(sharded, [(1, ckpt)]).equals(run(single, [(1, ckpt)]))
    # a sharded checkpoint reads the same too
    assert run(single, [(1, sharded)]).equals(run(single, [(1, single)]))


# ---------------------------------------------------------------------------------------------
# LoRA adapters, checked against peft's own merge


@pytest.fixture(scope="module")
def lora_dirs(tmp_path_factory):
    """Two tiny Llama bases and an adapter on each, saved by peft, with the update that peft's
    merge_and_unload makes to every base tensor:

    - "patterns": tied embeddings (no lm_head.weight in the base file), LoRA on q, v, down with
      rank_pattern (down r=2) and alpha_pattern (layer 1's v alpha=3);
    - "rslora": untied, use_rslora, LoRA on k, up and the embeddings (peft also saves the
      embedding's base layer), lm_head in modules_to_save and moved by hand.
    """
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    root = tmp_path_factory.mktemp("lora")
    variants = {
        "patterns": dict(
            target_modules=["q_proj", "v_proj", "down_proj"],
            rank_pattern={"down_proj": 2},
            alpha_pattern={r"layers\.1\.self_attn\.v_proj": 3},
        ),
        "rslora": dict(
            target_modules=["k_proj", "up_proj", "embed_tokens"],
            use_rslora=True,
            modules_to_save=["lm_head"],
        ),
    }
    out = {}
    for seed, (name, kwargs) in enumerate(variants.items()):
        config = LlamaConfig(
            vocab_size=64,
            hidden_size=32,
            intermediate_size=48,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,  # k_proj / v_proj are 16 x 32
            max_position_embeddings=64,
            tie_word_embeddings=name == "patterns",
        )
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
        model.save_pretrained(root / name / "base")
        base_state = {k: v.clone() for k, v in model.state_dict().items()}
        lora = LoraConfig(r=4, lora_alpha=8, init_lora_weights=False, **kwargs)  # B != 0
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # peft's notes on saving embedding layers
            peft_model = get_peft_model(model, lora)
            if "modules_to_save" in kwargs:
                head = peft_model.base_model.model.lm_head.modules_to_save["default"]
                head.weight.data += 0.01 * torch.randn(head.weight.shape)
            peft_model.save_pretrained(root / name / "adapter")
            merged = peft_model.merge_and_unload().state_dict()
        out[name] = {k: merged[k] - base_state[k] for k in base_state}
    return root, out


@pytest.mark.parametrize("variant", ["patterns", "rslora"])
def test_lora_update_equals_peft_merge(lora_dirs, variant):
    root, updates = lora_dirs
    base, adapter, expected = root / variant / "base", root / variant / "adapter", updates[variant]
    with safe_open(base / "model.safetensors", "pt") as f:
        names = list(f.keys())
    # tied embeddings: lm_head.weight is absent from the base, as save_pretrained writes it
    assert ("lm_head.weight" in names) == (variant == "rslora")
    touched = set()
    for name in names:
        delta = load_update(base, adapter, name)
        assert torch.allclose(delta, expected[name], rtol=0, atol=1e-6), name
        if expected[name].abs().max() > 0:
            touched.add(classify(name)[1])
    assert (
        touched
        == {"patterns": {"q", "v", "down"}, "rslora": {"k", "up", "embed", "lm_head"}}[variant]
    )
    table = run(base, [(5, adapter)])
    assert sorted(table.column("name").to_pylist()) == sorted(names)
    for row in table.to_pylist():
        norm = torch.linalg.vector_norm(expected[row["name"]]).item()
        assert row["update_norm"] == pytest.approx(norm, rel=1e-5, abs=1e-7), row["name"]
    untargeted = [r for r in table.to_pylist() if r["module"] in ("gate", "o", "norm")]
    assert untargeted and all(r["update_norm"] == 0 and r["changed_frac"] == 0 for r in untargeted)


def test_lora_rank_of_update_is_at_most_r(lora_dirs):
    root, _ = lora_dirs
    table = run(root / "patterns" / "base", [(5, root / "patterns" / "adapter")])
    down = [r for r in table.to_pylist() if r["module"] == "down"]
    assert down and all(r["stable_rank"] <= 2 + 1e-4 and r["effective_rank"] <= 2 for r in down)


# ---------------------------------------------------------------------------------------------
# Randomized SVD against exact


def _spectrum_matrix(values, seed):
    n = values.numel()
    u, v = orthonormal(n, n, seed), orthonormal(n, n, seed + 1)
    return ((u * values) @ v.T).float()


def test_randomized_svd_error_bound():
    # The module docstring's realistic case: a 2048 x 2048 update whose singular values decay
    # as exp(-i/8) (exact effective rank 21.8). Top 64 values, 4 power iterations.
    n = 2048
    values = torch.exp(-torch.arange(n, dtype=torch.float64) / 8)
    matrix = _spectrum_matrix(values, seed=0)
    frobenius_sq = float((values**2).sum())
    got, method = singular_values(matrix, "auto", rank=64, exact_max=1024, niter=4)
    assert method == "randomized" and got.numel() == 64
    stable, effective, energy = spectrum_stats(got, frobenius_sq)
    exact_stable, exact_effective = frobenius_sq / values[0].item() ** 2, erank(values)
    assert exact_effective == pytest.approx(21.76, abs=0.01)
    assert stable == pytest.approx(exact_stable, rel=1e-4)
    assert effective == pytest.approx(exact_effective, rel=0.01)
    assert energy == pytest.approx(1.0, abs=1e-4)


def test_randomized_effective_rank_is_that_of_the_top_values():
    # Heavy tail (σ_i = 1/i): the randomized effective rank is that of the top k values, a lower
    # bound of the exact one; spectrum_energy shows a part of the update was not seen.
    n, k = 1024, 32
    values = 1 / torch.arange(1, n + 1, dtype=torch.float64)
    got, method = singular_values(_spectrum_matrix(values, seed=3), "randomized", rank=k)
    assert method == "randomized"
    _, effective, energy = spectrum_stats(got, float((values**2).sum()))
    assert effective == pytest.approx(erank(values[:k]), rel=0.01)
    assert effective < 0.2 * erank(values)
    assert 0.9 < energy < 0.995


def test_auto_switches_to_randomized_above_exact_max(tmp_path):
    g = torch.Generator().manual_seed(0)
    w0 = torch.randn(40, 30, generator=g)
    update = (orthonormal(40, 3, 1) @ orthonormal(30, 3, 2).T).float()  # σ = (1, 1, 1)
    base = write(tmp_path / "base", {"w": w0})
    ckpt = write(tmp_path / "c", {"w": w0 + update})
    exact = rows(run(base, [(1, ckpt)], svd_exact_max=30), "w")[0]
    randomized = rows(run(base, [(1, ckpt)], svd_exact_max=29, svd_rank=8), "w")[0]
    assert exact["svd"] == "exact" and randomized["svd"] == "randomized"
    for row in (exact, randomized):
        assert row["stable_rank"] == pytest.approx(3.0, rel=1e-4)
        assert row["effective_rank"] == pytest.approx(3.0, rel=1e-3)
        assert row["spectrum_energy"] == pytest.approx(1.0, abs=1e-5)
    again = rows(run(base, [(1, ckpt)], svd="randomized", svd_rank=8), "w")[0]
    assert again == randomized  # seeded: reproducible


# ---------------------------------------------------------------------------------------------
# aggregate


def test_aggregate_by_hand(tmp_path):
    g = torch.Generator().manual_seed(0)
    k0 = torch.randn(6, 8, generator=g)
    k1 = torch.randn(4, 4, generator=g)
    base = {
        # layer 0, q: weight ||W_0|| = 6, ||ΔW|| = 2; bias ||W_0|| = 8, ||ΔW|| = 1, 1 of 2 moved
        "model.layers.0.self_attn.q_proj.weight": 3 * torch.ones(2, 2),
        "model.layers.0.self_attn.q_proj.bias": torch.tensor([8.0, 0.0]),
        # k in two layers: a rank-2 update (stable rank 2) on 48 entries, rank 1 on 16
        "model.layers.0.self_attn.k_proj.weight": k0,
        "model.layers.1.self_attn.k_proj.weight": k1,
    }
    moved = dict(base)
    moved["model.layers.0.self_attn.q_proj.weight"] = 3 * torch.ones(2, 2) + 1
    moved["model.layers.0.self_attn.q_proj.bias"] = torch.tensor([9.0, 0.0])
    moved["model.layers.0.self_attn.k_proj.weight"] = (
        k0 + (orthonormal(6, 2, 1) @ orthonormal(8, 2, 2).T).float()
    )
    moved["model.layers.1.self_attn.k_proj.weight"] = (
        k1 + (orthonormal(4, 1, 3) @ orthonormal(4, 1, 4).T).float()
    )
    table = run(write(tmp_path / "base", base), [(1, write(tmp_path / "c", moved))])

    by_layer = {(r["layer"], r["module"]): r for r in aggregate(table).to_pylist()}
    q = by_layer[(0, "q")]
    assert q["n_tensors"] == 2 and q["numel"] == 6
    assert q["rel_update"] == pytest.approx(math.sqrt(4 + 1) / math.sqrt(36 + 64))
    assert q["changed_frac"] == pytest.approx((4 * 1.0 + 2 * 0.5) / 6)
    assert q["update_sparsity"] == pytest.approx(1 / 6)
    assert q["stable_rank"] == pytest.approx(1.0, rel=1e-5)  # the bias has no rank

    (k,) = [r for r in aggregate(table, by=("step", "module")).to_pylist() if r["module"] == "k"]
    assert k["n_tensors"] == 2 and k["numel"] == 64
    assert k["stable_rank"] == pytest.approx((48 * 2 + 16 * 1) / 64, rel=1e-4)
    assert k["effective_rank"] == pytest.approx(1.75, rel=1e-3)
    assert k["rel_update"] == pytest.approx(
        math.sqrt(2 + 1) / math.hypot(k0.norm().item(), k1.norm().item()), rel=1e-5
    )


def test_aggregate_cos_prev_of_concatenated_increments(tmp_path):
    # two tensors in one group: a moves by d then d (cos 1); b by e then -e (cos -1), with
    # ||d|| = 2 ||e||: the combined cosine is (4 - 1) / (4 + 1) = 0.6.
    g = torch.Generator().manual_seed(0)
    a0, b0 = torch.randn(3, 3, generator=g), torch.randn(3, 3, generator=g)
    e = torch.randn(3, 3, generator=g)
    d = 2 * e.norm() * orthonormal(9, 1, 5).float().reshape(3, 3)
    names = ("model.layers.0.mlp.up_proj.weight", "model.layers.0.mlp.up_proj.bias")
    base = write(tmp_path / "base", {names[0]: a0, names[1]: b0})
    c1 = write(tmp_path / "c1", {names[0]: a0 + d, names[1]: b0 + e})
    c2 = write(tmp_path / "c2", {names[0]: a0 + 2 * d, names[1]: b0})
    combined = aggregate(run(base, [(1, c1), (2, c2)])).to_pylist()
    assert [r["cos_prev"] for r in combined] == [None, pytest.approx(0.6, abs=1e-5)]


# ---------------------------------------------------------------------------------------------
# Errors name the file and the tensor


def test_missing_tensor_in_checkpoint(tmp_path):
    base = write(tmp_path / "base", {"a": torch.ones(2), "b": torch.ones(2)})
    ckpt = write(tmp_path / "c", {"a": torch.ones(2)})
    with pytest.raises(InputError, match=r"c/model\.safetensors: tensor 'b'.*missing"):
        run(base, [(1, ckpt)])


def test_shape_mismatch(tmp_path):
    base = write(tmp_path / "base", {"a": torch.ones(2, 3)})
    ckpt = write(tmp_path / "c", {"a": torch.ones(3, 2)})
    with pytest.raises(InputError, match=r"c/model\.safetensors: tensor 'a' has shape 3x2.*2x3"):
        run(base, [(1, ckpt)])


def test_checkpoint_without_weights(tmp_path):
    base = write(tmp_path / "base", {"a": torch.ones(2)})
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "pytorch_model.bin").write_bytes(b"")
    with pytest.raises(InputError, match=r"empty: neither model weights.*nor a LoRA adapter"):
        run(base, [(1, tmp_path / "empty")])


def test_adapter_key_matching_no_base_tensor(tmp_path):
    base = write(tmp_path / "base", {"model.layers.0.self_attn.q_proj.weight": torch.ones(4, 4)})
    adapter = write(
        tmp_path / "lora",
        {
            "base_model.model.model.layers.0.self_attn.qkv.lora_A.weight": torch.ones(2, 4),
            "base_model.model.model.layers.0.self_attn.qkv.lora_B.weight": torch.ones(4, 2),
        },
        file="adapter_model.safetensors",
    )
    (adapter / "adapter_config.json").write_text(json.dumps({"r": 2, "lora_alpha": 4}))
    with pytest.raises(
        InputError, match=r"adapter_model\.safetensors: adapter tensor '.*qkv\.lora_B\.weight'"
    ):
        run(base, [(1, adapter)])


def test_dora_adapter_is_refused(tmp_path):
    base = write(tmp_path / "base", {"a": torch.ones(2)})
    adapter = write(tmp_path / "lora", {}, file="adapter_model.safetensors")
    config = {"r": 2, "lora_alpha": 4, "use_dora": True}
    (adapter / "adapter_config.json").write_text(json.dumps(config))
    with pytest.raises(InputError, match=r"adapter_config\.json: use_dora"):
        run(base, [(1, adapter)])


def test_steps_must_increase(tmp_path):
    base = write(tmp_path / "base", {"a": torch.ones(2)})
    with pytest.raises(InputError, match="strictly increasing"):
        run(base, [(2, base), (1, base)])


# ---------------------------------------------------------------------------------------------
# The heatmap


def test_heatmap_png(tmp_path):
    from PIL import Image

    g = torch.Generator().manual_seed(0)
    names = [
        "model.embed_tokens.weight",
        "model.norm.weight",
        *(f"model.layers.{i}.self_attn.{m}_proj.weight" for i in range(2) for m in "qkvo"),
        *(f"model.layers.{i}.mlp.{m}_proj.weight" for i in range(2) for m in ("gate", "down")),
    ]
    base = {n: torch.randn(4, 4, generator=g) for n in names}
    base["model.norm.weight"] = torch.ones(4)
    c1 = write(
        tmp_path / "c1", {n: w + 0.01 * torch.randn(w.shape, generator=g) for n, w in base.items()}
    )
    c2 = write(
        tmp_path / "c2", {n: w + 0.02 * torch.randn(w.shape, generator=g) for n, w in base.items()}
    )
    table = run(write(tmp_path / "base", base), [(1, c1), (2, c2)])
    for metric in ("rel_update", "cos_prev"):
        path = tmp_path / "plots" / f"{metric}.png"
        heatmap_figure(table, path, metric=metric)
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        with Image.open(path) as image:
            assert image.format == "PNG" and image.size[0] > 200 and image.size[1] > 150
    heatmap_figure(aggregate(table), tmp_path / "first.png", metric="changed_frac", step=1)
    assert (tmp_path / "first.png").is_file()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []
    with pytest.raises(InputError, match="metric='nope'"):
        heatmap_figure(table, tmp_path / "x.png", metric="nope")
    with pytest.raises(InputError, match="step=3 is not in the table"):
        heatmap_figure(table, tmp_path / "x.png", step=3)
