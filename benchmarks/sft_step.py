"""The tiny warm start's time per step under each `numerics` setting, and the weights' hash:
what portable kernels cost, and that they change no bit across thread counts.

    python -m benchmarks.sft_step --numerics portable --threads 2 [--steps 60]

Trains the default tiny model (params.yaml's `model`) for `--steps` SFT steps on the
workspace's train split (data/prepared, from `prepare`), without the calibration probe, and
prints the mean time per step and a hash of the weights. The environment is set before torch
loads. Run it alone: another job on the same cores changes the time several times over.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--numerics", choices=["portable", "native"], default="portable")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=60)
    args = ap.parse_args()
    from grpo_core.config.runtime import environment

    os.environ.update(environment(args.numerics, args.threads))
    import numpy as np
    import torch

    from grpo_core.config.params import load_params
    from grpo_core.data.prompts import guide_wording
    from grpo_core.data.schema import read_problems
    from grpo_core.models.sft import warm_start
    from grpo_core.models.tiny import build_char_tokenizer, build_tiny_model

    torch.set_num_threads(args.threads)
    cfg = load_params(ROOT / "params.yaml").model
    sft = cfg.sft.model_copy(update={"steps": args.steps, "stop": None})
    t = read_problems(ROOT / "data/prepared/train.parquet").to_pydict()
    tok = build_char_tokenizer(t["prompt"] + t["solution"] + guide_wording(t["prompt"]))
    model = build_tiny_model(tok, cfg.tiny, 0)
    start = time.perf_counter()
    warm_start(model, tok, t["prompt"], t["solution"], np.asarray(t["level"]), sft, 0)
    seconds = time.perf_counter() - start
    blob = b"".join(p.detach().numpy().tobytes() for p in model.parameters())
    result = {
        "numerics": args.numerics,
        "threads": args.threads,
        "kernels": torch.backends.cpu.get_cpu_capability(),
        "steps": args.steps,
        "ms_per_step": round(1000 * seconds / args.steps, 1),
        "weights_sha256": hashlib.sha256(blob).hexdigest()[:16],
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
