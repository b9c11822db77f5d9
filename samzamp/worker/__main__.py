"""``python -m samzamp.worker``: how ``WorkerPool`` starts a worker process."""

import sys

from samzamp.worker.host import main

# Only as the program: importing every module of the package (as the packaging test does) must not
# start a worker that waits for its spec on stdin.
if __name__ == "__main__":
    sys.exit(main())
