"""samzamp's version: the one place it is written (setup.py reads this file; ``samzamp.__version__``)."""

__version__ = "0.1.0"
