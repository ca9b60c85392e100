"""The tests' ``vfl party`` command lines state that their tables are aligned by position (issue 31).

Without ``--id`` a party runs only if its operator states that every table holds the same people in the same row
order (``--rows-aligned``; vfl.data.config.check_row_alignment). The tests' tables are made aligned, so their command
lines say so, unless they align by ``--id``, say it themselves or ask for ``--help``.
"""

from __future__ import annotations

from collections.abc import Sequence


def rows_aligned(argv: Sequence[str]) -> list[str]:
    """``argv`` with ``--rows-aligned`` added to a ``party`` command line that does not align by ``--id``."""
    args = [str(a) for a in argv]
    if args[:1] == ["party"] and not {"--id", "--rows-aligned", "--help", "-h"} & set(args):
        args.append("--rows-aligned")
    return args
