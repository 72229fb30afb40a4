r"""Adapters that plug qae_lab's estimators into other RL engines (verl).

TRL is qae_lab's own engine (:mod:`qae_lab.train.trainer`); these modules are for people who
train with something else. Each imports its engine lazily, so qae_lab never needs it.
"""
