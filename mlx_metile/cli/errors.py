"""The commands' error for a bad argument found after parsing."""


class UsageError(Exception):
    """A bad argument found after parsing (a path that is no model, an unknown format): exit code 2."""
