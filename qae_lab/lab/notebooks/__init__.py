"""The notebooks' own modules: one per notebook, each imported by its notebook and its tests alone."""
