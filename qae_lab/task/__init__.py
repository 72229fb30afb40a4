"""The task: data (GSM8K, the synthetic and sums tasks), answers and verifiers, rewards, models, sampling, evaluation and behaviour metrics."""
