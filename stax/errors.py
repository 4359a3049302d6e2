"""Errors a user of stax can cause. Every message names what is wrong and how to fix it."""


class StaxError(Exception):
    """Base class of every error stax raises on purpose."""


class UnsupportedError(StaxError):
    """An op, dtype or argument the front end does not support."""


class ShapeError(StaxError):
    """Shapes that cannot be broadcast, reshaped or reduced as asked."""


class CallError(StaxError):
    """A compiled function called with arguments that do not match what it was compiled for."""


class KernelError(StaxError):
    """An error raised inside a generated kernel (for example integer division by zero)."""


class BuildError(StaxError):
    """The C++ compiler rejected generated code; the message carries its output and the source path."""


class InvalidScheduleError(StaxError):
    """A strategy returned a partition or an order that the validator rejects."""


class InstanceFormatError(StaxError):
    """A malformed problem or instance file."""


class StrategyNotFound(StaxError):
    """A fusion or order strategy name that no registry entry provides."""


class CacheError(BuildError):
    """A kernel cache directory or file that stax may not trust (a link, another user's, writable by
    others, changed since it was built) or cannot make."""
