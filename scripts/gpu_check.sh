#!/usr/bin/env bash
# One short check of the GPU path, on a machine with one NVIDIA GPU and no internet:
#
#   scripts/gpu_check.sh [MODEL_DIR]            # or MODEL_DIR=... scripts/gpu_check.sh
#   scripts/gpu_check.sh --device cpu           # smoke test of the same steps on CPU, small
#
#   0. the backend contract tests and the real-tokenizer tests (CPU, seconds): Qwen3's tokenizer
#      and chat template, generation ending at <|im_end|>, log-probs under padding, chunked
#      LM head = whole (tests/test_real_model.py, the pipeline test left out); and ZeRO-3 on
#      2 CPU processes against one (tests/test_distributed.py -k zero3, about 30 s);
#   a. GRPO steps of the tiny-world model on the GPU (HF backend);
#   b. GRPO steps of a 0.6B model on the GPU with the HF backend: 8 prompts (through the chat
#      template) x 8 completions x 64 tokens, 3 timed steps (benchmarks/gpu_step.py). MODEL_DIR
#      is a local Hugging Face model directory; without one, a Qwen3-0.6B-shaped model with
#      random weights and Qwen3's real tokenizer is built locally (grpo_core/models/qwen3.py,
#      the builder the tests use; no download);
#   b2. peak GPU memory of one micro-batch's log-probs (16 x 1,024 tokens, V = 151,936),
#      the LM head whole against in chunks (benchmarks/logprob_memory.py);
#   c. the same with the vLLM backend (colocated engine) when `import vllm` works, else skipped.
#
# Each step prints its step times and ends with a JSON line; a summary table follows
# (ms/step, tokens/s, torch.cuda.max_memory_allocated). Outputs stay in $OUT_DIR (default: a
# temporary folder). Only local files are read; HF_HUB_OFFLINE is set.
set -euo pipefail

cd "$(dirname "$0")/.."
DEVICE=cuda
MODEL_DIR=${MODEL_DIR:-}
while [[ $# -gt 0 ]]; do
    case "$1" in
        --device) DEVICE=$2; shift 2 ;;
        --device=*) DEVICE=${1#*=}; shift ;;
        -h|--help) sed -n '2,23p' "$0"; exit 0 ;;
        *) MODEL_DIR=$1; shift ;;
    esac
done

PY=${PYTHON:-python}
if [[ -z ${PYTHON:-} && -x .venv/bin/python ]]; then PY=.venv/bin/python; fi
export PYTHONPATH=.${PYTHONPATH:+:$PYTHONPATH}
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1
OUT_DIR=${OUT_DIR:-$(mktemp -d -t gpu-check-XXXXXX)}
mkdir -p "$OUT_DIR"
STEP_TIMEOUT=${STEP_TIMEOUT:-600}

# Sizes: the real check on a GPU; a few tokens on CPU (a smoke test of the same code).
if [[ $DEVICE == cpu ]]; then
    TINY=(--prompts 4 --group 4 --new-tokens 8 --steps 2 --warmup 1)
    BIG=(--prompts 2 --group 2 --new-tokens 8 --steps 1 --warmup 1 --micro-batch 4)
    MAKE=(--layers 2)
else
    TINY=(--prompts 16 --group 8 --new-tokens 16 --steps 5 --warmup 1)
    BIG=(--prompts 8 --group 8 --new-tokens 64 --steps 3 --warmup 1)
    MAKE=()
fi

banner() { printf '\n==== %s ====\n' "$*"; }

# Runs one benchmark; its last stdout line (the JSON report) goes to $OUT_DIR/$1.json.
bench() {
    local name=$1; shift
    timeout "$STEP_TIMEOUT" "$PY" -m benchmarks.gpu_step "$@" | tee "$OUT_DIR/$name.log"
    tail -n 1 "$OUT_DIR/$name.log" > "$OUT_DIR/$name.json"
}

