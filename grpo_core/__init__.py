"""grpo_core: the library behind grpo-lab's DVC stages, one subpackage per concern.

Imports point one way, down this list (tests/test_layout.py checks it):

    errors                 what the user got wrong (InputError) or stopped (Interrupted)
    io, registry,          the shared base: atomic outputs and readable inputs, named
    codedeps, compare      registries, the code a stage runs (its deps in dvc.yaml),
                           experiments side by side (`python -m stages.compare`)
    algorithms             the math of RL fine-tuning: advantages, losses, CoDaPO, Off-Context,
                           and the named presets behind `algo`
    config                 params.yaml, one module per section
    rewards                verifiers (math, mcq, code in its sandbox) and reward shaping
    rollout                sampling completions and scoring them (HF, vLLM)
    data                   the problem schema, prompt templates, benchmark adapters, the tiny world
    models                 where a model comes from: the tiny world, a directory, the hub; SFT
    analysis               what a fixed model does (profiles, guides, evaluation) and what
                           training changed (tensor and token dynamics)
    training               the RL loop: trainer, update, data parallelism, checkpoints, resume
    studies                variants x seeds of the pipeline as DVC stages; reports, statistics

A subpackage imports only from those above it in this list (never from `stages`).
"""
