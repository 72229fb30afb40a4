"""``qae-lab ...`` and ``python -m qae_lab ...``: the command line (:mod:`qae_lab.runs.cli`) with the lab's report page
(:func:`qae_lab.lab.report.write_report`, which the runs layer may not import), loaded when a run ends.
"""

import sys

from qae_lab.runs import cli


def draw_report(*args, **kwargs):
    """:func:`qae_lab.lab.report.write_report`, imported when a run ends."""
    from qae_lab.lab.report import write_report  # plotting: loaded when a run ends, not when the command starts

    return write_report(*args, **kwargs)


def main(argv: list[str] | None = None) -> int:
    """The ``qae-lab`` entry point: :func:`qae_lab.runs.cli.main` with the lab's report page."""
    return cli.main(argv, report=draw_report)


if __name__ == "__main__":
    sys.exit(main())
