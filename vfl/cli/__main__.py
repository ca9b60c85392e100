"""``python -m vfl.cli``: the ``vfl`` command."""

import sys

from vfl.cli import main

sys.exit(main())
