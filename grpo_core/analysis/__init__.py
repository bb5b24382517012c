"""What a fixed model does and what training changed: sampling and scoring a model on problems,
difficulty profiles, OC-GRPO guide fractions, evaluation metrics (avg@k, pass@k, maj@k), and
the tensor- and token-level dynamics of a run (`weights` reads the checkpoints, `spectrum` the
singular values of an update, `figures` draws the dynamics stage's PNGs).

Imports: `algorithms`, `config`, `rewards`, `rollout`, `data` and the shared base; never
`training` (its outputs are read from files: checkpoints and the rollout log)."""
