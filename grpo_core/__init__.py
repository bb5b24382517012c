"""grpo_core: the algorithms of grpo-lab as small, tested functions over padded tensors."""