banner "environment"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv || echo "nvidia-smi: not found"
"$PY" - <<'EOF'
import torch
print(f"torch {torch.__version__}, cuda available: {torch.cuda.is_available()}", end="")
print(f", {torch.cuda.get_device_name(0)}" if torch.cuda.is_available() else "")
try:
    import vllm
    print(f"vllm {vllm.__version__}")
except ImportError:
    print("vllm: not installed")
EOF

banner "0. backend contract tests (CPU)"
timeout "$STEP_TIMEOUT" "$PY" -m pytest -q -p no:cacheprovider tests/test_backends.py \
    tests/test_real_model.py -m "not pipeline"
# ZeRO-3 (2 CPU processes) on this machine's torch and DeepSpeed builds
timeout "$STEP_TIMEOUT" "$PY" -m pytest -q -p no:cacheprovider tests/test_distributed.py -k zero3

banner "a. tiny-world model, HF backend, $DEVICE"
bench tiny_hf --device "$DEVICE" --backend hf "${TINY[@]}"

banner "b. Qwen3-0.6B-shaped model (real tokenizer), HF backend, $DEVICE"
if [[ -z $MODEL_DIR ]]; then
    MODEL_DIR=$OUT_DIR/qwen3-0.6b-shaped-random
    if [[ ! -f $MODEL_DIR/config.json ]]; then
        "$PY" -m benchmarks.gpu_step --make-model "$MODEL_DIR" --size 0.6B "${MAKE[@]}"
    fi
fi
[[ -f $MODEL_DIR/config.json ]] || { echo "error: no config.json in $MODEL_DIR" >&2; exit 2; }
bench model_hf --model "$MODEL_DIR" --device "$DEVICE" --backend hf "${BIG[@]}"

banner "b2. log-prob memory of one micro-batch, V = 151,936, $DEVICE"
if [[ $DEVICE == cuda ]]; then
    timeout "$STEP_TIMEOUT" "$PY" -m benchmarks.logprob_memory --device cuda --dtype bf16 \
        --hidden 1024 --max-gb 60 | tee "$OUT_DIR/logprob_memory.log"
else
    timeout "$STEP_TIMEOUT" "$PY" -m benchmarks.logprob_memory --rows 2 --lengths 64 --chunk-bytes 4000000 \
        | tee "$OUT_DIR/logprob_memory.log"
fi

banner "c. same model, vLLM backend, $DEVICE"
if [[ $DEVICE != cuda ]]; then
    echo "skipped: the vLLM backend needs --device cuda"
elif ! "$PY" -c "import vllm" 2>/dev/null; then
    echo "skipped: vllm is not installed (pip install .[vllm])"
else
    bench model_vllm --model "$MODEL_DIR" --device "$DEVICE" --backend vllm "${BIG[@]}"
fi

banner "summary (from $OUT_DIR)"
"$PY" - "$OUT_DIR" <<'EOF'
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
print("| run | backend | params | ms/step | generate ms | update ms | sync ms | rollout tok/s | memory GB |")
print("|---|---|---|---|---|---|---|---|---|")
for name in ("tiny_hf", "model_hf", "model_vllm"):
    f = out / f"{name}.json"
    if not f.exists():
        continue
    r = json.loads(f.read_text())
    mem = r.get("max_memory_allocated_gb", r.get("peak_rss_gb"))
    kind = "max_memory_allocated" if "max_memory_allocated_gb" in r else "peak RSS"
    print(f"| {name} | {r['backend']} | {r['params'] / 1e6:.1f}M | {r['ms_per_step']} "
          f"| {r['generate_ms']} | {r['update_ms']} | {r['sync_ms']} "
          f"| {r['rollout_tokens_per_s']} | {mem} ({kind}) |")
    if "mismatch" in r:
        print(f"  vLLM vs trainer log-probs: {r['mismatch']}")
EOF
