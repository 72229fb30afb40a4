"""Training inside TRL (the `train` extra): the config, the thin GRPOTrainer subclass, its callbacks and the held-out regime evaluation."""
