"""`benchmarks.step_time` end to end on a very small config: both trainers run, alternate,
and generate exactly `--new-tokens` tokens per completion; the last line printed is the JSON
report. (Timings are measured, never asserted.)"""

import json

from benchmarks import step_time


def test_agreement_reward():
    assert step_time.agreement("7+8=15", "7+8=15\n\\boxed{15}") == 1.0
    assert step_time.agreement("7+9=1x", "7+8=15") == 4 / 6
    assert step_time.agreement("", "7+8") == 0.0


def test_benchmark_runs_both_trainers_at_exact_lengths(capsys):
    argv = ["--prompts", "2", "--group", "2", "--new-tokens", "4", "--steps", "1", "--warmup", "0"]
    report = step_time.main(argv)
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1]) == report
    for key in ("ms_per_step", "rollout_tokens_per_s", "peak_rss_mb", "trl_ms_per_step", "ratio"):
        assert report[key] > 0
    for kind in ("ours", "trl"):
        part = report[kind]
        assert part["completion_length_min"] == part["completion_length_max"] == 4
        assert len(part["ms_per_step_all"]) == 1
        for key in ("generation_ms", "generation_tokens_per_s", "baseline_rss_mb"):
            assert part[key] > 0
    assert report["config"]["exact_length"] is True
