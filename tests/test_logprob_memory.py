"""`benchmarks.logprob_memory` end to end on a small case (V = 32,000, 4 rows, T = 64, pieces of
32 tokens), each measurement in its own subprocess: the JSON report is the last line printed,
the chunked path's peak is below the unchunked one's, and the two agree. Memory is compared
between the two paths, never against a fixed number; no timing is asserted."""

import json

from benchmarks import logprob_memory


def test_chunked_peak_below_unchunked_and_equal(capsys):
    chunk = 2**22  # 32 tokens of float32 logits; the (4, 64, 32000) logits are 33 MB
    argv = ["--rows", "4", "--lengths", "64", "--prompt-len", "8", "--hidden", "32"]
    argv += ["--vocab", "32000", "--chunk-bytes", str(chunk)]
    report = logprob_memory.main(argv)
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1]) == report
    assert report["chunk_tokens"] == 32
    (row,) = report["lengths"]
    assert row["T"] == 64 and row["tokens"] == 256 and not row["before_estimated"]
    assert row["btv_fp32_mb"] == round(4 * 256 * 32000 / 1e6)
    # The unchunked path holds several (B, T, V) float32 tensors at once, the chunked one a few
    # 4 MB pieces: well below one of them.
    assert row["before_mb"] > 2 * row["btv_fp32_mb"]
    assert 0 < row["min_mb"] <= row["after_mb"] < row["btv_fp32_mb"] < row["before_mb"]
    check = report["check"]
    assert check["grad_max_abs"] > 0
    for key in ("logp_max_abs_diff", "grad_max_abs_diff"):
        assert check[key] < 1e-5
    # An entropy near log(32000) = 10.4 nats, summed over 32,000 float32 terms in another
    # order (the fused head's -sum p log p against log_softmax's): 1e-6 relative.
    assert check["entropy_max_abs_diff"] < 1e-5 * 10.4
