"""Passes and schedule choice: from a bound tile program to a thread-level kernel."""

from .lower import LowerError, lower
from .schedule import Schedule, choose

__all__ = ["LowerError", "Schedule", "choose", "lower"]
