"""Runs: presets and settings, the pipeline (evaluate, train, evaluate, report), export, cost estimates and the command line."""
