"""``python -m samzamp COMMAND ...``: the same as the ``samzamp`` command."""

import sys

from samzamp.cli.main import main

sys.exit(main())
