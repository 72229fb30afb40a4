"""Maintainer tools, not installed with the package: run from the repository root as ``python -m tools.<name>``."""
