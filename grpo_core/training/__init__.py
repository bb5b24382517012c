"""The RL loop: `GRPOTrainer.step` (sample, reward, guide or resample, advantages, update, log),
the clipped policy-gradient update, data parallelism behind a small interface (accelerate, DDP,
DeepSpeed ZeRO), LoRA, checkpoints and the resume state of a stopped run.

    trainer       GRPOTrainer: the step, in the order the algorithm runs
    batch         Question, Sampled (a step's rollouts and rewards), QuestionSampler
    sampling      sampling and rewarding groups (per-group random streams, rollout backends)
    guidance      OC-GRPO: rows sampled with a hint in the prompt, and their importance weights
    update        the clipped policy-gradient update over micro-batches, and its metrics
    parallel      one process, DDP or DeepSpeed ZeRO behind one interface; the Accelerator
    lora          LoRA adapters on named modules and layers
    rollout_log   the step's rollout metrics and per-question rows (data/rollouts.parquet)
    questions     a run's training questions
    run           the loop over steps, and the train stage's run: resume, checkpoints, dvclive
    checkpoints   weights along a run, published to checkpoints/
    resume        the resume state of a stopped run and its fingerprint
    launch        relaunching through `accelerate launch`

Imports: everything above it in `grpo_core`; only `stages.train` imports it."""
