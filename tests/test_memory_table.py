import pytest

from benchmarks.memory_table import QWEN25, Arch, activation_bytes, main, state_bytes, table


def test_full_fine_tuning_zero2_on_8_gpus_by_hand():
    # 2 bytes of bf16 weights, replicated, + (2 grads + 12 Adam) / 8 = 3.75 bytes per parameter.
    s = state_bytes(1e9, gpus=8, zero=2)
    assert s["weights"] == pytest.approx(2e9)
    assert s["grads"] + s["optimizer"] == pytest.approx(14e9 / 8)
    assert sum(s.values()) == pytest.approx(3.75e9)


def test_zero3_shards_the_weights_but_not_the_reference():
    s = state_bytes(1e9, gpus=8, zero=3, kl=True)
    assert s["weights"] == pytest.approx(2e9 / 8) and s["reference"] == pytest.approx(2e9)
    assert sum(s.values()) == pytest.approx(16 * 1e9 / 8 + 2e9)
    assert state_bytes(1e9, gpus=8, zero=2, kl=True)["reference"] == pytest.approx(2e9)


def test_lora_trains_only_the_adapters_and_keeps_no_reference_copy():
    s = state_bytes(1e9, gpus=8, zero=2, trainable=1e7, kl=True)
    assert s["weights"] == pytest.approx(2 * (1e9 + 1e7))
    assert s["grads"] == pytest.approx(2e7 / 8) and s["optimizer"] == pytest.approx(12e7 / 8)
    assert s["reference"] == 0


def test_parameter_counts_from_the_architectures_are_the_published_ones():
    # The totals the Qwen2.5 model cards report (0.49B, 1.54B, 3.09B, 7.61B).
    assert QWEN25["0.5B"].params() == 494_032_768
    assert QWEN25["1.5B"].params() == 1_543_714_304
    assert QWEN25["3B"].params() == 3_085_938_688
    assert QWEN25["7B"].params() == 7_615_616_512


def test_lora_parameters_by_hand():
    # One block: q (4->4), k and v (4->2: 1 kv head of 2 dims), o (4->4), gate/up (4->8),
    # down (8->4); rank 2: 2 * (in + out) each.
    arch = Arch("toy", hidden=4, intermediate=8, layers=3, heads=2, kv_heads=1, vocab=10, tied=True)
    per_block = 2 * ((4 + 4) + (4 + 2) + (4 + 2) + (4 + 4) + (4 + 8) + (4 + 8) + (8 + 4))
    assert arch.lora_params(2) == 3 * per_block


def test_activation_formula_by_hand():
    arch = Arch("toy", hidden=4, intermediate=8, layers=3, heads=2, kv_heads=1, vocab=10, tied=True)
    b, s, t = 2, 5, 3
    assert activation_bytes(arch, b, s, t) == 2 * 3 * b * s * 4 + 34 * b * s * 4 + 10 * b * t * 10
    # fp32 logits of 6 tokens x 10 = 240 bytes: over 100, the head runs 100 // 40 = 2 at a time
    chunked = activation_bytes(arch, b, s, t, chunk_bytes=100)
    assert chunked == 2 * 3 * b * s * 4 + 34 * b * s * 4 + 10 * 2 * 10


def test_table_covers_every_size_and_mode_and_prints(capsys):
    rows = table()
    assert [r["model"] for r in rows[::4]] == list(QWEN25)
    assert all(r["total_kl_gb"] >= r["total_kl0_gb"] for r in rows)
    main([])
    out = capsys.readouterr().out
    assert "COMPUTED, not measured" in out and out.count("\n| ") == len(rows) + 1
