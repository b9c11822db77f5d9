"""1. Consume: poll systems on a fetch thread, buffer per SSP, feed the chooser under flow control."""

from samzamp.consume.chooser import MessageChooser
from samzamp.consume.system_consumers import SystemConsumers

__all__ = ["MessageChooser", "SystemConsumers"]
