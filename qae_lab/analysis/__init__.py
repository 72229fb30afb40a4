"""Committed runs and findings to numbers and sentences, no plotting: loading and grouping runs, statistics, the papers' claims, the sequence-policy findings."""
