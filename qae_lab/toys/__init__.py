"""Exact small models of the theory, pure torch: the softmax bandit, the gate's sparsity and the sequence policy with its training."""
