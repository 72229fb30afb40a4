"""``python -m qae_lab ...``: the command line of :mod:`qae_lab.runs.cli`."""

import sys

from qae_lab.runs.cli import main

if __name__ == "__main__":
    sys.exit(main())
