"""An application whose ``describe`` builds another graph in each process it runs in."""

from __future__ import annotations

import os

from samzamp import StreamApplication, StreamApplicationDescriptor


class Unstable(StreamApplication):
    """An op id from the process id: the container and each worker process get another graph."""

    def describe(self, app: StreamApplicationDescriptor) -> None:
        out = app.output_stream("out")
        app.input_stream("lines").partition_by(lambda m: m, lambda m: m, id=f"p{os.getpid()}").send_to(out)
