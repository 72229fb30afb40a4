"""Every name a participant reads on screen, written once: the baselines', token weightings' and metrics' names.

Pure data, the standard library only. Nothing here imports plotly or ipywidgets.
"""

BASELINE_NAMES = {"mean": "mean (GRPO)", "quantile": "K-quantile (QAE)"}
WEIGHTING_NAMES = {"none": "none", "ah": "AH", "sa_ah": "SA-AH"}
