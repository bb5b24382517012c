"""The tiny world: synthetic verifiable tasks with known difficulty, a character tokenizer and a
small standard decoder, so every RL phenomenon the papers study is observable on a laptop."""
