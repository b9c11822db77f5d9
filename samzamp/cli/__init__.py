"""Command-line entry points; bin/ scripts exec ``python -m samzamp.cli.<command>``."""
