"""The main process: the container's lifecycle and the run loop where the five stages meet."""
