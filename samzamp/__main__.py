"""``python -m samzamp COMMAND ...``: the same as the ``samzamp`` command."""

import sys

from samzamp.cli.main import main

if __name__ == "__main__":  # imported (a walk over every module), it runs nothing
    sys.exit(main())
