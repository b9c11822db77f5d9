"""``python -m samzamp.worker``: how ``WorkerPool`` starts a worker process."""

import sys

from samzamp.worker.host import main

sys.exit(main())
